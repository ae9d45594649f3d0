"""An OpenAI-compatible HTTP server around a responder function: what serves the offline
demo model (``generation.offline_model``) to memoryui's real ``openai`` client, and what
the tests' scripted model server (``tests/scripted_model.py``) builds on.

It speaks just enough of the API for memoryui's calls: ``POST /v1/responses``,
``POST /v1/chat/completions`` (both of its structured-output forms, and tool calls) and
``GET /v1/models``. A responder gets each model call's path and JSON body and returns a
structured output object, or an ``AgentTurn`` (tool calls and text); the server wraps it
in the endpoint's envelope, with the usage estimated from the text's length.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JSONDict = dict[str, Any]
DEMO_MODEL = "memoryui-offline-demo"  # the model the server lists, and names by default
MODEL_ROUTES = ("/responses", "/chat/completions")


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
            instructions=content_text(system[0].get("content")) if system else "",
            prompt=content_text(users[0].get("content")) if users else "",
            schema_name=str(spec.get("name") or ""),
            schema=spec.get("schema") or fmt.get("schema") or {},
        )
    raw_input = body.get("input")
    if isinstance(raw_input, list):
        users = [m for m in raw_input if isinstance(m, dict) and m.get("role") == "user"]
        prompt = content_text(users[0].get("content")) if users else ""
    else:
        prompt = str(raw_input or "")
    fmt = (body.get("text") or {}).get("format") or {}
    return RequestParts(
        instructions=str(body.get("instructions") or ""),
        prompt=prompt,
        schema_name=str(fmt.get("name") or ""),
        schema=fmt.get("schema") or {},
    )


def content_text(content: Any) -> str:
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
    model: ModelServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY a kept-alive client
    # waits for its delayed ACK (~40 ms) on every answer.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (base signature)
        pass

    def do_GET(self) -> None:
        status, payload = self.server.model.get(self.path.split("?", 1)[0])
        self._send(status, payload, {})

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
        status, payload, headers = self.server.model.answer(path, body)
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


class ModelServer:
    """An OpenAI-compatible server on ``host`` that answers with ``responder``: in a
    daemon thread while used as a context manager (or between ``start()`` and
    ``close()``), or in the foreground (``serve_forever()``); ``port=0`` picks a free
    port."""

    def __init__(self, responder: Responder, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.responder = responder
        self._host = host
        self._server = _Server((host, port), _Handler)
        self._server.model = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    def get(self, path: str) -> tuple[int, JSONDict]:
        """The status and body for one GET (runs in a handler thread)."""
        if path.endswith("/models"):
            data = [{"id": DEMO_MODEL, "object": "model", "created": 0, "owned_by": "memoryui"}]
            return 200, {"object": "list", "data": data}
        return 404, error_body(404, f"no route for GET {path}")

    def answer(self, path: str, body: JSONDict) -> tuple[int, JSONDict, dict[str, str]]:
        """The status, body and headers for one POST (runs in a handler thread)."""
        if not path.endswith(MODEL_ROUTES):
            return 404, error_body(404, f"no route for POST {path}"), {}
        try:
            text, calls = self.respond(path, body)
        except Exception as exc:  # a broken responder must not hang the client
            return 500, error_body(500, f"responder failed: {exc!r}"), {}
        return 200, self.envelope(path, body, text, calls), {}

    def respond(self, path: str, body: JSONDict) -> tuple[str, list[ToolCall] | None]:
        """The responder's answer as the output text and the tool calls beside it."""
        answer = self.responder(path, body)
        if isinstance(answer, AgentTurn):
            return answer.text, answer.calls or None
        return json.dumps(answer), None

    def envelope(
        self,
        path: str,
        body: JSONDict,
        text: str,
        calls: list[ToolCall] | None,
        usage: tuple[int, int] | None = None,
    ) -> JSONDict:
        """The endpoint's whole answer around ``text`` and ``calls``; the usage is
        estimated from the lengths unless given."""
        sent = text + (json.dumps([[c.name, c.arguments] for c in calls]) if calls else "")
        usage = usage or _estimated_usage(body, sent)
        model = str(body.get("model") or DEMO_MODEL)
        wrap = chat_envelope if path.endswith("/chat/completions") else responses_envelope
        return wrap(text, model=model, usage=usage, calls=calls)

    def start(self) -> ModelServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown waits up to one poll
            name="model-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
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

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
