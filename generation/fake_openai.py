"""An OpenAI-compatible HTTP server for tests and for the offline demo model.

It speaks just enough of the API for memoryui's calls: ``POST /v1/responses``,
``POST /v1/chat/completions`` (both of its structured-output forms) and
``GET /v1/models``. A test scripts its replies (slow ones, errors with headers,
malformed or schema-violating output); when the script runs out, a responder answers.
The default responder is a small deterministic "model" that reads memoryui's own prompts
and writes plausible phase-one and phase-two output, so that the whole pipeline runs
offline: ``python -m generation.fake_openai --port 8765``.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from generation import prompts, tree

JSONDict = dict[str, Any]
DEMO_MODEL = "memoryui-offline-demo"


@dataclass
class ToolCall:
    name: str
    arguments: JSONDict
    call_id: str = ""


@dataclass
class AgentTurn:
    """An answer of a tool-calling loop: tool calls (none ends the loop) and text."""

    calls: list[ToolCall] = field(default_factory=list)
    text: str = ""


Responder = Callable[[str, JSONDict], "JSONDict | AgentTurn"]


@dataclass
class Reply:
    """One scripted answer. Give ``json`` (a structured output object) or ``raw_text``
    (the output text as is, e.g. malformed JSON) to have it wrapped in the endpoint's
    envelope, or ``body`` for the whole HTTP body; with none of them, an error body for
    an error status, else the responder's answer."""

    status: int = 200
    json: JSONDict | None = None
    raw_text: str | None = None
    body: JSONDict | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] | None = None  # (input, output) tokens; estimated when None
    # Tool calls, as (name, arguments) pairs: function_call items (Responses) or
    # tool_calls (Chat Completions); ``raw_text`` is the text beside them.
    calls: list[tuple[str, JSONDict]] | None = None

    @classmethod
    def tools(cls, *calls: tuple[str, JSONDict], text: str = "", **kwargs: Any) -> Reply:
        return cls(calls=list(calls), raw_text=text, **kwargs)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        return cls(status=status, body=error_body(status, message, code), headers=headers or {})


def error_body(status: int, message: str = "", code: str | None = None) -> JSONDict:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "requests"}
    return {
        "error": {
            "message": message or f"scripted error {status}",
            "type": kinds.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "param": None,
            "code": code,
        }
    }


# --- envelopes -------------------------------------------------------------------------

_ids = itertools.count(1)


def _call_ids(calls: list[ToolCall]) -> list[str]:
    return [c.call_id or f"call_fake{next(_ids)}" for c in calls]


def responses_envelope(
    text: str,
    *,
    model: str,
    usage: tuple[int, int],
    refusal: str | None = None,
    calls: list[ToolCall] | None = None,
) -> JSONDict:
    n = next(_ids)
    content: JSONDict = (
        {"type": "refusal", "refusal": refusal}
        if refusal is not None
        else {"type": "output_text", "text": text, "annotations": []}
    )
    output: list[JSONDict] = []
    if not calls or text:
        output.append(
            {
                "type": "message",
                "id": f"msg_fake{n}",
                "status": "completed",
                "role": "assistant",
                "content": [content],
            }
        )
    for call, call_id in zip(calls or [], _call_ids(calls or []), strict=True):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call_id}",
                "call_id": call_id,
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
        )
    return {
        "id": f"resp_fake{n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
    }


def chat_envelope(
    text: str,
    *,
    model: str,
    usage: tuple[int, int],
    refusal: str | None = None,
    calls: list[ToolCall] | None = None,
) -> JSONDict:
    tool_calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call, call_id in zip(calls or [], _call_ids(calls or []), strict=True)
    ]
    return {
        "id": f"chatcmpl-fake{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None if refusal is not None or (calls and not text) else text,
                    "refusal": refusal,
                    **({"tool_calls": tool_calls} if tool_calls else {}),
                },
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
    }


