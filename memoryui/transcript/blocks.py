"""The blocks of an item's body: text, pretty JSON and Markdown, clipped; a patch as a
diff; an image only as a checked data URL; links only when http(s); the exec tool's
output split into its fields and the output itself."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .display import Badge, Block, Clip, ItemView, clip_text

# Inline screenshots beyond this size are described, not embedded.
MAX_IMAGE_CHARS = 2_000_000


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _maybe_json(text: str) -> Any:
    """The JSON value of an object or array text, else None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict | list) else None


def text_block(text: str, full: bool, *, caption: str = "", css: str = "") -> Block:
    """A preformatted text; JSON objects and arrays are pretty-printed."""
    value = _maybe_json(text)
    if value is not None:
        return Block("text", caption, clip_text(_pretty(value), full=full), css=f"json {css}")
    return Block("text", caption, clip_text(text, full=full), css=css)


def json_block(value: Any, full: bool, *, caption: str = "") -> Block:
    return Block("text", caption, clip_text(_pretty(value), full=full), css="json")


def markdown_block(text: str, full: bool, *, caption: str = "", css: str = "") -> Block:
    return Block("markdown", caption, clip_text(text, full=full), css=css)


def note_block(text: str, css: str = "") -> Block:
    return Block("note", clip=Clip(text), css=css)


def str_or_empty(value: Any) -> str:
    return value if isinstance(value, str) else ""


def scalar_text(value: Any) -> str:
    return value if isinstance(value, str) else compact_json(value)


_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
_SAFE_IMAGE_RE = re.compile(r"^data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*$")


def image_block(url: Any, caption: str) -> Block:
    if isinstance(url, str) and _SAFE_IMAGE_RE.match(url[:200]):
        if len(url) > MAX_IMAGE_CHARS:
            return note_block(
                f"{caption}: embedded image of {len(url) * 3 // 4:,} bytes, not shown"
            )
        if _SAFE_IMAGE_RE.match(url):
            return Block("image", src=url, alt=caption)
    if isinstance(url, str) and url:
        shown = url if len(url) <= 300 else url[:300] + "…"
        return note_block(f"{caption}: {shown}")
    return note_block(f"{caption} (no inline data)")


def content_blocks(content: Any, full: bool, *, markdown: bool) -> list[Block]:
    """Blocks for message or output content: a string, or a list of parts."""
    if isinstance(content, str):
        if markdown:
            return [markdown_block(content, full)]
        return [text_block(content, full)]
    if not isinstance(content, list):
        return [] if content is None else [json_block(content, full)]
    blocks = []
    for part in content:
        if isinstance(part, str):
            blocks.append(markdown_block(part, full) if markdown else text_block(part, full))
            continue
        if not isinstance(part, dict):
            blocks.append(json_block(part, full))
            continue
        kind = str_or_empty(part.get("type"))
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            text = part["text"]
            blocks.append(markdown_block(text, full) if markdown else text_block(text, full))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            blocks.append(markdown_block(part["refusal"], full, caption="Refusal", css="refusal"))
        elif kind in ("input_image", "output_image", "image"):
            url = part.get("image_url") or part.get("url")
            if not url and part.get("file_id"):
                url = f"file {part['file_id']}"
            blocks.append(image_block(url, "Image"))
        elif kind == "input_file":
            name = (
                str_or_empty(part.get("filename")) or str_or_empty(part.get("file_id")) or "unnamed"
            )
            blocks.append(note_block(f"File: {name}"))
        else:
            blocks.append(json_block(part, full, caption=kind or "part"))
    return blocks


# The exec_command tool's output: "Chunk ID: ...\nWall time: ...\n[Process exited with
# code N\n][Process running with session ID N\n][Original token count: N\n]Output:\n..."
_EXIT_RE = re.compile(r"Process exited with code (-?\d+)")
_RUNNING_RE = re.compile(r"Process running with session ID (\S+)")


@dataclass
class ExecOutput:
    fields: list[tuple[str, str]]
    exit_code: int | None
    session: str
    output: str


