"""Entries one document says twice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .. import memory_md
from ..memory_md import CITATION_RE
from .assembly import assemble
from .changes import Change
from .comparison import compare
from .document import Entry, entries, grouped_entries
from .pairing import content_words

# --- duplicates --------------------------------------------------------------------
#
# Two entries of one document say the same thing twice when they share most of their
# cited rollouts (at least half of the fewer's) and most of their own words: at least
# three quarters of the distinct words of the shorter one (``content_words``: not the
# citation lines, which two different tasks of one rollout share) are in the other's.
DUPLICATE_CITED = 0.5
DUPLICATE_WORDS = 0.75


def duplicates(text: str) -> list[tuple[Entry, Entry]]:
    """Pairs of entries of ``text`` that are likely one entry twice, in document order.
    Only entries that cite a rollout take part, found through the rollouts they cite
    (near-linear)."""
    return duplicates_among(entries(text))


def duplicates_among(document: Sequence[Entry]) -> list[tuple[Entry, Entry]]:
    """``duplicates`` of a document's entries."""
    cited: list[tuple[Entry, set[str]]] = []
    by_cite: dict[str, list[int]] = {}
    for entry in document:
        cites = set(memory_md.CITATION_RE.findall(entry.text))
        if not cites:
            continue
        for cite in cites:
            by_cite.setdefault(cite, []).append(len(cited))
        cited.append((entry, cites))
    found: set[tuple[int, int]] = set()
    for holders in by_cite.values():
        for n, i in enumerate(holders):
            for j in holders[n + 1 :]:
                if (i, j) not in found and _duplicate(cited[i], cited[j]):
                    found.add((i, j))
    return [(cited[i][0], cited[j][0]) for i, j in sorted(found)]


def _duplicate(a: tuple[Entry, set[str]], b: tuple[Entry, set[str]]) -> bool:
    (first, cites_a), (second, cites_b) = a, b
    if len(cites_a & cites_b) < DUPLICATE_CITED * min(len(cites_a), len(cites_b)):
        return False
    words_a, words_b = set(content_words(first.text)), set(content_words(second.text))
    small, large = sorted((words_a, words_b), key=len)
    return bool(small) and len(small & large) >= DUPLICATE_WORDS * len(small)


def duplicate_scope(current: str, proposed: str, edits: dict[str, str]) -> Sequence[Change] | None:
    """The changes from ``current`` to ``proposed`` (``compare``) a search for the
    duplicates of the entries they touch needs, in order: the whole task groups holding
    those entries and the entries citing a rollout one of them cites (in any of their
    versions, or as edited in ``edits``), with every group holding an entry of the same
    key (a key a document takes twice is numbered, "#2", in document order). A pair
    with a touched entry lies within them, and the result assembled from them alone
    holds those groups as the whole result does: the same texts, titles, numbers and
    keys. ``None`` when that cannot be told so cheaply (no task groups; a needed entry
    outside them, moving between them, merged or split, or a needed group that may
    go): then the whole document is needed."""
    found = _scope(current, proposed)
    return None if found is None else _scope_with(found[0], found[1], edits)


def scoped_duplicates(
    current: str, proposed: str, decisions: dict[str, str], edits: dict[str, str]
) -> list[tuple[Entry, Entry]] | None:
    """``duplicates`` of the result ``assemble`` makes of the changes from ``current``
    to ``proposed`` with ``decisions`` and ``edits``, as far as the entries the changes
    touch are concerned, from the task groups that needs (``duplicate_scope``): a
    large document's result is not assembled and parsed whole for each new decision.
    ``None`` when the whole result is needed, also when a key in it might come out
    differently (a safety net: the scope holds every group of a key it holds)."""
    found = _scope(current, proposed)
    if found is None:
        return None
    changes, index = found
    scope = _scope_with(changes, index, edits)
    if scope is None or len(scope) == len(changes):
        return None
    result = assemble(scope, decisions, edits)
    parts = grouped_entries(result)
    if parts is None:
        parts = entries(result)
    inside = {key_base(e.key) for e in parts}
    if inside & index.outside(scope, changes):
        return None
    return duplicates_among(parts)


