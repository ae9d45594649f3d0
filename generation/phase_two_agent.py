"""Phase two as the SDK runs it: an agent that edits the memory folder.

The model works on a **staging copy** of a layout's memory folder (a temporary
directory) through function tools: list a folder, read a file (line ranges, bounded
output), search text, and edit (replace an exact unique string, apply a V4A patch or
unified diff, write a new file, delete a file). It may write ``MEMORY.md``,
``memory_summary.md`` and anything under ``skills/``; it may also read
``raw_memories.md``, ``rollout_summaries/`` and ``phase_two_selection.json``; every other
path (``..``, absolute paths, symlinks, rollouts, other layouts) is refused with an
error the model reads. There is no shell.

``run_agent`` drives the loop over the ``openai`` client (Responses API function tools,
or Chat Completions ``tools``), at most ``max_turns`` model calls and ``token_budget``
tokens, checking ``should_cancel`` before every call. Its result is the **change set**:
every writable file that differs from the base, as ``{path: (old bytes | None, new bytes
| None)}``. A failed or cancelled loop has no change set; one that changed nothing says
so. Nothing here imports Django.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from generation import llm, patches, retry

if TYPE_CHECKING:
    import openai  # loaded by run_agent, which is given a client

JSONDict = dict[str, Any]
Change = tuple[bytes | None, bytes | None]

# MemoryGenerateConfig.phase_two_max_turns in openai-agents 0.24 (a test checks it).
DEFAULT_MAX_TURNS = 500
READ_MAX_CHARS = 20_000  # one read's output; the model pages with line ranges
SEARCH_MAX_RESULTS = 100
SEARCH_LINE_CHARS = 400
LIST_MAX_ENTRIES = 500
MAX_WRITE_BYTES = 8 * 1024 * 1024
MAX_FILE_BYTES = 64 * 1024 * 1024  # a file the staging copy takes at all
TRANSIENT_RETRIES = 4  # a rate limit, 5xx, timeout: the same turn is asked again
MAX_RETRY_WAIT = 120.0  # seconds, whatever Retry-After says

WRITABLE_FILES = frozenset({"MEMORY.md", "memory_summary.md"})
WRITABLE_DIRS = ("skills",)
READABLE_FILES = WRITABLE_FILES | {"raw_memories.md", "phase_two_selection.json"}
READABLE_DIRS = (*WRITABLE_DIRS, "rollout_summaries")


class ToolError(Exception):
    """A tool call that cannot be carried out; the message goes back to the model."""


def is_readable(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    return rel in READABLE_FILES or (top in READABLE_DIRS and "/" in rel)


def is_writable(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    return rel in WRITABLE_FILES or (top in WRITABLE_DIRS and "/" in rel)


# --- the staging copy ------------------------------------------------------------------


class Staging:
    """A temporary copy of the readable files of a memory folder. ``files`` maps paths
    relative to the memory folder to their bytes; anything outside the readable set is
    left out. ``root_name`` (the layout's memories dir, e.g. ``memories``) is accepted as
    a prefix of paths, as the SDK's prompt names files under it."""

    def __init__(
        self, files: Mapping[str, bytes], *, root_name: str = "", directory: Path | None = None
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="memoryui-phase-two-", dir=directory))
        self.root_name = root_name.strip("/")
        self.base: dict[str, bytes] = {}
        for rel, data in files.items():
            norm = str(PurePosixPath(rel))
            if not is_readable(norm) or ".." in norm.split("/") or norm.startswith("/"):
                continue
            target = self.root / norm
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            if is_writable(norm):
                self.base[norm] = data
        self.touched: set[str] = set()

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # -- paths --

    def relative(self, path: Any) -> str:
        """The normalised relative path the model means, or ToolError."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("a path is required")
        raw = path.strip()
        if raw.startswith(("/", "\\", "~")) or (len(raw) > 1 and raw[1] == ":"):
            raise ToolError(
                f"{raw}: absolute paths are refused; use paths relative to the memory "
                "folder, such as MEMORY.md or skills/<name>/SKILL.md"
            )
        if "\\" in raw or "\x00" in raw:
            raise ToolError(f"{raw!r}: invalid characters in the path")
        parts = [p for p in raw.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ToolError(f"{raw}: '..' is refused; only the memory folder is reachable")
        if self.root_name:
            prefix = self.root_name.split("/")
            if parts[: len(prefix)] == prefix:
                parts = parts[len(prefix) :]
        return "/".join(parts) or "."

    def _no_links(self, rel: str) -> Path:
        current = self.root
        for part in rel.split("/") if rel != "." else []:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                break
            if stat.S_ISLNK(mode):
                raise ToolError(f"{rel}: links are refused (it passes through a symlink)")
        return self.root / rel if rel != "." else self.root

    def readable(self, path: Any) -> tuple[str, Path]:
        rel = self.relative(path)
        if rel != "." and not is_readable(rel) and rel not in READABLE_DIRS:
            raise ToolError(
                f"{rel}: outside what phase two may read (MEMORY.md, memory_summary.md, "
                "raw_memories.md, phase_two_selection.json, rollout_summaries/, skills/)"
            )
        return rel, self._no_links(rel)

    def writable(self, path: Any) -> tuple[str, Path]:
        rel = self.relative(path)
        if not is_writable(rel):
            raise ToolError(
                f"{rel}: read-only or outside the memory folder; phase two may only write "
                "MEMORY.md, memory_summary.md and files under skills/"
            )
        if not all(_sane_name(part) for part in rel.split("/")):
            raise ToolError(f"{rel}: file and folder names are letters, digits, '.', '-', '_'")
        return rel, self._no_links(rel)

    # -- the result --

    def files(self) -> Iterator[str]:
        """Every regular file of the staging copy (links are not followed)."""
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            for name in filenames:
                full = Path(dirpath) / name
                if full.is_symlink() or not full.is_file():
                    continue
                yield full.relative_to(self.root).as_posix()
            dirnames.sort()

    def changes(self) -> dict[str, Change]:
        """Every writable file whose bytes differ from the base."""
        current: dict[str, bytes] = {}
        for rel in self.files():
            if is_writable(rel):
                current[rel] = (self.root / rel).read_bytes()
        result: dict[str, Change] = {}
        for rel in sorted(set(current) | set(self.base)):
            old, new = self.base.get(rel), current.get(rel)
            if old != new:
                result[rel] = (old, new)
        return result


def _sane_name(part: str) -> bool:
    return (
        bool(part)
        and len(part) <= 128
        and not part.startswith(".")
        and all(c.isalnum() or c in "._-" for c in part)
    )


# --- the tools -------------------------------------------------------------------------


def _text(path: Path, rel: str) -> str:
    if not path.is_file():
        raise ToolError(f"{rel}: no such file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolError(f"{rel}: {size} bytes, too large to open")
    return path.read_bytes().decode("utf-8", errors="replace")


def _write(staging: Staging, rel: str, path: Path, text: str) -> None:
    data = text.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES and len(data) > len(staging.base.get(rel, b"")) * 2:
        raise ToolError(f"{rel}: {len(data)} bytes is more than a memory file may grow to")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging._no_links(rel)  # a folder made a link meanwhile is still refused
    path.write_bytes(data)
    staging.touched.add(rel)


def tool_list_dir(staging: Staging, args: JSONDict) -> str:
    rel, path = staging.readable(args.get("path") or ".")
    if not path.is_dir():
        raise ToolError(f"{rel}: not a folder")
    rows = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        child = entry.name if rel == "." else f"{rel}/{entry.name}"
        if entry.is_symlink():
            continue
        if entry.is_dir():
            if rel == "." and entry.name not in READABLE_DIRS:
                continue
            rows.append(f"{child}/")
        elif is_readable(child):
            rows.append(f"{child} ({entry.stat().st_size} bytes)")
        if len(rows) >= LIST_MAX_ENTRIES:
            rows.append(f"[listing cut at {LIST_MAX_ENTRIES} entries]")
            break
    return "\n".join(rows) or "(empty folder)"


def tool_read_file(staging: Staging, args: JSONDict) -> str:
    rel, path = staging.readable(args.get("path"))
    lines = _text(path, rel).splitlines()
    total = len(lines)
    start = args.get("start_line") or 1
    end = args.get("end_line") or total
    if not isinstance(start, int) or not isinstance(end, int):
        raise ToolError("start_line and end_line are whole numbers")
    if start < 0:
        start = max(1, total + start + 1)
    start, end = max(1, start), min(total, end)
    if total == 0:
        return f"{rel}: empty file"
    if start > total:
        raise ToolError(f"{rel} has {total} lines; start_line {start} is past its end")
    out: list[str] = []
    size = 0
    shown = start - 1
    for number in range(start, end + 1):
        row = f"{number}: {lines[number - 1]}"
        if size + len(row) + 1 > READ_MAX_CHARS:
            if not out:  # one huge line: show its beginning
                out.append(row[:READ_MAX_CHARS] + " [line cut]")
                shown = number
            break
        out.append(row)
        size += len(row) + 1
        shown = number
    note = (
        f"\n[{rel}: lines {start}-{shown} of {total} shown; output limit reached, read on "
        f"from line {shown + 1}]"
        if shown < end
        else f"\n[{rel}: lines {start}-{shown} of {total}]"
    )
    return "\n".join(out) + note


def tool_search(staging: Staging, args: JSONDict) -> str:
    query = args.get("query")
    if not isinstance(query, str) or not query:
        raise ToolError("query is required")
    rel, path = staging.readable(args.get("path") or ".")
    if path.is_file():
        targets = [rel]
    elif path.is_dir():
        prefix = "" if rel == "." else rel + "/"
        targets = [f for f in staging.files() if f.startswith(prefix) and is_readable(f)]
    else:
        raise ToolError(f"{rel}: no such file or folder")
    needle = query.casefold()
    results: list[str] = []
    for target in targets:
        full = staging._no_links(target)
        for number, line in enumerate(_text(full, target).splitlines(), 1):
            if needle in line.casefold():
                shown = line if len(line) <= SEARCH_LINE_CHARS else line[:SEARCH_LINE_CHARS] + "…"
                results.append(f"{target}:{number}: {shown}")
                if len(results) >= SEARCH_MAX_RESULTS:
                    return "\n".join(results) + f"\n[first {SEARCH_MAX_RESULTS} results only]"
    return "\n".join(results) or f"no line contains {query!r}"


def tool_replace_in_file(staging: Staging, args: JSONDict) -> str:
    rel, path = staging.writable(args.get("path"))
    old, new = args.get("old"), args.get("new")
    if not isinstance(old, str) or not old or not isinstance(new, str):
        raise ToolError("old (non-empty) and new are strings")
    text = _text(path, rel)
    count = text.count(old)
    if count != 1:
        raise ToolError(
            f"{rel}: old occurs {count} times; it must occur exactly once"
            + (" (read the file: whitespace counts)" if count == 0 else " (add context)")
        )
    _write(staging, rel, path, text.replace(old, new, 1))
    return f"{rel}: replaced 1 occurrence"


def tool_write_file(staging: Staging, args: JSONDict) -> str:
    rel, path = staging.writable(args.get("path"))
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("content is a string")
    if path.exists():
        raise ToolError(f"{rel} exists: edit it with replace_in_file or apply_patch")
    _write(staging, rel, path, content)
    return f"{rel}: written ({len(content.encode())} bytes)"


def tool_delete_file(staging: Staging, args: JSONDict) -> str:
    rel, path = staging.writable(args.get("path"))
    if not path.is_file():
        raise ToolError(f"{rel}: no such file")
    path.unlink()
    staging.touched.add(rel)
    return f"{rel}: deleted"


def tool_apply_patch(staging: Staging, args: JSONDict) -> str:
    patch = args.get("patch")
    if not isinstance(patch, str):
        raise ToolError("patch is a string")
    try:
        ops = patches.parse_patch(patch)
    except patches.PatchError as exc:
        raise ToolError(str(exc)) from None
    # Check and compute everything first, then write: all or nothing.
    planned: list[tuple[str, Path, str | None]] = []
    for op in ops:
        rel, path = staging.writable(op.path)
        if op.kind == "add":
            if path.exists():
                raise ToolError(f"{rel} exists: update it instead of adding it")
            planned.append((rel, path, op.content))
        elif op.kind == "delete":
            if not path.is_file():
                raise ToolError(f"{rel}: no such file to delete")
            planned.append((rel, path, None))
        else:
            try:
                text = patches.apply_hunks(_text(path, rel), op.hunks, rel)
            except patches.PatchError as exc:
                raise ToolError(str(exc)) from None
            planned.append((rel, path, text))
    for rel, path, content in planned:
        if content is None:
            path.unlink()
            staging.touched.add(rel)
        else:
            _write(staging, rel, path, content)
    return "patched: " + ", ".join(rel for rel, _, _ in planned)


@dataclass(frozen=True)
class Tool:
    """One tool, once: its name and JSON schema as the model is told them, and the
    function that carries out a call of it."""

    name: str
    description: str
    parameters: JSONDict
    handler: Callable[[Staging, JSONDict], str]

    def spec(self) -> JSONDict:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _params(properties: JSONDict, required: list[str]) -> JSONDict:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_PATH = {"type": "string", "description": "relative to the memory folder, e.g. MEMORY.md"}
# In the order the model is told them; the specs and the dispatch both come from here.
TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in [
        Tool(
            "list_dir",
            description="List a folder of the memory folder ('.' for its top): names, sizes.",
            parameters=_params({"path": _PATH}, ["path"]),
            handler=tool_list_dir,
        ),
        Tool(
            "read_file",
            description=(
                "Read a file with line numbers. start_line and end_line (1-based, inclusive) "
                f"select a range; a negative start_line counts from the end. At most "
                f"{READ_MAX_CHARS} characters are returned, with a note saying where to go on."
            ),
            parameters=_params(
                {
                    "path": _PATH,
                    "start_line": {"type": ["integer", "null"]},
                    "end_line": {"type": ["integer", "null"]},
                },
                ["path", "start_line", "end_line"],
            ),
            handler=tool_read_file,
        ),
        Tool(
            "search",
            description=(
                "Find lines containing a text (case-insensitive) in a file or under a folder; "
                f"returns path:line: text, at most {SEARCH_MAX_RESULTS} results."
            ),
            parameters=_params({"query": {"type": "string"}, "path": _PATH}, ["query", "path"]),
            handler=tool_search,
        ),
        Tool(
            "replace_in_file",
            description=(
                "Replace one exact string in a file with another. old must occur exactly once "
                "(include surrounding lines to make it unique)."
            ),
            parameters=_params(
                {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}},
                ["path", "old", "new"],
            ),
            handler=tool_replace_in_file,
        ),
        Tool(
            "apply_patch",
            description=(
                "Apply a V4A patch ('*** Begin Patch' / '*** Update File: PATH' / '@@' hunks of "
                "' ', '-', '+' lines / '*** End Patch'; also '*** Add File:' and '*** Delete "
                "File:') or a unified diff. All of it applies or none of it."
            ),
            parameters=_params({"patch": {"type": "string"}}, ["patch"]),
            handler=tool_apply_patch,
        ),
        Tool(
            "write_file",
            description="Create a new file with this content (refused if it exists).",
            parameters=_params({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
            handler=tool_write_file,
        ),
        Tool(
            "delete_file",
            description="Delete a file (under skills/, or MEMORY.md / memory_summary.md).",
            parameters=_params({"path": _PATH}, ["path"]),
            handler=tool_delete_file,
        ),
    ]
}
TOOL_SPECS: list[JSONDict] = [tool.spec() for tool in TOOLS.values()]


def responses_tools() -> list[JSONDict]:
    return [{"type": "function", "strict": True, **spec} for spec in TOOL_SPECS]


def chat_tools() -> list[JSONDict]:
    return [{"type": "function", "function": spec} for spec in TOOL_SPECS]


def execute(staging: Staging, name: str, arguments: str) -> str:
    """One tool call's output: its result, or ``error: ...`` for the model to read."""
    if name not in TOOLS:
        return f"error: no tool named {name!r}; the tools are {', '.join(sorted(TOOLS))}"
    try:
        args = json.loads(arguments or "{}")
    except ValueError as exc:
        return f"error: the arguments are not valid JSON ({exc})"
    if not isinstance(args, dict):
        return "error: the arguments must be a JSON object"
    try:
        return TOOLS[name].handler(staging, args)
    except ToolError as exc:
        return f"error: {exc}"
    except OSError as exc:
        return f"error: {exc.strerror or exc}"


