"""A rollout's transcript in pages: each segment's items grouped into entries (a call
with the outputs that answer it), ``ENTRIES_PER_PAGE`` entries a page, and the page that
shows a given item."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from generation.tree import ParsedRollout, Segment

from .blocks import compact_json
from .display import Badge, Entry, ItemView, SegmentOutline, SegmentView, TranscriptPage
from .items import ItemUrl, build_item, item_type, no_url

# Entries (a message, or a call with its outputs) rendered per page of transcript: a
# rollout of many MB stays a page of bounded size.
ENTRIES_PER_PAGE = 100


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
        kind = item_type(item)
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
        fields.append((key, value if isinstance(value, str) else compact_json(value)))
    return fields


def build_page(
    parsed: ParsedRollout,
    page: int = 1,
    *,
    per_page: int = ENTRIES_PER_PAGE,
    item_url: ItemUrl = no_url,
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
    parsed: ParsedRollout, segment: int, index: int, *, item_url: ItemUrl = no_url
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