def _scope_with(
    changes: Sequence[Change], index: _ScopeIndex, edits: dict[str, str]
) -> Sequence[Change] | None:
    """``duplicate_scope`` from the document's index, with the groups ``edits`` cite."""
    more = {
        group
        for text in edits.values()
        for cite in CITATION_RE.findall(text)
        for group in index.cited.get(cite, ())
    }
    if not more - index.wanted:
        return index.scope  # the usual scope, kept
    wanted = index.closed(set(index.wanted) | more)
    if not wanted <= index.heads:
        return None  # an entry outside every task group
    return _changes_in(changes, wanted, index.heads)


@dataclass
class _ScopeIndex:
    heads: set[str]  # the keys of the task groups
    cited: dict[str, set[str]]  # rollout summary -> the groups of the entries citing it
    same_key: dict[str, set[str]]  # key base -> the groups holding an entry of that key
    keys_of: dict[str, set[str]]  # group -> the key bases of its entries
    wanted: frozenset[str] = frozenset()  # the groups needed without edits
    scope: tuple[Change, ...] | None = None  # their changes (None: not to be scoped)

    usual_outside: frozenset[str] | None = None  # ``outside`` the kept scope, once read

    def outside(self, scope: Sequence[Change], changes: Sequence[Change]) -> frozenset[str]:
        """The key bases of the changes not in ``scope``."""
        if scope is self.scope and self.usual_outside is not None:
            return self.usual_outside
        kept = {id(c) for c in scope}
        found = frozenset(
            key_base(key)
            for c in changes
            if id(c) not in kept
            for key in (c.key, *c.also, *c.previous, *(piece[2] for piece in c.pieces))
        )
        if scope is self.scope:
            self.usual_outside = found
        return found

    def closed(self, groups: set[str]) -> frozenset[str]:
        wanted, frontier = set(groups), set(groups)
        while frontier:
            more = {
                g
                for group in frontier
                for k in self.keys_of.get(group, ())
                for g in self.same_key[k]
            }
            frontier = more - wanted
            wanted |= frontier
        return frozenset(wanted)


@lru_cache(maxsize=16)
def _scope(current: str, proposed: str) -> tuple[tuple[Change, ...], _ScopeIndex] | None:
    changes = tuple(compare(current, proposed))
    heads = {c.key for c in changes if c.kind == "task_group" and not c.group}
    if not heads:
        return None
    index = _ScopeIndex(heads, {}, {}, {})
    touched: set[str] = set()
    touched_cites: set[str] = set()
    for change in changes:
        group = change.group or change.key
        cites = {
            cite
            for text in (change.current, change.proposed)
            if text
            for cite in CITATION_RE.findall(text)
        }
        for cite in cites:
            index.cited.setdefault(cite, set()).add(group)
        if change.status != "unchanged" and change.proposed:
            touched.add(group)
            touched_cites |= cites
        for key in (change.key, *change.also, *change.previous):
            index.same_key.setdefault(key_base(key), set()).add(group)
            index.keys_of.setdefault(group, set()).add(key_base(key))
    index.wanted = index.closed(touched | {g for c in touched_cites for g in index.cited[c]})
    if index.wanted <= heads:  # else: an entry outside every task group, not to be scoped
        scope = _changes_in(changes, index.wanted, heads)
        index.scope = tuple(scope) if scope is not None else None
    return changes, index


def _changes_in(
    changes: Sequence[Change], wanted: frozenset[str] | set[str], heads: set[str]
) -> list[Change] | None:
    scope = []
    for change in changes:
        groups = {change.group or change.key, change.home_group, *change.piece_groups}
        if not groups & wanted:
            continue
        if change.pieces or change.home is not None or not groups - {""} <= wanted:
            return None
        if change.key in heads and change.status in ("added", "removed"):
            return None  # its tasks would follow whatever comes before it
        scope.append(change)
    return scope


def key_base(key: str) -> str:
    """A review key without the "#n" that tells apart the keys a document takes twice."""
    base, sep, number = key.rpartition("#")
    return base if sep and number.isdigit() else key
