"""What the rollout page shows: a parsed rollout turned into segments of display
entries, each entry one item (or a tool call with its outputs), long texts clipped to
their head and tail.

Pure presentation: no database and no HTML. Templates escape every string here;
message text goes through the ``markdown`` filter (raw HTML off, unsafe links dropped).
Items are addressed by segment and index, both counted from 1 as the page shows them:
a segment's items are its ``input``, then ``generated_items``, then ``interruptions``,
then its final output.

Its parts, each using only those listed after it: ``pages`` (entries and pages),
``items`` (one item by its type), ``blocks`` (the parts of an item's body) and
``display`` (the dataclasses the templates read, and clipping).
"""

from .blocks import MAX_IMAGE_CHARS, ExecOutput, parse_exec_output
from .display import (
    HEAD_CHARS,
    HEAD_LINES,
    MIN_HIDDEN_CHARS,
    MIN_HIDDEN_LINES,
    TAIL_CHARS,
    TAIL_LINES,
    Badge,
    Block,
    Clip,
    Entry,
    ItemView,
    SegmentOutline,
    SegmentView,
    TranscriptPage,
    clip_text,
)
from .items import ItemUrl, build_item
from .pages import (
    ENTRIES_PER_PAGE,
    build_page,
    build_single,
    page_of_item,
    plan_entries,
    segment_items,
)

__all__ = [
    "ENTRIES_PER_PAGE",
    "HEAD_CHARS",
    "HEAD_LINES",
    "MAX_IMAGE_CHARS",
    "MIN_HIDDEN_CHARS",
    "MIN_HIDDEN_LINES",
    "TAIL_CHARS",
    "TAIL_LINES",
    "Badge",
    "Block",
    "Clip",
    "Entry",
    "ExecOutput",
    "ItemUrl",
    "ItemView",
    "SegmentOutline",
    "SegmentView",
    "TranscriptPage",
    "build_item",
    "build_page",
    "build_single",
    "clip_text",
    "page_of_item",
    "parse_exec_output",
    "plan_entries",
    "segment_items",
]
