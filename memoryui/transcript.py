"""What the rollout page shows: a parsed rollout turned into segments of display
entries, each entry one item (or a tool call with its outputs), long texts clipped to
their head and tail.

Pure presentation: no database and no HTML. Templates escape every string here;
message text goes through the ``markdown`` filter (raw HTML off, unsafe links dropped).
Items are addressed by segment and index, both counted from 1 as the page shows them:
a segment's items are its ``input``, then ``generated_items``, then ``interruptions``,
then its final output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from generation.tree import ParsedRollout, Segment

# A long text shows its first HEAD_LINES and last TAIL_LINES lines, each side also
# bounded in characters (one minified line can be megabytes).
HEAD_LINES = 40
TAIL_LINES = 20
HEAD_CHARS = 6_000
TAIL_CHARS = 3_000
# Hiding less than this is not worth the reader's click.
MIN_HIDDEN_LINES = 10
MIN_HIDDEN_CHARS = 2_000
# Entries (a message, or a call with its outputs) rendered per page of transcript: a
# rollout of many MB stays a page of bounded size.
ENTRIES_PER_PAGE = 100
# Inline screenshots beyond this size are described, not embedded.
MAX_IMAGE_CHARS = 2_000_000

ItemUrl = Callable[[int, int], str]


def _no_url(segment: int, index: int) -> str:
    return ""


# --- clipping --------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    """A text, or its head and tail with the size of the hidden middle."""

    head: str
    tail: str = ""
    hidden_lines: int = 0
    hidden_chars: int = 0

    @property
    def clipped(self) -> bool:
        return self.hidden_chars > 0


def clip_text(text: str, *, full: bool = False) -> Clip:
    if full or (
        len(text) <= HEAD_CHARS + TAIL_CHARS + MIN_HIDDEN_CHARS
        and text.count("\n") <= HEAD_LINES + TAIL_LINES + MIN_HIDDEN_LINES
    ):
        return Clip(text)
    head_end = _after_lines(text, HEAD_LINES, HEAD_CHARS)
    tail_start = _before_last_lines(text, TAIL_LINES, TAIL_CHARS)
    hidden = text[head_end:tail_start]
    if tail_start <= head_end or (
        hidden.count("\n") < MIN_HIDDEN_LINES and len(hidden) < MIN_HIDDEN_CHARS
    ):
        return Clip(text)
    return Clip(text[:head_end], text[tail_start:], hidden.count("\n"), len(hidden))


def _after_lines(text: str, lines: int, limit: int) -> int:
    """Offset just after the first ``lines`` lines, at most ``limit``."""
    limit = min(limit, len(text))
    pos = 0
    for _ in range(lines):
        newline = text.find("\n", pos, limit)
        if newline == -1:
            return limit
        pos = newline + 1
    return pos


def _before_last_lines(text: str, lines: int, limit: int) -> int:
    """Offset where the last ``lines`` lines start, at most ``limit`` from the end."""
    floor = max(0, len(text) - limit)
    pos = len(text) - 1 if text.endswith("\n") else len(text)
    for _ in range(lines):
        newline = text.rfind("\n", floor, pos)
        if newline == -1:
            return floor
        pos = newline
    return pos + 1


# --- display pieces --------------------------------------------------------------------


@dataclass
class Badge:
    text: str
    css: str = ""


@dataclass
class Block:
    """One part of an item's body. ``kind`` picks the template branch:
    ``markdown`` and ``text`` (``clip``), ``diff`` (``clip`` plus classified lines),
    ``fields`` (name/value pairs), ``links`` (http(s) URLs), ``image`` (``src``, a
    checked data URL) and ``note`` (``clip``, a short remark)."""

    kind: str
    caption: str = ""
    clip: Clip = field(default_factory=lambda: Clip(""))
    css: str = ""
    fields: list[tuple[str, str]] = field(default_factory=list)
    diff_head: list[tuple[str, str]] = field(default_factory=list)
    diff_tail: list[tuple[str, str]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    src: str = ""
    alt: str = ""

    @property
    def parts(self) -> list[Any]:
        """What is shown: the whole text, or its head and tail (an "expand" between)."""
        if self.kind == "diff":
            return [self.diff_head, self.diff_tail] if self.clip.clipped else [self.diff_head]
        return [self.clip.head, self.clip.tail] if self.clip.clipped else [self.clip.head]


@dataclass
class ItemView:
    segment: int
    index: int
    source: str  # input, generated, interruption or final_output
    type: str
    label: str
    css: str
    kind_label: str = ""
    call_id: str = ""
    badges: list[Badge] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    url: str = ""
    # The memory files this call read (memoryui.usage.ItemRead), when it read any.
    memory_reads: list[Any] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"item-{self.segment}-{self.index}"

    @property
    def clipped(self) -> bool:
        return any(block.clip.clipped for block in self.blocks)


@dataclass
class Entry:
    """A message or other item, or a call followed by the outputs that answer it."""

    items: list[ItemView]

    @property
    def css(self) -> str:
        return self.items[0].css


@dataclass
class SegmentOutline:
    number: int
    updated_at: str
    updated_at_display: str
    terminal_state: str
    entry_count: int
    item_count: int
    page: int


@dataclass
class SegmentView:
    outline: SegmentOutline
    terminal: list[tuple[str, str]]
    entries: list[Entry]
    first_entry: int  # 1-based numbers within the segment of the entries shown
    last_entry: int
    continued: bool  # began on an earlier page
    continues: bool  # goes on on a later page
    interruptions: list[ItemView] = field(default_factory=list)
    final_output: ItemView | None = None

    @property
    def number(self) -> int:
        return self.outline.number


@dataclass
class TranscriptPage:
    number: int
    page_count: int
    entry_total: int
    outline: list[SegmentOutline]
    segments: list[SegmentView]
    problems: list[str]

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.page_count

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1


# --- segments, entries, pages ----------------------------------------------------------


def segment_items(segment: Segment) -> list[tuple[str, Any]]:
    """Every item of a segment with its source, in the order the page numbers them."""
    items: list[tuple[str, Any]] = [("input", item) for item in segment.input]
    items += [("generated", item) for item in segment.generated_items]
    items += [("interruption", item) for item in segment.interruptions or []]
    if segment.has_final_output_key:
        items.append(("final_output", segment.final_output))
    return items


# A call type and the output type that answers it (matched by call id).
_OUTPUT_OF = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "shell_call": "shell_call_output",
    "local_shell_call": "local_shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "computer_call": "computer_call_output",
    "tool_search_call": "tool_search_output",
    "program": "program_output",
    "mcp_approval_request": "mcp_approval_response",
}
_OUTPUT_TYPES = frozenset(_OUTPUT_OF.values())


def _type(item: Any) -> str:
    if isinstance(item, dict):
        value = item.get("type")
        if isinstance(value, str):
            return value
        if "role" in item:
            return "message"
    return ""


def _call_key(item: dict[str, Any]) -> str:
    key = item.get("id") if item.get("type") == "mcp_approval_request" else item.get("call_id")
    return key if isinstance(key, str) else ""


def _output_key(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "mcp_approval_response":
        key = item.get("approval_request_id")
    elif kind == "local_shell_call_output":  # the API names it "id"
        key = item.get("call_id") or item.get("id")
    else:
        key = item.get("call_id")
    return key if isinstance(key, str) else ""


def plan_entries(segment: Segment) -> list[list[int]]:
    """Group the transcript part of a segment (input and generated items) into entries
    of 0-based positions: an output goes under the call it answers, when that call
    came before it; anything else stands alone."""
    transcript = segment.input + segment.generated_items
    entries: list[list[int]] = []
    open_calls: dict[tuple[str, str], list[int]] = {}
    for position, item in enumerate(transcript):
        kind = _type(item)
        if kind in _OUTPUT_TYPES:
            entry = open_calls.get((kind, _output_key(item)))
            if entry is not None:
                entry.append(position)
                continue
        entry = [position]
        entries.append(entry)
        if kind in _OUTPUT_OF and (key := _call_key(item)):
            open_calls[(_OUTPUT_OF[kind], key)] = entry
    return entries


def _format_timestamp(value: str) -> str:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value or "unknown"
    if moment.utcoffset() == timedelta(0):
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.isoformat(sep=" ", timespec="seconds")


def _terminal_fields(segment: Segment) -> list[tuple[str, str]]:
    fields = []
    for key, value in segment.terminal_metadata.items():
        if key == "terminal_state" or value is None:
            continue
        fields.append((key, value if isinstance(value, str) else _compact_json(value)))
    return fields


def build_page(
    parsed: ParsedRollout,
    page: int = 1,
    *,
    per_page: int = ENTRIES_PER_PAGE,
    item_url: ItemUrl = _no_url,
) -> TranscriptPage:
    """One page of the transcript: ``per_page`` entries across segments, each segment
    headed where it starts and closed (interruptions, terminal metadata, final output)
    on the page where its last entry is. Out-of-range pages are clamped."""
    plans = [plan_entries(segment) for segment in parsed.segments]
    total = sum(len(plan) for plan in plans)
    page_count = max(1, -(-total // per_page))
    page = min(max(page, 1), page_count)
    low, high = (page - 1) * per_page, page * per_page

    def page_of(position: int) -> int:
        return min(position // per_page + 1, page_count)

    outline: list[SegmentOutline] = []
    views: list[SegmentView] = []
    start = 0
    for number, (segment, plan) in enumerate(zip(parsed.segments, plans, strict=True), 1):
        end = start + len(plan)
        first_page, last_page = page_of(start), page_of(max(start, end - 1))
        line = SegmentOutline(
            number=number,
            updated_at=segment.updated_at,
            updated_at_display=_format_timestamp(segment.updated_at),
            terminal_state=segment.terminal_state,
            entry_count=len(plan),
            item_count=len(segment.input) + len(segment.generated_items),
            page=first_page,
        )
        outline.append(line)
        if first_page <= page <= last_page:
            shown = range(max(start, low), min(end, high))
            items = segment_items(segment)
            entries = []
            for position in shown:
                group = plan[position - start]
                shown_items = [
                    build_item(number, i + 1, *items[i], item_url=item_url) for i in group
                ]
                if shown_items[0].type in _OUTPUT_TYPES:
                    shown_items[0].badges.append(Badge("its call is not in this segment", "warn"))
                entries.append(Entry(shown_items))
            view = SegmentView(
                outline=line,
                terminal=_terminal_fields(segment),
                entries=entries,
                first_entry=shown.start - start + 1,
                last_entry=shown.stop - start,
                continued=page > first_page,
                continues=page < last_page,
            )
            if page == last_page:
                transcript_len = len(segment.input) + len(segment.generated_items)
                for i in range(transcript_len, len(items)):
                    item = build_item(number, i + 1, *items[i], item_url=item_url)
                    if items[i][0] == "final_output":
                        view.final_output = item
                    else:
                        view.interruptions.append(item)
            views.append(view)
        start = end
    return TranscriptPage(page, page_count, total, outline, views, list(parsed.problems))


def build_single(
    parsed: ParsedRollout, segment: int, index: int, *, item_url: ItemUrl = _no_url
) -> ItemView | None:
    """One item in full (nothing clipped), or None when there is no such item."""
    if not 1 <= segment <= len(parsed.segments):
        return None
    items = segment_items(parsed.segments[segment - 1])
    if not 1 <= index <= len(items):
        return None
    return build_item(segment, index, *items[index - 1], full=True, item_url=item_url)


def page_of_item(
    parsed: ParsedRollout, segment: int, index: int, *, per_page: int = ENTRIES_PER_PAGE
) -> int:
    """The transcript page that shows an item (its segment's last page for the
    interruptions and final output)."""
    position = 0
    for number, seg in enumerate(parsed.segments, 1):
        plan = plan_entries(seg)
        if number == segment:
            for offset, entry in enumerate(plan):
                if index - 1 in entry:
                    return (position + offset) // per_page + 1
            return max(position, position + len(plan) - 1) // per_page + 1
        position += len(plan)
    return 1


# --- items -----------------------------------------------------------------------------


def build_item(
    segment: int,
    index: int,
    source: str,
    item: Any,
    *,
    full: bool = False,
    item_url: ItemUrl = _no_url,
) -> ItemView:
    """The display of one item: messages, calls and outputs by type; anything else
    (an unknown type, a non-object) as its type and pretty JSON."""
    view = ItemView(segment, index, source, _type(item), "", "")
    view.url = item_url(segment, index)
    if source == "final_output":
        _final_output(view, item, full)
    elif not isinstance(item, dict):
        _generic(view, item, full)
    else:
        builder = _BUILDERS.get(view.type, _generic)
        builder(view, item, full)
        status = item.get("status")
        if isinstance(status, str) and status not in ("completed", ""):
            view.badges.append(Badge(status, "bad" if status == "failed" else "warn"))
    if source == "interruption":
        view.css += " interruption"
        view.badges.insert(0, Badge("awaiting approval", "warn"))
    return view


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _compact_json(value: Any) -> str:
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


def _text_block(text: str, full: bool, *, caption: str = "", css: str = "") -> Block:
    """A preformatted text; JSON objects and arrays are pretty-printed."""
    value = _maybe_json(text)
    if value is not None:
        return Block("text", caption, clip_text(_pretty(value), full=full), css=f"json {css}")
    return Block("text", caption, clip_text(text, full=full), css=css)


def _json_block(value: Any, full: bool, *, caption: str = "") -> Block:
    return Block("text", caption, clip_text(_pretty(value), full=full), css="json")


def _markdown_block(text: str, full: bool, *, caption: str = "", css: str = "") -> Block:
    return Block("markdown", caption, clip_text(text, full=full), css=css)


def _note(text: str, css: str = "") -> Block:
    return Block("note", clip=Clip(text), css=css)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else _compact_json(value)


_ROLE_RE = re.compile(r"^[a-z_]{1,20}$")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
_SAFE_IMAGE_RE = re.compile(r"^data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*$")


def _image_block(url: Any, caption: str) -> Block:
    if isinstance(url, str) and _SAFE_IMAGE_RE.match(url[:200]):
        if len(url) > MAX_IMAGE_CHARS:
            return _note(f"{caption}: embedded image of {len(url) * 3 // 4:,} bytes, not shown")
        if _SAFE_IMAGE_RE.match(url):
            return Block("image", src=url, alt=caption)
    if isinstance(url, str) and url:
        shown = url if len(url) <= 300 else url[:300] + "…"
        return _note(f"{caption}: {shown}")
    return _note(f"{caption} (no inline data)")


def _content_blocks(content: Any, full: bool, *, markdown: bool) -> list[Block]:
    """Blocks for message or output content: a string, or a list of parts."""
    if isinstance(content, str):
        if markdown:
            return [_markdown_block(content, full)]
        return [_text_block(content, full)]
    if not isinstance(content, list):
        return [] if content is None else [_json_block(content, full)]
    blocks = []
    for part in content:
        if isinstance(part, str):
            blocks.append(_markdown_block(part, full) if markdown else _text_block(part, full))
            continue
        if not isinstance(part, dict):
            blocks.append(_json_block(part, full))
            continue
        kind = _str(part.get("type"))
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            text = part["text"]
            blocks.append(_markdown_block(text, full) if markdown else _text_block(text, full))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            blocks.append(_markdown_block(part["refusal"], full, caption="Refusal", css="refusal"))
        elif kind in ("input_image", "output_image", "image"):
            url = part.get("image_url") or part.get("url")
            if not url and part.get("file_id"):
                url = f"file {part['file_id']}"
            blocks.append(_image_block(url, "Image"))
        elif kind == "input_file":
            name = _str(part.get("filename")) or _str(part.get("file_id")) or "unnamed"
            blocks.append(_note(f"File: {name}"))
        else:
            blocks.append(_json_block(part, full, caption=kind or "part"))
    return blocks


def _message(view: ItemView, item: dict[str, Any], full: bool) -> None:
    role = _str(item.get("role"))
    view.type = _str(item.get("type")) or "message"
    view.label = role.capitalize() if role else "Message"
    view.css = f"message role-{role if _ROLE_RE.match(role) else 'other'}"
    phase = item.get("phase")
    if isinstance(phase, str) and phase:
        view.badges.append(Badge(phase.replace("_", " "), "phase"))
    if isinstance(item.get("tool_call_id"), str):
        view.call_id = item["tool_call_id"]
    view.blocks = _content_blocks(item.get("content"), full, markdown=True)
    if not view.blocks:
        view.blocks.append(_note("(empty message)"))


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


def _output_blocks(view: ItemView, output: Any, full: bool) -> list[Block]:
    if isinstance(output, str):
        parsed = parse_exec_output(output)
        if parsed is None:
            return [_text_block(output, full)] if output else [_note("(empty output)")]
        if parsed.exit_code is not None:
            view.badges.append(
                Badge(f"exit {parsed.exit_code}", "ok" if parsed.exit_code == 0 else "bad")
            )
        if parsed.session:
            view.badges.append(Badge(f"still running (session {parsed.session})", "warn"))
        blocks = [Block("fields", fields=parsed.fields, css="exec-meta")]
        if parsed.output:
            blocks.append(_text_block(parsed.output, full))
        else:
            blocks.append(_note("(no output)"))
        return blocks
    blocks = _content_blocks(output, full, markdown=False)
    return blocks or [_note("(no output)")]


def _output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Output"
    view.css = "output"
    view.call_id = _str(item.get("call_id"))
    view.blocks = _output_blocks(view, item.get("output"), full)


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


def _diff_block(view: ItemView, text: str, full: bool, caption: str = "") -> Block:
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


def _is_patch(text: str) -> bool:
    return text.lstrip().startswith(_PATCH_START)


def _arguments_blocks(view: ItemView, arguments: Any, full: bool) -> list[Block]:
    """A call's arguments: the command of a shell-like call up front, a patch as a
    diff, other JSON pretty-printed, anything else as text."""
    if isinstance(arguments, str):
        value = _maybe_json(arguments)
        if value is None:
            if _is_patch(arguments):
                return [_diff_block(view, arguments, full)]
            return [_text_block(arguments, full, caption="arguments")] if arguments else []
    else:
        value = arguments
    if not isinstance(value, dict):
        return [_json_block(value, full, caption="arguments")]
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
        if isinstance(patch, str) and _is_patch(patch):
            del rest[key]
            blocks.append(_diff_block(view, patch, full, caption=key))
    if rest:
        if blocks and all(not isinstance(v, dict | list) for v in rest.values()):
            blocks.append(Block("fields", fields=[(k, _scalar(v)) for k, v in rest.items()]))
        else:
            blocks.append(_json_block(rest, full, caption="arguments"))
    return blocks


def _function_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "function call" if view.type == "function_call" else view.type
    view.label = _str(item.get("name")) or view.type
    namespace = _str(item.get("namespace"))
    if namespace:
        view.label = f"{namespace}.{view.label}"
    view.css = "call"
    view.call_id = _str(item.get("call_id"))
    view.blocks = _arguments_blocks(view, item.get("arguments"), full)


def _custom_tool_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "custom tool call"
    view.label = _str(item.get("name")) or "custom tool"
    view.css = "call"
    view.call_id = _str(item.get("call_id"))
    tool_input = item.get("input")
    if isinstance(tool_input, str) and (view.label == "apply_patch" or _is_patch(tool_input)):
        view.css = "call patch"
        view.blocks = [_diff_block(view, tool_input, full)]
    elif isinstance(tool_input, str):
        view.blocks = [_text_block(tool_input, full, caption="input")] if tool_input else []
    else:
        view.blocks = [_json_block(tool_input, full, caption="input")]


def _shell_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "shell call" if view.type == "shell_call" else "local shell call"
    view.label = "shell"
    view.css = "call"
    view.call_id = _str(item.get("call_id"))
    action = item.get("action")
    if not isinstance(action, dict):
        view.blocks = [_json_block(action, full, caption="action")]
        return
    commands = action.get("commands", action.get("command"))
    rest = {k: v for k, v in action.items() if k not in ("commands", "command", "type")}
    if isinstance(commands, list) and all(isinstance(c, str) for c in commands):
        joiner = "\n" if "commands" in action else " "
        view.blocks.append(
            Block("text", clip=clip_text(joiner.join(commands), full=full), css="command")
        )
    elif commands is not None:
        rest["commands"] = commands
    rest = {k: v for k, v in rest.items() if v is not None}
    if rest:
        view.blocks.append(Block("fields", fields=[(k, _scalar(v)) for k, v in rest.items()]))


def _shell_call_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Output"
    view.css = "output"
    view.call_id = _str(item.get("call_id")) or _str(item.get("id"))
    output = item.get("output")
    if not isinstance(output, list):
        view.blocks = _output_blocks(view, output, full)
        return
    for chunk in output:
        if not isinstance(chunk, dict):
            view.blocks.append(_json_block(chunk, full))
            continue
        outcome = chunk.get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") == "exit":
            code = outcome.get("exit_code")
            view.badges.append(Badge(f"exit {code}", "ok" if code == 0 else "bad"))
        elif isinstance(outcome, dict) and outcome.get("type") == "timeout":
            view.badges.append(Badge("timed out", "bad"))
        stdout, stderr = _str(chunk.get("stdout")), _str(chunk.get("stderr"))
        if stdout:
            view.blocks.append(_text_block(stdout, full, caption="stdout"))
        if stderr:
            view.blocks.append(_text_block(stderr, full, caption="stderr", css="stderr"))
        if not stdout and not stderr:
            view.blocks.append(_note("(no output)"))


def _apply_patch_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "apply patch call"
    view.label = "apply_patch"
    view.css = "call patch"
    view.call_id = _str(item.get("call_id"))
    operation = item.get("operation")
    if not isinstance(operation, dict):
        view.blocks = [_json_block(operation, full, caption="operation")]
        return
    kind = _str(operation.get("type")) or "operation"
    path = _str(operation.get("path"))
    view.blocks.append(Block("fields", fields=[(kind.replace("_", " "), path)]))
    diff = operation.get("diff")
    if isinstance(diff, str) and diff:
        view.blocks.append(_diff_block(view, diff, full))


def _apply_patch_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    _output(view, item, full)
    if item.get("output") in (None, ""):
        view.blocks = []


def _computer_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "computer call"
    view.css = "call"
    view.call_id = _str(item.get("call_id"))
    actions = item.get("actions")
    if not isinstance(actions, list):
        actions = [item.get("action")]
    names = []
    for action in actions:
        if isinstance(action, dict):
            names.append(_str(action.get("type")) or "action")
            fields = [(k, _scalar(v)) for k, v in action.items() if k != "type"]
            caption = names[-1] if len(actions) > 1 else ""
            view.blocks.append(Block("fields", caption=caption, fields=fields))
        elif action is not None:
            view.blocks.append(_json_block(action, full, caption="action"))
    view.label = ", ".join(names) or "computer"
    checks = item.get("pending_safety_checks")
    if checks:
        view.blocks.append(_json_block(checks, full, caption="pending safety checks"))


def _computer_call_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Screenshot"
    view.css = "output"
    view.call_id = _str(item.get("call_id"))
    output = item.get("output")
    if isinstance(output, dict):
        url = output.get("image_url") or (
            f"file {output['file_id']}" if output.get("file_id") else None
        )
        view.blocks.append(_image_block(url, "Screenshot"))
    else:
        view.blocks = _output_blocks(view, output, full)
    checks = item.get("acknowledged_safety_checks")
    if checks:
        view.blocks.append(_json_block(checks, full, caption="acknowledged safety checks"))


def _web_links(values: Any) -> list[str]:
    links = []
    for value in values if isinstance(values, list) else []:
        url = value.get("url") if isinstance(value, dict) else value
        if isinstance(url, str):
            links.append(url)
    return links


def _web_search_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "web search"
    view.css = "call"
    action = item.get("action")
    if not isinstance(action, dict):
        view.label = "search"
        if action is not None:
            view.blocks.append(_json_block(action, full, caption="action"))
        return
    view.label = (_str(action.get("type")) or "search").replace("_", " ")
    fields = []
    if isinstance(action.get("query"), str):
        fields.append(("query", action["query"]))
    for query in action.get("queries") or []:
        if isinstance(query, str) and query != action.get("query"):
            fields.append(("query", query))
    for key in ("url", "pattern"):
        if isinstance(action.get(key), str):
            fields.append((key, action[key]))
    if fields:
        view.blocks.append(Block("fields", fields=fields))
    sources = _web_links(action.get("sources"))
    if sources:
        view.blocks.append(_links_block(sources, "sources"))


_HTTP_RE = re.compile(r"^https?://[^\s\"'<>]+$", re.IGNORECASE)


def _links_block(urls: list[str], caption: str) -> Block:
    """Only http(s) URLs become links; anything else is shown as text."""
    block = Block("links", caption)
    for url in urls:
        if _HTTP_RE.match(url):
            block.links.append(url)
        else:
            block.fields.append(("", url))
    return block


def _mcp_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    is_request = view.type == "mcp_approval_request"
    view.kind_label = "MCP approval request" if is_request else "MCP call"
    view.label = _str(item.get("name")) or "tool"
    view.css = "call"
    server = _str(item.get("server_label"))
    if server:
        view.badges.append(Badge(server, "server"))
    view.blocks = _arguments_blocks(view, item.get("arguments"), full)
    if not is_request:
        output, error = item.get("output"), item.get("error")
        if isinstance(output, str) and output:
            view.blocks.append(_text_block(output, full, caption="output"))
        elif output not in (None, ""):
            view.blocks.append(_json_block(output, full, caption="output"))
        if error:
            view.badges.append(Badge("error", "bad"))
            view.blocks.append(_text_block(_scalar(error), full, caption="error", css="stderr"))


def _mcp_approval_response(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Approval"
    view.css = "output"
    view.call_id = _str(item.get("approval_request_id"))
    approve = item.get("approve")
    view.badges.append(Badge("approved", "ok") if approve is True else Badge("denied", "bad"))
    reason = item.get("reason")
    if isinstance(reason, str) and reason:
        view.blocks.append(_text_block(reason, full, caption="reason"))


def _mcp_list_tools(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "MCP tools list"
    view.label = _str(item.get("server_label")) or "server"
    view.css = "call"
    tools = item.get("tools")
    names = (
        [_str(t.get("name")) for t in tools if isinstance(t, dict)]
        if isinstance(tools, list)
        else []
    )
    if names:
        view.blocks.append(Block("fields", fields=[("tools", ", ".join(filter(None, names)))]))
    if item.get("error"):
        view.blocks.append(_text_block(_scalar(item["error"]), full, caption="error", css="stderr"))


def _tool_search_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "tool search"
    view.label = _str(item.get("execution")) or "search"
    view.css = "call"
    view.call_id = _str(item.get("call_id"))
    view.blocks = _arguments_blocks(view, item.get("arguments"), full)


def _tool_search_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Tools found"
    view.css = "output"
    view.call_id = _str(item.get("call_id"))
    tools = item.get("tools")
    if isinstance(tools, list):
        names = [_str(t.get("name")) for t in tools if isinstance(t, dict)]
        view.blocks.append(Block("fields", fields=[("tools", ", ".join(filter(None, names)))]))
        view.blocks.append(_json_block(tools, full, caption="definitions"))
    elif tools is not None:
        view.blocks.append(_json_block(tools, full, caption="tools"))


def _program(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "program"
    view.label = "program"
    view.css = "call"
    view.call_id = _str(item.get("call_id"))
    code = item.get("code")
    if isinstance(code, str):
        view.blocks.append(Block("text", "code", clip_text(code, full=full), css="code"))
    elif code is not None:
        view.blocks.append(_json_block(code, full, caption="code"))


def _program_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Result"
    view.css = "output"
    view.call_id = _str(item.get("call_id"))
    view.blocks = _output_blocks(view, item.get("result", item.get("output")), full)


def _generic(view: ItemView, item: Any, full: bool) -> None:
    view.kind_label = "item"
    view.label = view.type or ("untyped object" if isinstance(item, dict) else _type_name(item))
    view.css = "generic"
    view.blocks = [_json_block(item, full)]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string"}.get(
        type(value), "array" if isinstance(value, list) else "value"
    )


def _final_output(view: ItemView, value: Any, full: bool) -> None:
    view.type = "final_output"
    view.label = "Final output"
    view.css = "final-output"
    if isinstance(value, str):
        view.blocks = [_markdown_block(value, full)] if value else [_note("(empty string)")]
    else:
        view.blocks = [_json_block(value, full)]


_BUILDERS: dict[str, Callable[[ItemView, dict[str, Any], bool], None]] = {
    "message": _message,
    "function_call": _function_call,
    "function_call_output": _output,
    "custom_tool_call": _custom_tool_call,
    "custom_tool_call_output": _output,
    "shell_call": _shell_call,
    "shell_call_output": _shell_call_output,
    "local_shell_call": _shell_call,
    "local_shell_call_output": _shell_call_output,
    "apply_patch_call": _apply_patch_call,
    "apply_patch_call_output": _apply_patch_output,
    "computer_call": _computer_call,
    "computer_call_output": _computer_call_output,
    "web_search_call": _web_search_call,
    "mcp_call": _mcp_call,
    "mcp_approval_request": _mcp_call,
    "mcp_approval_response": _mcp_approval_response,
    "mcp_list_tools": _mcp_list_tools,
    "tool_search_call": _tool_search_call,
    "tool_search_output": _tool_search_output,
    "program": _program,
    "program_output": _program_output,
}
