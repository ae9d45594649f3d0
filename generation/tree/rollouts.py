"""Rollouts (``sessions/<rollout_id>.jsonl``): their run segments, one JSON object a
line, and the text of a transcript worth searching."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .text import SURROGATE_ESCAPES, without_lone_surrogates

ROLLOUT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


TERMINAL_STATES = (
    "completed",
    "interrupted",
    "cancelled",
    "failed",
    "max_turns_exceeded",
    "guardrail_tripped",
)


MAX_JSON_DEPTH = 64


@dataclass
class Segment:
    line: int
    updated_at: str
    rollout_id: str
    input: list[Any]
    generated_items: list[Any]
    interruptions: list[Any] | None
    terminal_metadata: dict[str, Any]
    final_output: Any
    has_final_output_key: bool

    @property
    def terminal_state(self) -> str:
        state = self.terminal_metadata.get("terminal_state")
        return state if isinstance(state, str) and state else "unknown"


@dataclass
class ParsedRollout:
    segments: list[Segment] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    @property
    def updated_at(self) -> str:
        return self.last.updated_at if self.last and self.last.updated_at else "unknown"

    @property
    def terminal_state(self) -> str:
        return self.last.terminal_state if self.last else "unknown"

    @property
    def title(self) -> str:
        """The first thing the user asked, for lists."""
        for seg in self.segments:
            for item in seg.input:
                if isinstance(item, dict) and item.get("role") == "user":
                    text = message_text(item)
                    if text:
                        return " ".join(text.split())[:200]
        return ""

    @property
    def item_count(self) -> int:
        return sum(len(s.input) + len(s.generated_items) for s in self.segments)


def message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


SEARCH_TEXT_LIMIT = 256_000
_SEARCHED_KEYS = ("name", "arguments", "input", "output", "action", "query", "code")


def rollout_search_text(parsed: ParsedRollout, limit: int = SEARCH_TEXT_LIMIT) -> str:
    """The words of a transcript worth searching: messages, tool names, arguments and
    outputs, final outputs; capped at ``limit`` characters."""
    # Once per rollout of an import: plain loops with type() tests and no work for the
    # keys an item lacks (most of them).
    parts: list[str] = []
    append = parts.append
    size = 0
    for segment in parsed.segments:
        for item in (*segment.input, *segment.generated_items, segment.final_output):
            if isinstance(item, str):
                if item:
                    append(item)
                    size += len(item)
            elif isinstance(item, dict):
                get = item.get
                content = get("content")
                text = content if type(content) is str else message_text(item)
                if text:
                    append(text)
                    size += len(text)
                for key in _SEARCHED_KEYS:
                    value = get(key)
                    if value is None:
                        continue
                    if isinstance(value, str):
                        if value:
                            append(value)
                            size += len(value)
                    elif isinstance(value, dict | list):
                        dumped = json.dumps(value, ensure_ascii=False)[:4000]
                        append(dumped)
                        size += len(dumped)
            if size > limit:
                break  # the text is cut at ``limit`` anyway
    return "\n".join(parts)[:limit].replace("\x00", " ")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array"


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether containers nest more than ``limit`` levels (level by level, no recursion)."""
    level = [value]
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            below.extend(c for c in children if type(c) is dict or type(c) is list)
        level = below
        depth += 1
    return False


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):  # a plain string input
        return [{"content": value, "role": "user"}]
    return []


def parse_rollout(data: bytes) -> ParsedRollout:
    """Parse a rollout JSONL file into its run segments. A bad line is reported and
    skipped; the good segments around it are kept."""
    result = ParsedRollout()
    if not data.strip():
        result.problems.append("empty file: no run segments")
        return result
    for found in iter_segments(data):
        if isinstance(found, Segment):
            result.segments.append(found)
        else:
            result.problems.append(found)
    if not result.segments and not result.problems:
        result.problems.append("empty file: no run segments")
    return result


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The numbered lines of ``data``, one copied at a time (``split`` would copy the
    whole file at once)."""
    start, number = 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            end = len(data)
        number += 1
        yield number, data[start:end]
        start = end + 1


def iter_segments(data: bytes) -> Iterator[Segment | str]:
    """The run segments of a rollout, one at a time, and a problem (a string) for each
    bad line: a segment is parsed only when it is reached, so that a caller that keeps
    none of them holds one segment in memory at most."""
    for number, raw in _lines(data):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield (
                f"line {number}: not valid UTF-8 (bad byte at column {exc.start + 1}); "
                "segment skipped"
            )
            continue
        try:
            value = json.loads(line)
        except RecursionError:
            yield f"line {number}: JSON nested absurdly deep; segment skipped"
            continue
        except ValueError as exc:
            msg = getattr(exc, "msg", str(exc))
            col = getattr(exc, "colno", None)
            where = f" at column {col}" if col else ""
            yield f"line {number}: not valid JSON ({msg}{where}); segment skipped"
            continue
        del line
        if not isinstance(value, dict):
            yield f"line {number}: a JSON {_json_type(value)}, not an object; segment skipped"
            continue
        # Nesting can only pass the limit with more brackets than the limit.
        if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _too_deep(value):
            yield (
                f"line {number}: JSON nested more than {MAX_JSON_DEPTH} levels deep; "
                "segment skipped"
            )
            continue
        if any(m[1] is None for m in SURROGATE_ESCAPES.finditer(raw)):
            # Valid JSON, but "\ud800" alone is no character: no UTF-8 holds it, so the
            # database and the page could not take the text. Each becomes U+FFFD.
            value, changed = without_lone_surrogates(value)
            if changed:
                yield (
                    f"line {number}: a \\u escape for half a character (a lone UTF-16 "
                    "surrogate); shown as U+FFFD"
                )
        del raw
        terminal = value.get("terminal_metadata")
        interruptions = value.get("interruptions")
        yield Segment(
            line=number,
            updated_at=str(value.get("updated_at") or ""),
            rollout_id=str(value.get("rollout_id") or ""),
            input=_as_list(value.get("input")),
            generated_items=_as_list(value.get("generated_items")),
            interruptions=interruptions if isinstance(interruptions, list) else None,
            terminal_metadata=terminal if isinstance(terminal, dict) else {},
            final_output=value.get("final_output"),
            has_final_output_key="final_output" in value,
        )
