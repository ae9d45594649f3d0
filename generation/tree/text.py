"""Text of memory files: decoding for display, the SDK's ``key: value`` header lines,
and lone UTF-16 surrogates in JSON (which no UTF-8 text holds)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Sequence
from typing import Any


def decode_text(data: bytes) -> tuple[str, str | None]:
    """Decode UTF-8 for display; bad bytes become U+FFFD and the problem is described."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return (
            data.decode("utf-8", "replace"),
            f"not valid UTF-8 (first bad byte at offset {exc.start}); "
            "shown with replacement characters, stored unchanged",
        )


# How much of a text ``utf8_problem`` decodes at a time.
_CHECKED_PIECE = 1024 * 1024


def utf8_problem(data: bytes) -> str | None:
    """What ``decode_text`` reports of ``data`` (None: valid UTF-8), found without
    decoding it whole: a 27 MB ``MEMORY.md`` checked at import cost its 27 MB as text
    besides its bytes. Decoded a piece at a time, each piece dropped once decoded."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for start in range(0, len(view), _CHECKED_PIECE):
            end = start + _CHECKED_PIECE
            decoder.decode(view[start:end], final=end >= len(view))
    except UnicodeDecodeError:
        return decode_text(data)[1]  # rare: the same words, from the whole decode
    return None


def header_value(data: bytes, key: str) -> str:
    """The SDK's rule: the first line anywhere that starts with ``key:``."""
    prefix = f"{key}:".encode()
    if b"\r" not in data:  # lines end at b"\n" only: find the line, split nothing
        if data.startswith(prefix):
            start = len(prefix)
        else:
            found = data.find(b"\n" + prefix)
            if found < 0:
                return ""
            start = found + 1 + len(prefix)
        end = data.find(b"\n", start)
        return data[start : len(data) if end < 0 else end].decode("utf-8", "replace").strip()
    for line in data.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].decode("utf-8", "replace").strip()
    return ""


# str.splitlines() (the SDK's way to split lines) also breaks at "\r", "\x0b", "\x0c",
# "\x1c"-"\x1e", "\x85", "\u2028" and "\u2029"; text without them can be searched line
# by line with a regular expression, much faster.
_HEADER_RES: dict[str, re.Pattern[str]] = {}
_HEADER_BLOCK_RE = re.compile(r"\A(?:[A-Za-z_][A-Za-z0-9_]*:[^\n]*(?:\n|\Z))+(?:[ \t]*\n)?")


def _plain_breaks(text: str) -> bool:
    """Whether ``text`` breaks lines only at newlines. Substring tests, not a regular
    expression's character class (twice the cost): every raw memory and rollout summary
    of an import passes through here."""
    return not (
        "\r" in text
        or "\x0b" in text
        or "\x0c" in text
        or "\x1c" in text
        or "\x1d" in text
        or "\x1e" in text
        or "\x85" in text
        or "\u2028" in text
        or "\u2029" in text
    )


def read_headers(text: str, keys: Iterable[str]) -> dict[str, str]:
    """For each key, the value of the first line anywhere that starts with ``key:``."""
    if not _plain_breaks(text):
        return _read_headers_slow(text, keys)
    found: dict[str, str] = {}
    for key in keys:
        pattern = _HEADER_RES.get(key)
        if pattern is None:
            pattern = _HEADER_RES[key] = re.compile(f"^{re.escape(key)}:(.*)$", re.MULTILINE)
        match = pattern.search(text)
        if match:
            found[key] = match.group(1).strip()
    return found


def _read_headers_slow(text: str, keys: Iterable[str]) -> dict[str, str]:
    wanted = {f"{k}:": k for k in keys}
    found: dict[str, str] = {}
    for line in text.splitlines():
        for prefix, key in wanted.items():
            if key not in found and line.startswith(prefix):
                found[key] = line[len(prefix) :].strip()
        if len(found) == len(wanted):
            break
    return found


def split_header_block(text: str) -> tuple[str, str]:
    """Split ``key: value`` lines at the top of a file from the body after them."""
    if _plain_breaks(text):
        match = _HEADER_BLOCK_RE.match(text)
        return (match.group(0), text[match.end() :]) if match else ("", text)
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*:", lines[i]):
        i += 1
    if i == 0:
        return "", text
    head = "".join(lines[:i])
    rest = lines[i:]
    if rest and not rest[0].strip():
        head += rest[0]
        rest = rest[1:]
    return head, "".join(rest)


def read_header_block(text: str, keys: Sequence[str]) -> tuple[dict[str, str], str]:
    """``read_headers(text, keys)`` and the body of ``split_header_block(text)`` in one
    pass: the SDK writes its headers at the top, so their first lines anywhere are the
    header block's, and only a key missing from it is looked for further down."""
    if not _plain_breaks(text):
        return _read_headers_slow(text, keys), split_header_block(text)[1]
    match = _HEADER_BLOCK_RE.match(text)
    if match is None:
        return read_headers(text, keys), text
    found: dict[str, str] = {}
    for line in match.group(0).split("\n"):
        key, colon, value = line.partition(":")
        if colon and key in keys and key not in found:
            found[key] = value.strip()
    if len(found) < len(keys):
        found.update(read_headers(text, [k for k in keys if k not in found]))
    return {k: found[k] for k in keys if k in found}, text[match.end() :]


# JSON escapes of UTF-16 surrogates: a high one with the low one after it (group 1), or
# one alone (group 1 empty). An escaped backslash before "u" only costs a look at the line.
# One pass of one pattern that starts with a literal: ~1.5 ms per 1,000 rollouts.
SURROGATE_ESCAPES = re.compile(
    rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|[c-fC-F][0-9a-fA-F]{2})"
)


def without_lone_surrogates(value: Any) -> tuple[Any, bool]:
    """``value`` (parsed JSON) with each lone surrogate in its strings, keys included,
    replaced by U+FFFD (level by level, no recursion: the depth is checked already), and
    whether there was one (an escaped backslash before "ud800" is text, not one)."""
    changed = False

    def fixed(text: str) -> str:
        nonlocal changed
        if text.isascii():
            return text
        clean = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        changed = changed or clean != text
        return clean

    if isinstance(value, str):
        return fixed(value), changed
    root = [value]
    level: list[Any] = [root]
    while level:
        below: list[Any] = []
        for node in level:
            items = node.items() if type(node) is dict else enumerate(node)
            updates = []
            for key, child in items:
                if type(child) is str:
                    updates.append((key, fixed(child)))
                elif type(child) is dict or type(child) is list:
                    below.append(child)
            for key, child in updates:
                node[key] = child
            if type(node) is dict and any(type(k) is str and not k.isascii() for k in node):
                renamed = {fixed(k): v for k, v in node.items()}
                node.clear()
                node.update(renamed)
        level = below
    return root[0], changed