def _estimated_usage(body: JSONDict, text: str) -> tuple[int, int]:
    sent = json.dumps([body.get("instructions"), body.get("input"), body.get("messages")])
    return (max(1, len(sent) // 4), max(1, len(text) // 4))


# --- reading a request -----------------------------------------------------------------


@dataclass
class RequestParts:
    instructions: str
    prompt: str  # the first user message: the original prompt, also in a repair call
    schema_name: str
    schema: JSONDict


def request_parts(path: str, body: JSONDict) -> RequestParts:
    """The instructions, first user message and schema of either kind of request."""
    if path.endswith("/chat/completions"):
        messages = body.get("messages") or []
        system = [m for m in messages if isinstance(m, dict) and m.get("role") == "system"]
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        fmt = body.get("response_format") or {}
        spec = fmt.get("json_schema") or {}
        return RequestParts(
            instructions=_content_text(system[0].get("content")) if system else "",
            prompt=_content_text(users[0].get("content")) if users else "",
            schema_name=str(spec.get("name") or ""),
            schema=spec.get("schema") or fmt.get("schema") or {},
        )
    raw_input = body.get("input")
    if isinstance(raw_input, list):
        users = [m for m in raw_input if isinstance(m, dict) and m.get("role") == "user"]
        prompt = _content_text(users[0].get("content")) if users else ""
    else:
        prompt = str(raw_input or "")
    fmt = (body.get("text") or {}).get("format") or {}
    return RequestParts(
        instructions=str(body.get("instructions") or ""),
        prompt=prompt,
        schema_name=str(fmt.get("name") or ""),
        schema=fmt.get("schema") or {},
    )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


# --- the server ------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeOpenAI


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY a kept-alive client
    # waits for its delayed ACK (~40 ms) on every answer.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (base signature)
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server.fake.record(path, {})
        if path.endswith("/models"):
            data = [{"id": DEMO_MODEL, "object": "model", "created": 0, "owned_by": "memoryui"}]
            self._send(200, {"object": "list", "data": data}, {})
        else:
            self._send(404, error_body(404, f"no route for GET {path}"), {})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, error_body(400, "the request body is not valid JSON"), {})
            return
        if not isinstance(body, dict):
            self._send(400, error_body(400, "the request body is not a JSON object"), {})
            return
        status, payload, headers = self.server.fake.answer(path, body)
        self._send(status, payload, headers)

    def _send(self, status: int, payload: JSONDict, headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up waiting (a timeout test)


class FakeOpenAI:
    """A scripted OpenAI-compatible server on 127.0.0.1, in a daemon thread while used
    as a context manager (``port=0`` picks a free port)."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        use_demo: bool = True,
    ) -> None:
        self.responder: Responder | None = responder or (demo_responder if use_demo else None)
        self.requests: list[JSONDict] = []
        self.responses: list[JSONDict] = []  # the bodies of successful answers
        self.delay = 0.0  # seconds before every answer without a delay of its own
        self.held = 0  # requests waiting for release() after hold()
        self._open = threading.Event()
        self._open.set()
        self._replies: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self._host = host
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def hold(self) -> None:
        """Keep every answer from now on until ``release()``: the requests stay in
        flight, as with a model that is still thinking (requests are recorded first)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def record(self, path: str, body: JSONDict) -> None:
        with self._lock:
            self.requests.append({**body, "path": path})

    def answer(self, path: str, body: JSONDict) -> tuple[int, JSONDict, dict[str, str]]:
        """The status, body and headers for one request (runs in a handler thread)."""
        with self._lock:
            self.requests.append({**body, "path": path})
            reply = self._replies.popleft() if self._replies else Reply()
        if not self._open.is_set():
            with self._lock:
                self.held += 1
            self._open.wait()
            with self._lock:
                self.held -= 1
        if reply.delay or self.delay:
            time.sleep(reply.delay or self.delay)
        if reply.body is not None:
            return reply.status, reply.body, reply.headers
        if reply.status >= 400:
            return reply.status, error_body(reply.status), reply.headers
        if not path.endswith(("/responses", "/chat/completions")):
            return 404, error_body(404, f"no route for POST {path}"), reply.headers
        calls = [ToolCall(name, args) for name, args in reply.calls] if reply.calls else None
        if reply.calls is not None:
            text = reply.raw_text or ""
        elif reply.raw_text is not None:
            text = reply.raw_text
        elif reply.json is not None:
            text = json.dumps(reply.json)
        elif self.responder is None:
            return 500, error_body(500, "no scripted reply left and no responder"), {}
        else:
            try:
                answer = self.responder(path, body)
            except Exception as exc:  # a broken responder must not hang the client
                return 500, error_body(500, f"responder failed: {exc!r}"), {}
            if isinstance(answer, AgentTurn):
                text, calls = answer.text, answer.calls or None
            else:
                text = json.dumps(answer)
        sent = text + (json.dumps([[c.name, c.arguments] for c in calls]) if calls else "")
        usage = reply.usage or _estimated_usage(body, sent)
        model = str(body.get("model") or DEMO_MODEL)
        wrap = chat_envelope if path.endswith("/chat/completions") else responses_envelope
        payload = wrap(text, model=model, usage=usage, calls=calls)
        with self._lock:
            self.responses.append(payload)
        return reply.status, payload, reply.headers

    def start(self) -> FakeOpenAI:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown waits up to one poll
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.release()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def serve_forever(self) -> None:
        try:
            self._server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- the demo model --------------------------------------------------------------------

PHASE_ONE_KEYS = frozenset({"rollout_slug", "rollout_summary", "raw_memory"})
PHASE_TWO_KEYS = frozenset({"memory_md", "memory_summary"})


def demo_responder(path: str, body: JSONDict) -> JSONDict | AgentTurn:
    """A deterministic stand-in for a model that knows memoryui's two prompts."""
    if _is_agent_request(body):
        return demo_phase_two_agent(path, body)
    parts = request_parts(path, body)
    required = set(parts.schema.get("required") or parts.schema.get("properties") or ())
    if PHASE_ONE_KEYS <= required:
        if f"<{prompts.ROLLOUT_TAG}>" not in parts.prompt:
            return demo_phase_one(_render_sdk_rollout(parts.prompt))
        return demo_phase_one(parts.prompt)
    if PHASE_TWO_KEYS <= required:
        return demo_phase_two(parts.prompt)
    return {key: "" for key in sorted(required)}


_STOPWORDS = frozenset(
    "a an and are as at be but by can could do for from have how i if in into is it its "
    "me my no not of on or our please so that the then this to up us we what when where "
    "which with would you your yes ok okay now just also there here let lets let's".split()
)
_ITEM_HEADER_RE = re.compile(r"^\[(?P<label>[a-z_]+)(?: (?P<rest>[^\]\n]*))?\]$")
_SEGMENT_RE = re.compile(r"^=== Segment \d+ of \d+")
_TERMINAL_RE = re.compile(r'"terminal_state": "([a-z_]+)"')
_OUTCOMES = {
    "completed": "success",
    "interrupted": "partial",
    "cancelled": "partial",
    "failed": "fail",
    "max_turns_exceeded": "fail",
    "guardrail_tripped": "fail",
}


@dataclass
class _Transcript:
    request: str = ""
    final_output: str = ""
    tools: list[str] = field(default_factory=list)
    segments: int = 1
    terminal_state: str = "unknown"


def _read_transcript(prompt: str) -> _Transcript:
    rollout = (prompts.extract_tagged(prompts.ROLLOUT_TAG, prompt) or [prompt])[0]
    found = _Transcript()
    if match := re.search(r"^Run segments: (\d+)$", rollout, re.MULTILINE):
        found.segments = int(match.group(1))
    if match := _TERMINAL_RE.search(rollout):
        found.terminal_state = match.group(1)
    label = ""
    lines: list[str] = []
    items: list[tuple[str, str]] = []
    for line in rollout.splitlines():
        header = _ITEM_HEADER_RE.match(line)
        if header or _SEGMENT_RE.match(line):
            items.append((label, "\n".join(lines).strip()))
            label, lines = (header.group("label"), []) if header else ("", [])
            if header and header.group("rest") and header.group("label").endswith("call"):
                name = header.group("rest").split(" ")[0]
                if name and "=" not in name and name not in found.tools:
                    found.tools.append(name)
        else:
            lines.append(line)
    items.append((label, "\n".join(lines).strip()))
    found.request = next((text for kind, text in items if kind == "user" and text), "")
    finals = [text for kind, text in items if kind == "final_output" and text]
    found.final_output = finals[-1] if finals else ""
    return found


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def _words(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word not in _STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)


_VERBS = frozenset(
    "add analyse analyze build check clean create debug deploy document explain find fix "
    "investigate make migrate move poll remove rename rotate run set summarise summarize test "
    "update upgrade write".split()
)


def _main_sentence(request: str) -> str:
    """The sentence that asks for something: a polite or imperative one, else the first
    with some substance, else the first."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", request) if s.strip()]
    for sentence in sentences:
        first = sentence.lower().split()[0].strip(",:;")
        if first in _VERBS or first == "please":
            return sentence
    return next((s for s in sentences if len(s.split()) >= 5), sentences[0])


_DURABLE_WORDS = frozenset("always never prefer preference rule rules default remember".split())


def _trivial(found: _Transcript, words: list[str]) -> bool:
    """A short question answered without tools and stating no preference: nothing a
    future agent needs (the SDK's fixtures have such a rollout)."""
    return (
        not found.tools
        and "?" in found.request
        and len(_words(found.request)) < 6
        and not _DURABLE_WORDS & set(_words(found.request))
    )


def _slug(words: list[str]) -> str:
    slug = "-".join(words[:5])[:80].strip("-_")
    return slug if tree.SLUG_RE.fullmatch(slug) else "rollout-notes"


def demo_phase_one(prompt: str) -> JSONDict:
    found = _read_transcript(prompt)
    if not found.request:
        return {"rollout_slug": "", "rollout_summary": "", "raw_memory": ""}
    ask = _main_sentence(found.request)
    words = _words(ask)
    if _trivial(found, words):
        return {"rollout_slug": "", "rollout_summary": "", "raw_memory": ""}
    slug = _slug(words)
    title = _one_line(ask, 80)
    description = _one_line(ask, 160)
    group = " ".join(words[1:3] if words and words[0] in _VERBS else words[:2]) or "general"
    outcome = _OUTCOMES.get(found.terminal_state, "uncertain")
    if outcome == "success" and not found.final_output:
        outcome = "uncertain"
    keywords = ", ".join([*words[:6], *found.tools])
    tools = ", ".join(found.tools) or "no tools were used"
    failure = (
        f"the run ended with terminal_state={found.terminal_state}; check why before retrying"
        if outcome == "fail"
        else "none recorded"
    )
    answer = (
        f'- final answer: "{_one_line(found.final_output, 200)}"\n' if found.final_output else ""
    )
    summary = (
        f"# {description}\n\n"
        f'Rollout context: the user asked: "{_one_line(found.request, 300)}" '
        f"({found.segments} run segment(s), terminal state {found.terminal_state}).\n\n"
        f"## Task 1: {title}\n\n"
        f"Outcome: {outcome}\n\n"
        f"Key steps:\n\n- tools: {tools}\n{answer}\n"
        f'References:\n\n- [1] user message: "{_one_line(found.request, 500)}"\n'
    )
    raw_memory = (
        "---\n"
        f"description: {description}\n"
        f"task: {slug}\n"
        f"task_group: {group}\n"
        f"task_outcome: {outcome}\n"
        f"keywords: {keywords}\n"
        "---\n\n"
        f"### Task 1: {title}\n\n"
        f"task: {slug}\ntask_group: {group}\ntask_outcome: {outcome}\n\n"
        f'Preference signals:\n- the user asked: "{_one_line(found.request, 200)}"\n\n'
        f"Reusable knowledge:\n- tools used: {tools}\n\n"
        f"Failures and how to do differently:\n- {failure}\n\n"
        f'References:\n- "{_one_line(found.request, 300)}"\n'
    )
    return {"rollout_slug": slug, "rollout_summary": summary, "raw_memory": raw_memory}


def _render_sdk_rollout(prompt: str) -> str:
    """The SDK's phase-one prompt carries the rollout's JSONL lines: render them as
    memoryui renders a rollout, so the demo reads either prompt set alike."""
    from generation import phase_one

    lines = [line for line in prompt.splitlines() if line.startswith('{"')]
    rendered = phase_one.render_rollout(tree.parse_rollout("\n".join(lines).encode()))
    return prompts.phase_one_prompt(rendered.text)


_FRONT_MATTER_KEYS = ("description", "task", "task_group", "task_outcome", "keywords")


def _raw_memories(text: str) -> list[dict[str, str]]:
    """Each raw memory of a ``raw_memories.md``: its header and front matter values,
    and the bullets of its preference signals."""
    memories = []
    for chunk in re.split(r"(?m)^(?=rollout_id: )", text):
        fields = tree.read_headers(chunk, (*tree.RAW_MEMORY_HEADERS, *_FRONT_MATTER_KEYS))
        if not fields.get("rollout_id") or not fields.get("rollout_summary_file"):
            continue
        prefs = re.search(r"^Preference signals:\n((?:- .*\n?)+)", chunk, re.MULTILINE)
        fields["preferences"] = prefs.group(1).strip() if prefs else ""
        memories.append(fields)
    return memories


def _task_group_block(memory: dict[str, str]) -> str:
    group = memory.get("task_group") or memory.get("task") or memory["rollout_id"]
    description = memory.get("description") or memory.get("task") or memory["rollout_id"]
    outcome = memory.get("task_outcome") or "uncertain"
    block = (
        f"# Task Group: {group}\n\n"
        f"scope: {memory.get('task') or group}\n\n"
        f"## Task 1: {description.rstrip('.')}, outcome {outcome}\n\n"
        "### rollout_summary_files\n\n"
        f"- {memory['rollout_summary_file']} (rollout_id={memory['rollout_id']}, "
        f"updated_at={memory.get('updated_at') or 'unknown'}, "
        f"terminal_state={memory.get('terminal_state') or 'unknown'})\n\n"
        "### keywords\n\n"
        f"- {memory.get('keywords') or group}\n"
    )
    if memory["preferences"]:
        bullets = "\n".join(f"{line} [Task 1]" for line in memory["preferences"].splitlines())
        block += f"\n## User preferences\n\n{bullets}\n"
    return block


def _heading(text: str) -> str:
    first = text.lstrip("\n").split("\n", 1)[0]
    return " ".join(first.split()).casefold() if first.startswith("#") else ""


def demo_phase_two(prompt: str) -> JSONDict:
    raw = (prompts.extract_tagged(prompts.RAW_MEMORIES_TAG, prompt) or [""])[0]
    pinned = prompts.extract_tagged(prompts.PINNED_TAG, prompt)
    rejected = [
        " ".join(r.split()).casefold() for r in prompts.extract_tagged(prompts.REJECTED_TAG, prompt)
    ]
    memories = _raw_memories(raw)
    pinned_headings = {_heading(p) for p in pinned} - {""}
    blocks = []
    for memory in memories:
        block = _task_group_block(memory)
        flat = " ".join(block.split()).casefold()
        if _heading(block) in pinned_headings or any(r and r in flat for r in rejected):
            continue
        blocks.append(block)
    pieces = [b.rstrip("\n") + "\n" for b in blocks] + [
        p if p.endswith("\n") else p + "\n" for p in pinned if p.strip()
    ]
    memory_md = "\n".join(pieces)
    return {"memory_md": memory_md, "memory_summary": _demo_summary(memories)}


def _demo_summary(memories: list[dict[str, str]]) -> str:
    groups = sorted({m.get("task_group") or m["rollout_id"] for m in memories})
    preferences = [line for m in memories for line in m["preferences"].splitlines()]
    by_date: dict[str, list[dict[str, str]]] = {}
    for memory in memories:
        updated = memory.get("updated_at") or ""
        date = updated[:10] if updated and updated != "unknown" else "undated"
        by_date.setdefault(date, []).append(memory)
    index = []
    for date in sorted(by_date, reverse=True):
        index.append(f"### {date}\n")
        for m in by_date[date]:
            index.append(
                f"- {m.get('task_group') or m['rollout_id']}: {m.get('keywords') or ''}\n"
                f"  - desc: {m.get('description') or ''}\n"
                f"  - outcome {m.get('task_outcome') or 'uncertain'}; "
                f"see {m['rollout_summary_file']}"
            )
        index.append("")
    return (
        "## User Profile\n\n"
        f"Works with this agent on {len(memories)} remembered task(s) in these areas: "
        f"{', '.join(groups) or 'none yet'}.\n\n"
        "## User preferences\n\n"
        + ("\n".join(preferences) if preferences else "- none recorded yet")
        + "\n\n## General Tips\n\n"
        "- Search MEMORY.md by keyword before exploring the workspace.\n"
        "- Open the rollout summary a task cites before repeating that task.\n\n"
        "## What's in Memory\n\n" + "\n".join(index).rstrip("\n") + "\n"
    )


_in_process: tuple[int, FakeOpenAI] | None = None
_in_process_lock = threading.Lock()


def in_process_demo_url() -> str:
    """The base URL of the offline demo model served in this process (a daemon thread on
    a free port of 127.0.0.1, started on first use), so that any process (the web server,
    a Celery worker, a management command) can run generation offline with nothing else
    running. A forked child starts its own: the parent's thread is not in it."""
    global _in_process
    with _in_process_lock:
        if _in_process is None or _in_process[0] != os.getpid():
            _in_process = (os.getpid(), FakeOpenAI().start())
        return _in_process[1].base_url


# --- the demo model as phase two's agent -------------------------------------------------
#
# It edits the memory folder as a careful model would, in a few turns: find each added
# rollout's raw memory and read it; drop the citations of removed rollouts; put each new
# task under its task group when the group exists, else append a new group at the end;
# add the new tasks to the summary's index; write a skill when one task group gets three
# or more new tasks (a procedure that repeats). Everything else stays byte for byte.
# It keeps no state: each request carries the conversation, and its call ids
# ("demo-<step>-<key>") say which steps are done.

_RETAINED_CHECKED = 50  # retained rollouts whose citations the demo checks
AGENT_TOOL_NAMES = frozenset({"read_file", "replace_in_file", "apply_patch"})
_SELECTED_RE = re.compile(
    r"^- \[(?P<status>added|retained|removed)\] rollout_id=(?P<id>[^,\s]+), "
    r"rollout_summary_file=(?P<file>[^,\s]+)"
)
_REMOVED_RE = re.compile(r"^- rollout_id=(?P<id>[^,\s]+), rollout_summary_file=(?P<file>[^,\s]+)")
_HIT_RE = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): (?P<text>.*)$")
_NUMBERED_RE = re.compile(r"^(\d+): ?(.*)$")


def _is_agent_request(body: JSONDict) -> bool:
    names = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            names.add(tool.get("name") or (tool.get("function") or {}).get("name"))
    return AGENT_TOOL_NAMES <= names


@dataclass
class _Conversation:
    prompt: str
    calls: dict[str, tuple[str, JSONDict]]  # call id -> (tool, arguments)
    outputs: dict[str, str]  # call id -> tool output


def _conversation(path: str, body: JSONDict) -> _Conversation:
    prompt = request_parts(path, body).prompt
    calls: dict[str, tuple[str, JSONDict]] = {}
    outputs: dict[str, str] = {}

    def arguments(raw: Any) -> JSONDict:
        try:
            value = json.loads(raw or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    if path.endswith("/chat/completions"):
        for message in body.get("messages") or []:
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                calls[str(call.get("id"))] = (
                    str(function.get("name")),
                    arguments(function.get("arguments")),
                )
            if message.get("role") == "tool":
                outputs[message.get("tool_call_id")] = _content_text(message.get("content"))
    else:
        for item in body.get("input") or [] if isinstance(body.get("input"), list) else []:
            if item.get("type") == "function_call":
                calls[item.get("call_id")] = (item.get("name"), arguments(item.get("arguments")))
            elif item.get("type") == "function_call_output":
                outputs[item.get("call_id")] = str(item.get("output") or "")
    return _Conversation(prompt, calls, outputs)


@dataclass
class _Selection:
    added: list[tuple[str, str]] = field(default_factory=list)
    retained: list[tuple[str, str]] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)


def _selection(prompt: str) -> _Selection:
    found = _Selection()
    in_removed = False
    for line in prompt.splitlines():
        if line.startswith("Removed from the last successful Phase 2 selection"):
            in_removed = True
        if match := _SELECTED_RE.match(line):
            if match.group("status") == "added":
                found.added.append((match.group("id"), match.group("file")))
            elif match.group("status") == "retained":
                found.retained.append((match.group("id"), match.group("file")))
            elif match.group("status") == "removed":
                found.removed.append((match.group("id"), match.group("file")))
        elif in_removed and (match := _REMOVED_RE.match(line)):
            found.removed.append((match.group("id"), match.group("file")))
    return found


def _unnumbered(output: str) -> list[str]:
    """The file lines of a read_file output (its line numbers and note dropped)."""
    return [m.group(2) for line in output.splitlines() if (m := _NUMBERED_RE.match(line))]


def _hits(output: str) -> list[tuple[int, str]]:
    if output.startswith("error:"):
        return []
    return [
        (int(m.group("line")), m.group("text"))
        for m in map(_HIT_RE.match, output.splitlines())
        if m
    ]


def _call(step: int, key: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments, call_id=f"demo-{step}-{key}")


def _new_task(memory: dict[str, str], number: int) -> str:
    block = _task_group_block(memory)
    task = block[block.index("## Task 1: ") :]
    return task.replace("## Task 1: ", f"## Task {number}: ", 1).replace(
        "[Task 1]", f"[Task {number}]"
    )


def demo_phase_two_agent(path: str, body: JSONDict) -> AgentTurn:
    talk = _conversation(path, body)
    done = {call_id.split("-")[1] for call_id in talk.outputs if call_id.startswith("demo-")}
    out = talk.outputs
    selection = _selection(talk.prompt)
    if not (selection.added or selection.removed or selection.retained):
        return AgentTurn(text="Nothing worth saving: no rollout was selected.")

    if "1" not in done:
        calls = [
            _call(1, f"a{i}", "search", query=f"rollout_id: {rid}", path="raw_memories.md")
            for i, (rid, _) in enumerate(selection.added)
        ]
        calls += [
            _call(1, f"r{i}", "search", query=f"rollout_id={rid}", path="MEMORY.md")
            for i, (rid, _) in enumerate(selection.removed)
        ]
        calls += [
            _call(1, f"t{i}", "search", query=f"rollout_id={rid}", path="MEMORY.md")
            for i, (rid, _) in enumerate(selection.retained[:_RETAINED_CHECKED])
        ]
        calls += [
            _call(1, "tail", "read_file", path="MEMORY.md", start_line=-3, end_line=None),
            _call(1, "sum", "search", query="## What's in Memory", path="memory_summary.md"),
            _call(1, "skills", "list_dir", path="skills"),
        ]
        return AgentTurn(calls)

    if "2" not in done:
        calls = []
        for i, _ in enumerate(selection.added):
            for line, _text in _hits(out.get(f"demo-1-a{i}", ""))[:1]:
                calls.append(
                    _call(
                        2,
                        f"a{i}",
                        "read_file",
                        path="raw_memories.md",
                        start_line=line,
                        end_line=line + 80,
                    )
                )
        for i, (rid, _) in enumerate(selection.removed):
            for j, (_line, text) in enumerate(_hits(out.get(f"demo-1-r{i}", ""))):
                if text.lstrip().startswith("- ") and f"rollout_id={rid}" in text:
                    calls.append(
                        _call(
                            2,
                            f"r{i}x{j}",
                            "replace_in_file",
                            path="MEMORY.md",
                            old=text + "\n",
                            new="",
                        )
                    )
        # A retained rollout whose summary file was written again under another name:
        # its citations follow the new name.
        for i, (rid, file) in enumerate(selection.retained[:_RETAINED_CHECKED]):
            for j, (_line, text) in enumerate(_hits(out.get(f"demo-1-t{i}", ""))):
                cited = re.search(r"rollout_summaries/\S+?\.md", text)
                if f"rollout_id={rid}" in text and cited and cited.group(0) != file:
                    new = text.replace(cited.group(0), file)
                    calls.append(
                        _call(
                            2,
                            f"t{i}x{j}",
                            "replace_in_file",
                            path="MEMORY.md",
                            old=text + "\n",
                            new=new + "\n",
                        )
                    )
        if calls:
            return AgentTurn(calls)

    memories = _read_memories(selection, out)
    rejected = [
        " ".join(r.split()).casefold()
        for r in prompts.extract_tagged(prompts.REJECTED_TAG, talk.prompt)
    ]
    memories = [
        m
        for m in memories
        if not any(r and r in " ".join(_task_group_block(m).split()).casefold() for r in rejected)
    ]
    groups = sorted({m.get("task_group") or m["rollout_id"] for m in memories})

    if "3" not in done and groups:
        return AgentTurn(
            [
                _call(3, f"g{k}", "search", query=f"# Task Group: {g}", path="MEMORY.md")
                for k, g in enumerate(groups)
            ]
        )
    if "4" not in done and groups:
        calls = []
        for k, group in enumerate(groups):
            for line, text in _hits(out.get(f"demo-3-g{k}", "")):
                if text.strip() == f"# Task Group: {group}":
                    calls.append(
                        _call(
                            4,
                            f"g{k}",
                            "read_file",
                            path="MEMORY.md",
                            start_line=line,
                            end_line=line + 60,
                        )
                    )
                    break
        if calls:
            return AgentTurn(calls)
    if "5" not in done and memories:
        return AgentTurn(_edits(groups, memories, out))
    edits = [c for c in talk.calls.values() if c[0] not in ("search", "read_file", "list_dir")]
    if not edits:
        return AgentTurn(text="Nothing worth saving: the memory already holds all of it.")
    return AgentTurn(
        text=f"Memory updated: {len(memories)} new task(s) in {len(groups)} group(s), "
        f"{len(selection.removed)} removed rollout(s) forgotten, {len(edits)} edit(s)."
    )


def _read_memories(selection: _Selection, out: dict[str, str]) -> list[dict[str, str]]:
    memories: list[dict[str, str]] = []
    for i, (rid, _) in enumerate(selection.added):
        lines = _unnumbered(out.get(f"demo-2-a{i}", ""))
        if not lines or lines[0] != f"rollout_id: {rid}":
            continue
        end = next((n for n in range(1, len(lines)) if lines[n].startswith("rollout_id: ")), None)
        found = _raw_memories("\n".join(lines[:end]) + "\n")
        memories.extend(m for m in found if m["rollout_id"] == rid)
    return memories


def _edits(
    groups: list[str], memories: list[dict[str, str]], out: dict[str, str]
) -> list[ToolCall]:
    calls: list[ToolCall] = []
    new_blocks: list[str] = []
    for k, group in enumerate(groups):
        mine = [m for m in memories if (m.get("task_group") or m["rollout_id"]) == group]
        lines = _unnumbered(out.get(f"demo-4-g{k}", ""))
        if len(lines) >= 3 and lines[2].startswith("scope:"):
            # An existing group: the new tasks go first under its scope line.
            body = []
            for line in lines[1:]:
                if line.startswith("# Task Group:"):
                    break
                body.append(line)
            numbers = [
                int(m.group(1)) for line in body if (m := re.match(r"^## Task (\d+):", line))
            ]
            first = max(numbers, default=0) + 1
            tasks = "\n".join(
                _new_task(m, first + n).rstrip("\n") + "\n" for n, m in enumerate(mine)
            )
            old = "\n".join(lines[:3]) + "\n"
            calls.append(
                _call(
                    5, f"g{k}", "replace_in_file", path="MEMORY.md", old=old, new=old + "\n" + tasks
                )
            )
        else:
            block = _task_group_block(mine[0])
            for n, memory in enumerate(mine[1:], 2):
                block = block.rstrip("\n") + "\n\n" + _new_task(memory, n)
            new_blocks.append(block.rstrip("\n") + "\n")
    tail = out.get("demo-1-tail", "")
    if new_blocks:
        if tail.startswith("error:"):  # no MEMORY.md yet
            calls.append(
                _call(5, "new", "write_file", path="MEMORY.md", content="\n".join(new_blocks))
            )
        else:
            last = _unnumbered(tail)[-1:] or [""]
            added = "\n".join(["", *"\n".join(new_blocks).rstrip("\n").split("\n")])
            patch = (
                "*** Begin Patch\n*** Update File: MEMORY.md\n@@\n"
                + f" {last[0]}\n"
                + "".join(f"+{line}\n" for line in added.split("\n"))
                + "*** End of File\n*** End Patch"
            )
            calls.append(_call(5, "append", "apply_patch", patch=patch))
    summary_hits = _hits(out.get("demo-1-sum", ""))
    if summary_hits:
        index = "".join(
            f"- {m.get('task_group') or m['rollout_id']}: {m.get('keywords') or ''}\n"
            f"  - desc: {m.get('description') or ''}; see {m['rollout_summary_file']}\n"
            for m in memories
        )
        calls.append(
            _call(
                5,
                "sum",
                "replace_in_file",
                path="memory_summary.md",
                old="## What's in Memory\n",
                new=f"## What's in Memory\n\n{index}",
            )
        )
    elif out.get("demo-1-sum", "").startswith("error:"):
        calls.append(
            _call(5, "sum", "write_file", path="memory_summary.md", content=_demo_summary(memories))
        )
    existing = out.get("demo-1-skills", "")
    for group in groups:
        mine = [m for m in memories if (m.get("task_group") or m["rollout_id"]) == group]
        name = _slug(_words(group)) if _words(group) else "procedure"
        if len(mine) >= 3 and f"skills/{name}/" not in existing:
            steps = "\n".join(
                f"{n}. {m.get('description') or m['rollout_id']} (see {m['rollout_summary_file']})"
                for n, m in enumerate(mine, 1)
            )
            content = (
                f"---\nname: {name}\ndescription: How this user's {group} tasks are done; "
                f"distilled from {len(mine)} rollouts.\n---\n\n# {group}\n\n"
                f"Done {len(mine)} times. What those runs did, newest first:\n\n{steps}\n"
            )
            calls.append(
                _call(
                    5, f"skill{name}", "write_file", path=f"skills/{name}/SKILL.md", content=content
                )
            )
    return calls or [_call(5, "noop", "list_dir", path=".")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the offline demo model.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = FakeOpenAI(host=args.host, port=args.port)
    print(f"offline demo model ({DEMO_MODEL}) at {server.base_url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
