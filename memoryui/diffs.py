"""Side-by-side line diffs with word-level highlights, as escaped HTML fragments, and
unified diffs as text."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

_WORDS = re.compile(r"\s+|\w+|[^\w\s]")


@dataclass(frozen=True)
class Row:
    kind: str  # "same", "changed", "added", "removed", "skip"
    left_no: int | None
    left: SafeString
    right_no: int | None
    right: SafeString


def _words(a: str, b: str) -> tuple[SafeString, SafeString]:
    wa, wb = _WORDS.findall(a), _WORDS.findall(b)
    left: list[str] = []
    right: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
        old, new = escape("".join(wa[i1:i2])), escape("".join(wb[j1:j2]))
        if op == "equal":
            left.append(old)
            right.append(new)
        else:
            if old:
                left.append(f"<del>{old}</del>")
            if new:
                right.append(f"<ins>{new}</ins>")
    return mark_safe("".join(left)), mark_safe("".join(right))  # noqa: S308 - escaped above


# Entry-sized diffs (a review page shows dozens, and is opened again and again) are
# cached; whole documents are not, so that the cache stays small.
CACHED_DIFF_CHARS = 20_000


def side_by_side(old: str, new: str, context: int = 3) -> list[Row]:
    """Rows of a two-column diff; unchanged stretches longer than ``2 * context`` lines
    are folded into one "skip" row."""
    if len(old) + len(new) <= CACHED_DIFF_CHARS:
        return list(_cached_rows(old, new, context))
    return _rows(old, new, context)


@lru_cache(maxsize=2048)
def _cached_rows(old: str, new: str, context: int) -> tuple[Row, ...]:
    return tuple(_rows(old, new, context))


def _rows(old: str, new: str, context: int) -> list[Row]:
    a, b = old.splitlines(), new.splitlines()
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        if rows:
            rows.append(Row("skip", None, mark_safe(""), None, mark_safe("")))
        for op, i1, i2, j1, j2 in group:
            if op == "equal":
                for k in range(i2 - i1):
                    text = escape(a[i1 + k])
                    rows.append(Row("same", i1 + k + 1, text, j1 + k + 1, text))
                continue
            pairs = max(i2 - i1, j2 - j1)
            for k in range(pairs):
                i, j = i1 + k, j1 + k
                has_old, has_new = i < i2, j < j2
                if has_old and has_new:
                    left, right = _words(a[i], b[j])
                    rows.append(Row("changed", i + 1, left, j + 1, right))
                elif has_old:
                    rows.append(Row("removed", i + 1, escape(a[i]), None, mark_safe("")))
                else:
                    rows.append(Row("added", None, mark_safe(""), j + 1, escape(b[j])))
    return rows


def stats(rows: list[Row]) -> tuple[int, int]:
    added = sum(1 for r in rows if r.kind in ("added", "changed"))
    removed = sum(1 for r in rows if r.kind in ("removed", "changed"))
    return added, removed


def unified(current: str, proposed: str) -> str:
    """The unified diff of two texts, as ``diff -u`` writes it (labelled ``current`` and
    ``proposed``)."""
    return "".join(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            proposed.splitlines(keepends=True),
            "current",
            "proposed",
        )
    )
