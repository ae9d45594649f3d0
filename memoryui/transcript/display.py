"""The display pieces of the rollout page: a long text clipped to its head and tail
(``Clip``), an item's body blocks, its view, entries, segments and the page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A long text shows its first HEAD_LINES and last TAIL_LINES lines, each side also
# bounded in characters (one minified line can be megabytes).
HEAD_LINES = 40
TAIL_LINES = 20
HEAD_CHARS = 6_000
TAIL_CHARS = 3_000
# Hiding less than this is not worth the reader's click.
MIN_HIDDEN_LINES = 10
MIN_HIDDEN_CHARS = 2_000


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
    # The memory files this call read (memoryui.rollout_reads.ItemRead), when it read any.
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