def parse_exec_output(text: str) -> ExecOutput | None:
    if not text.startswith("Chunk ID: "):
        return None
    marker = text.find("\nOutput:", 0, 1000)
    if marker == -1:
        return None
    output = text[marker + len("\nOutput:") :]
    if output.startswith("\n"):
        output = output[1:]
    elif output:
        return None
    result = ExecOutput([], None, "", output)
    for line in text[:marker].split("\n"):
        if match := _EXIT_RE.fullmatch(line):
            result.exit_code = int(match.group(1))
        elif match := _RUNNING_RE.fullmatch(line):
            result.session = match.group(1)
        elif ": " in line:
            name, _, value = line.partition(": ")
            result.fields.append((name, value))
        else:
            return None
    return result


def output_blocks(view: ItemView, output: Any, full: bool) -> list[Block]:
    if isinstance(output, str):
        parsed = parse_exec_output(output)
        if parsed is None:
            return [text_block(output, full)] if output else [note_block("(empty output)")]
        if parsed.exit_code is not None:
            view.badges.append(
                Badge(f"exit {parsed.exit_code}", "ok" if parsed.exit_code == 0 else "bad")
            )
        if parsed.session:
            view.badges.append(Badge(f"still running (session {parsed.session})", "warn"))
        blocks = [Block("fields", fields=parsed.fields, css="exec-meta")]
        if parsed.output:
            blocks.append(text_block(parsed.output, full))
        else:
            blocks.append(note_block("(no output)"))
        return blocks
    blocks = content_blocks(output, full, markdown=False)
    return blocks or [note_block("(no output)")]


_PATCH_START = "*** Begin Patch"


def _diff_class(line: str) -> str:
    if line.startswith("*** "):
        return "file" if "File:" in line or line.startswith("*** Move to:") else "meta"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def _diff_lines(text: str) -> list[tuple[str, str]]:
    if text.endswith("\n"):
        text = text[:-1]
    return [(_diff_class(line), line) for line in text.split("\n")] if text else []


def diff_block(view: ItemView, text: str, full: bool, caption: str = "") -> Block:
    """A patch shown as a diff (never applied): added and removed lines classed."""
    added = removed = 0
    for line in text.split("\n"):
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    view.badges.append(Badge(f"+{added} −{removed}", "diffstat"))
    clip = clip_text(text, full=full)
    return Block(
        "diff",
        caption,
        clip,
        diff_head=_diff_lines(clip.head),
        diff_tail=_diff_lines(clip.tail),
    )


def is_patch(text: str) -> bool:
    return text.lstrip().startswith(_PATCH_START)


def arguments_blocks(view: ItemView, arguments: Any, full: bool) -> list[Block]:
    """A call's arguments: the command of a shell-like call up front, a patch as a
    diff, other JSON pretty-printed, anything else as text."""
    if isinstance(arguments, str):
        value = _maybe_json(arguments)
        if value is None:
            if is_patch(arguments):
                return [diff_block(view, arguments, full)]
            return [text_block(arguments, full, caption="arguments")] if arguments else []
    else:
        value = arguments
    if not isinstance(value, dict):
        return [json_block(value, full, caption="arguments")]
    blocks = []
    rest = dict(value)
    for key in ("cmd", "command", "commands"):
        command = rest.get(key)
        if isinstance(command, list) and all(isinstance(c, str) for c in command):
            command = " ".join(command) if key == "command" else "\n".join(command)
        if isinstance(command, str):
            del rest[key]
            blocks.append(Block("text", clip=clip_text(command, full=full), css="command"))
            break
    for key, patch in list(rest.items()):
        if isinstance(patch, str) and is_patch(patch):
            del rest[key]
            blocks.append(diff_block(view, patch, full, caption=key))
    if rest:
        if blocks and all(not isinstance(v, dict | list) for v in rest.values()):
            blocks.append(Block("fields", fields=[(k, scalar_text(v)) for k, v in rest.items()]))
        else:
            blocks.append(json_block(rest, full, caption="arguments"))
    return blocks


_HTTP_RE = re.compile(r"^https?://[^\s\"'<>]+$", re.IGNORECASE)


def links_block(urls: list[str], caption: str) -> Block:
    """Only http(s) URLs become links; anything else is shown as text."""
    block = Block("links", caption)
    for url in urls:
        if _HTTP_RE.match(url):
            block.links.append(url)
        else:
            block.fields.append(("", url))
    return block
