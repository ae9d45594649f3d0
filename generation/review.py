"""Entry-level comparison, assembly and three-way merge of MEMORY.md and
memory_summary.md, for reviewing consolidations like pull requests.

An entry is a top-level block of the document (a task group, a section, a preamble);
entries are matched across versions by kind and title, so a reworded entry is
"changed" and one that changed place is "moved".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from . import memory_md


@dataclass(frozen=True)
class Entry:
    key: str
    kind: str
    title: str
    text: str


def entries(text: str) -> list[Entry]:
    """The top-level entries of a document; joined back they give the text exactly."""
    return list(_entries(text))


@lru_cache(maxsize=32)
def _entries(text: str) -> tuple[Entry, ...]:
    root = memory_md.parse(text)
    seen: dict[str, int] = {}
    result = []
    for block in root.children:
        base = f"{block.kind}:{normalize(block.title)}"
        seen[base] = seen.get(base, 0) + 1
        key = base if seen[base] == 1 else f"{base}#{seen[base]}"
        result.append(Entry(key, block.kind, block.title, block.dump()))
    return tuple(result)


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def same_text(a: str, b: str) -> bool:
    return a.rstrip() == b.rstrip()


@dataclass(frozen=True)
class Change:
    key: str
    status: str  # "added", "removed", "changed", "moved", "unchanged"
    kind: str
    title: str
    current: str  # "" when added
    proposed: str  # "" when removed


def compare(current: str, proposed: str) -> list[Change]:
    """Every entry of either document, in the proposed order (removed ones after the
    entry they followed), with what happened to it."""
    return list(_compare(current, proposed))


@lru_cache(maxsize=32)
def _compare(current: str, proposed: str) -> tuple[Change, ...]:
    old = {e.key: e for e in entries(current)}
    new = entries(proposed)
    matched = [e.key for e in new if e.key in old]
    in_place = _in_place([k for k in old if k in set(matched)], matched)
    changes: list[Change] = []
    for entry in new:
        before = old.get(entry.key)
        if before is None:
            status = "added"
        elif not same_text(before.text, entry.text):
            status = "changed"
        elif entry.key not in in_place:
            status = "moved"
        else:
            status = "unchanged"
        changes.append(
            Change(
                entry.key,
                status,
                entry.kind,
                entry.title,
                before.text if before else "",
                entry.text,
            )
        )
    new_keys = {e.key for e in new}
    old_order = list(old)
    for index, key in enumerate(old_order):
        if key in new_keys:
            continue
        removed = Change(key, "removed", old[key].kind, old[key].title, old[key].text, "")
        # After the nearest earlier entry that is still there, else first.
        anchor = next((k for k in reversed(old_order[:index]) if k in new_keys), None)
        position = (
            0 if anchor is None else next(i + 1 for i, c in enumerate(changes) if c.key == anchor)
        )
        while position < len(changes) and changes[position].status == "removed":
            position += 1
        changes.insert(position, removed)
    return tuple(changes)


def _in_place(before: list[str], after: list[str]) -> set[str]:
    """Keys that kept their relative order (the rest moved), in near-linear time for
    documents that mostly keep their order."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return {key for a, _, size in matcher.get_matching_blocks() for key in before[a : a + size]}


ACCEPT, REJECT = "accept", "reject"


def assemble(changes: Iterable[Change], decisions: dict[str, str], edits: dict[str, str]) -> str:
    """The document a review produces. Undecided entries count as accepted: approving a
    proposal takes it as proposed, except for what was rejected or edited."""
    parts = []
    for change in changes:
        decision = decisions.get(change.key, ACCEPT)
        if change.key in edits:
            text = edits[change.key]
        elif decision == ACCEPT:
            text = change.proposed
        else:
            text = change.current  # keep what was there (or nothing, for an addition)
        if text:
            parts.append(text)
    return join(parts)


def join(parts: Iterable[str]) -> str:
    """Concatenate entry texts, each ending in a newline and separated by a blank line."""
    out: list[str] = []
    for part in parts:
        if out:
            previous = out[-1]
            if not previous.endswith("\n"):
                out.append("\n\n")
            elif not previous.endswith("\n\n"):
                out.append("\n")
        out.append(part)
    return "".join(out)


def replace_entry(text: str, key: str, new_text: str) -> str:
    """The document with one entry's text replaced (or removed when ``new_text`` is
    empty); raises KeyError for an unknown entry."""
    parts = entries(text)
    if key not in {e.key for e in parts}:
        raise KeyError(key)
    kept = [new_text if e.key == key else e.text for e in parts]
    return "".join(
        part if part.endswith("\n") or i == len(kept) - 1 else part + "\n"
        for i, part in enumerate(p for p in kept if p)
    )


@dataclass(frozen=True)
class Conflict:
    key: str
    title: str
    base: str
    human: str
    model: str


@dataclass(frozen=True)
class Merge:
    text: str
    conflicts: list[Conflict]


def merge(base: str, human: str, model: str) -> Merge:
    """Three-way merge by entry: a side that left an entry as it was in ``base`` takes
    the other side's version; when both changed it differently it is a conflict (the
    human text is kept in ``text`` until decided)."""
    b = {e.key: e for e in entries(base)}
    h = {e.key: e for e in entries(human)}
    m = {e.key: e for e in entries(model)}
    order = [e.key for e in entries(model)] + [k for k in h if k not in m]
    conflicts = []
    parts = []
    for key in order:
        base_text = b[key].text if key in b else None
        human_text = h[key].text if key in h else None
        model_text = m[key].text if key in m else None
        if _same(human_text, base_text):
            chosen = model_text
        elif _same(model_text, base_text) or _same(model_text, human_text):
            chosen = human_text
        else:
            title = (h.get(key) or m.get(key) or b.get(key)).title  # type: ignore[union-attr]
            conflicts.append(
                Conflict(key, title, base_text or "", human_text or "", model_text or "")
            )
            chosen = human_text
        if chosen:
            parts.append(chosen)
    return Merge(join(parts), conflicts)


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return same_text(a, b)


_WS = re.compile(r"\s+")


def contains_entry(document: str, entry_text: str) -> bool:
    """Whether an entry's text appears in a document, whitespace and case aside."""
    return _WS.sub(" ", entry_text.strip().lower()) in _WS.sub(" ", document.lower())
