"""Which entries of a ``MEMORY.md`` a read printed (``generation.memory_reads``): the
entries (``generation.review``'s keys) of the text the agent had that hold a line the
read printed: the lines a range printed, the lines a search printed (numbered with
``-n``, else matched by their text), or every entry for a whole file."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from . import review
from .memory_reads import CUT, LOAD_SKILL, RANGE, WHOLE, Read


@dataclass(frozen=True, slots=True)
class EntryLines:
    """A ``MEMORY.md`` text as reads are mapped to it: the first line (from 1) and the
    key of each entry, the number of lines (as ``sed`` and ``grep`` count them), and the
    numbers of the lines equal to each of the lines searches printed without numbers
    (``printed``, found when it was made). It holds no list of the text's lines: an
    import maps its reads to a 27 MB ``MEMORY.md`` at 100,000 rollouts."""

    starts: tuple[int, ...]
    keys: tuple[str, ...]
    total: int
    printed: dict[str, tuple[int, ...]]


def entry_lines(text: str, printed: Iterable[str] = (), *, keep: bool = False) -> EntryLines:
    """``text``'s entries and lines, with the numbers of the lines equal to each of
    ``printed`` (a trailing ``\\r`` aside), found in one pass over it. ``keep``: the
    entries come from the parse this process keeps (``review.entries``, which the pages
    use too), for a text small enough to keep: the caller decides."""
    starts, keys = review.entry_starts(text, kept=keep)
    total = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    wanted = {p.rstrip("\r") for p in printed if p.strip()}
    found: dict[str, list[int]] = {}
    if wanted:
        at = 0
        for number in range(1, total + 1):
            end = text.find("\n", at)
            if end == -1:
                end = len(text)
            line = text[at:end].rstrip("\r")
            if line in wanted:
                found.setdefault(line, []).append(number)
            at = end + 1
    return EntryLines(starts, keys, total, {line: tuple(n) for line, n in found.items()})


def entry_hits(read: Read, text: str | EntryLines) -> tuple[str, ...]:
    """The keys of the entries of ``text`` (a MEMORY.md, or its ``entry_lines`` made
    with the read's printed lines) that ``read`` printed a line of, in document order."""
    lines = entry_lines(text, read.printed) if isinstance(text, str) else text
    starts, keys, total = lines.starts, lines.keys, lines.total
    if not keys:
        return ()
    if read.how in (WHOLE, LOAD_SKILL):
        return keys
    hit: set[int] = set()
    if read.how in (RANGE, CUT):
        # The entries a range covers, found at its two ends (no set of its lines).
        for start, end in read.lines:
            if start < 0:
                start, end = total + start + 1, total + end + 1
            start, end = max(start, 1), min(end, total)
            if start <= end:
                first = max(bisect.bisect_right(starts, start) - 1, 0)
                hit.update(range(first, bisect.bisect_right(starts, end)))
    else:
        numbers: set[int] = set()
        if read.numbered:
            numbers.update(n for n in read.numbered if 1 <= n <= total)
        elif read.printed:
            for p in read.printed:
                if p.strip():
                    numbers.update(lines.printed.get(p.rstrip("\r"), ()))
        hit.update(bisect.bisect_right(starts, n) - 1 for n in numbers)
    return tuple(keys[i] for i in sorted(hit) if i >= 0)