# --- the loop --------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    max_turns: int = DEFAULT_MAX_TURNS
    token_budget: int | None = None  # input + output tokens over the whole loop
    # Tokens one answer may have; llama.cpp's server needs it (unbounded, it writes until
    # its context is full), so Chat Completions with json_object gets llm.CHAT_MAX_TOKENS.
    max_answer_tokens: int | None = None


@dataclass
class Turn:
    """Progress after one model call, for the run page."""

    number: int
    usage: llm.Usage
    files_touched: list[str]
    tool_calls: int


@dataclass
class AgentResult:
    status: Literal["changed", "nothing", "failed", "cancelled"]
    changes: dict[str, Change] = field(default_factory=dict)
    turns: int = 0
    usage: llm.Usage = field(default_factory=llm.Usage)
    reason: str = ""
    final_message: str = ""
    files_touched: list[str] = field(default_factory=list)


@dataclass
class _Call:
    call_id: str
    name: str
    arguments: str


@dataclass
class _Answer:
    calls: list[_Call]
    text: str
    usage: llm.Usage
    replay: list[JSONDict]  # what goes back into the conversation


class _Conversation:
    """The history of one loop in the chosen API's shape."""

    def __init__(
        self,
        config: llm.ModelConfig,
        instructions: str,
        prompt: str,
        max_answer_tokens: int | None = None,
    ) -> None:
        self.config = config
        self.max_answer_tokens = max_answer_tokens
        if (
            max_answer_tokens is None
            and config.api == "chat"
            and config.chat_format == "json_object"
        ):
            self.max_answer_tokens = llm.CHAT_MAX_TOKENS
        self.instructions = instructions
        self.items: list[JSONDict] = []
        if config.api == "chat":
            if instructions:
                self.items.append({"role": "system", "content": instructions})
        self.items.append({"role": "user", "content": prompt})

    def ask(self, client: openai.OpenAI) -> _Answer:
        if self.config.api == "chat":
            return self._chat(client)
        return self._responses(client)

    def _responses(self, client: openai.OpenAI) -> _Answer:
        kwargs: JSONDict = {
            "model": self.config.model,
            "input": self.items,
            "tools": responses_tools(),
            "store": False,
        }
        if self.instructions:
            kwargs["instructions"] = self.instructions
        if self.config.reasoning_effort:
            kwargs["reasoning"] = {"effort": self.config.reasoning_effort}
            kwargs["include"] = ["reasoning.encrypted_content"]
        if self.max_answer_tokens:
            kwargs["max_output_tokens"] = self.max_answer_tokens
        response = client.responses.create(**kwargs)
        usage = llm.usage_of(getattr(response, "usage", None), "input_tokens", "output_tokens")
        calls, texts, replay = [], [], []
        for item in getattr(response, "output", None) or []:
            kind = getattr(item, "type", None)
            if kind == "function_call":
                calls.append(_Call(item.call_id, item.name, item.arguments or ""))
                replay.append(
                    {
                        "type": "function_call",
                        "call_id": item.call_id,
                        "name": item.name,
                        "arguments": item.arguments or "",
                    }
                )
            elif kind == "message":
                text = "".join(
                    getattr(p, "text", "") or "" for p in getattr(item, "content", None) or []
                )
                texts.append(text)
                replay.append({"role": "assistant", "content": text})
            elif kind == "reasoning" and getattr(item, "encrypted_content", None):
                replay.append(item.model_dump(exclude_none=True))
        return _Answer(calls, "".join(texts), usage, replay)

    def _chat(self, client: openai.OpenAI) -> _Answer:
        kwargs: JSONDict = {
            "model": self.config.model,
            "messages": self.items,
            "tools": chat_tools(),
        }
        if self.config.reasoning_effort:
            kwargs["reasoning_effort"] = self.config.reasoning_effort
        if self.max_answer_tokens:
            kwargs["max_tokens"] = self.max_answer_tokens
        response = client.chat.completions.create(**kwargs)
        usage = llm.usage_of(getattr(response, "usage", None), "prompt_tokens", "completion_tokens")
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        text = getattr(message, "content", None) or ""
        calls = [
            _Call(c.id, c.function.name, c.function.arguments or "")
            for c in (getattr(message, "tool_calls", None) or [])
            if getattr(c, "function", None) is not None
        ]
        replay: JSONDict = {"role": "assistant", "content": text or None}
        if calls:
            replay["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        return _Answer(calls, text, usage, [replay])

    def add(self, answer: _Answer, outputs: list[tuple[_Call, str]]) -> None:
        self.items.extend(answer.replay)
        for call, output in outputs:
            if self.config.api == "chat":
                self.items.append({"role": "tool", "tool_call_id": call.call_id, "content": output})
            else:
                self.items.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": output}
                )


def run_agent(
    *,
    client: openai.OpenAI,
    config: llm.ModelConfig,
    instructions: str,
    prompt: str,
    staging: Staging,
    limits: Limits = Limits(),
    should_cancel: Callable[[], bool] = lambda: False,
    on_turn: Callable[[Turn], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    retry_base: float = 1.0,
) -> AgentResult:
    """Let the model edit ``staging`` until it answers without a tool call. Never raises
    for the model's or the server's doing: a failure is a result with its reason."""
    import openai  # noqa: PLC0415 (deferred: openai loads at the first model call)

    conversation = _Conversation(config, instructions, prompt, limits.max_answer_tokens)
    usage = llm.Usage()
    turns = 0

    def failed(reason: str) -> AgentResult:
        touched = sorted(staging.touched)
        return AgentResult("failed", {}, turns, usage, reason, files_touched=touched)

    while True:
        if should_cancel():
            touched = sorted(staging.touched)
            return AgentResult("cancelled", {}, turns, usage, "cancelled", files_touched=touched)
        if turns >= limits.max_turns:
            return failed(
                f"turn limit reached: the model was still editing after {turns} turns "
                f"(max_turns {limits.max_turns}); nothing was kept"
            )
        answer = None
        for attempt in range(TRANSIENT_RETRIES + 1):
            try:
                answer = conversation.ask(client)
                break
            except openai.OpenAIError as exc:
                error = llm.translate_error(exc)
                if isinstance(error, llm.TransientModelError) and attempt < TRANSIENT_RETRIES:
                    sleep(
                        retry.backoff_delay(
                            attempt,
                            base=retry_base,
                            cap=30.0,
                            retry_after=error.retry_after,
                            max_wait=MAX_RETRY_WAIT,
                        )
                    )
                    continue
                return failed(f"the model call of turn {turns + 1} failed: {error}")
        assert answer is not None
        turns += 1
        usage += answer.usage
        if limits.token_budget is not None and (
            usage.input_tokens + usage.output_tokens > limits.token_budget
        ):
            return failed(
                f"token budget exceeded: {usage.input_tokens + usage.output_tokens} tokens "
                f"after {turns} turns, over the budget of {limits.token_budget}; nothing "
                "was kept"
            )
        if not answer.calls:
            changes = staging.changes()
            return AgentResult(
                "changed" if changes else "nothing",
                changes,
                turns,
                usage,
                "" if changes else "nothing worth saving",
                answer.text,
                sorted(staging.touched),
            )
        outputs = [(call, execute(staging, call.name, call.arguments)) for call in answer.calls]
        conversation.add(answer, outputs)
        if on_turn is not None:
            on_turn(Turn(turns, usage, sorted(staging.touched), len(answer.calls)))
