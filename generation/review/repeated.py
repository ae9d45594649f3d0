"""Entries one document says twice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from .. import memory_md
from ..memory_md import CITATION_RE
from .assembly import ACCEPT, assemble, result_parts
from .changes import Change
from .comparison import compare
from .document import Entry, add_group, chunk_parts, entries, grouped_entries, join, numbering
from .numbering import ordered
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
    by_unit = _unit_entries(scope, index, decisions, edits)
    if by_unit is not None:
        parts, inside = by_unit
    else:
        result = assemble(scope, decisions, edits)
        found_parts = grouped_entries(result)
        parts = found_parts if found_parts is not None else entries(result)
        inside = {key_base(e.key) for e in parts}
    if inside & index.outside(scope, changes):
        return None
    return duplicates_among(parts)


# --- the scope's result, unit by unit ----------------------------------------------
#
# Within the scope no change moves between task groups or is a pair of pieces, so what
# ties two groups of the result together is only a key they share (numbered "#2" in
# document order). The scope's groups fall into units, the groups linked by shared
# keys; each unit's part of the result depends only on the decisions and edits of its
# own changes. So each unit is assembled and parsed once per set of its own decisions
# and kept: a new decision redoes one unit, not the ~900 groups of a large proposal's
# scope. The units' entries, put in document order, are the entries of the result
# assembled whole (``tests/test_scoped_duplicates.py`` compares them), unless a key
# comes out in two units (an edit's new title, say) or a group loses its heading:
# then the scope is assembled whole.

# Units kept per scope index, across sets of decisions (a unit per new decision after
# the first: 535 units for a 100,000-rollout proposal's scope); cleared when full.
UNITS_KEPT = 4_000


@dataclass(frozen=True)
class _UnitResult:
    blocks: tuple[tuple[float, tuple[Entry, ...]], ...]  # (the group's place, its entries)
    bases: frozenset[str]  # the key bases of its entries


def _unit_entries(
    scope: Sequence[Change], index: _ScopeIndex, decisions: dict[str, str], edits: dict[str, str]
) -> tuple[list[Entry], set[str]] | None:
    """The entries of ``assemble(scope, decisions, edits)`` in document order with
    their key bases, unit by unit (above); ``None`` when the scope is to be assembled
    whole."""
    units, last = index.units_of(scope)
    blocks: list[tuple[float, tuple[Entry, ...]]] = []
    inside: set[str] = set()
    counted = 0
    for unit in units:
        stamp = (
            tuple(c.key for c in unit),
            tuple((decisions.get(c.key, ACCEPT), edits.get(c.key)) for c in unit),
        )
        if stamp in index.assembled:
            found = index.assembled[stamp]
        else:
            if len(index.assembled) >= UNITS_KEPT:
                index.assembled.clear()
            found = index.assembled[stamp] = _assemble_unit(unit, decisions, edits, last)
        if found is None:
            return None
        blocks.extend(found.blocks)
        inside |= found.bases
        counted += len(found.bases)
    if counted != len(inside):
        return None  # a key in two units: numbered across them
    blocks.sort(key=lambda block: block[0])
    if any(a[0] == b[0] for a, b in zip(blocks, blocks[1:], strict=False)):
        return None  # two groups at one place: their order is the changes'
    return [entry for _, block in blocks for entry in block], inside


def _assemble_unit(
    unit: Sequence[Change], decisions: dict[str, str], edits: dict[str, str], last: float
) -> _UnitResult | None:
    """One unit's groups as the whole result holds them: assembled, each group's text
    ended as it is there (by the blank line before the next group, unless it is the
    document's last), parsed and numbered."""
    parts = result_parts(unit, decisions, edits)  # those left out take out references
    heads = sorted((p for p in parts if p.text and not p.group), key=lambda p: p.position)
    members: dict[str, int] = {}
    for part in parts:
        if part.text and part.group:
            members[part.group] = members.get(part.group, 0) + 1
    if set(members) - {head.key for head in heads}:
        return None  # a task whose group has no heading: it follows whatever is before
    texts = ordered(parts)
    unique = numbering()
    blocks = []
    bases: set[str] = set()
    at = 0
    for head in heads:
        size = 1 + members.get(head.key, 0)
        chunk = join(texts[at : at + size])
        at += size
        if head.position != last:  # the separator join puts before the next group
            chunk += "" if chunk.endswith("\n\n") else "\n" if chunk.endswith("\n") else "\n\n"
        group_parts = chunk_parts(chunk)
        if group_parts is None:
            return None
        found: list[Entry] = []
        add_group(found, group_parts, unique)
        bases.update(key_base(e.key) for e in found)
        blocks.append((head.position, tuple(found)))
    return _UnitResult(tuple(blocks), frozenset(bases))


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
    usual_units: tuple[tuple[tuple[Change, ...], ...], float] | None = None
    # A unit's result by its changes' keys and their decisions and edits.
    assembled: dict[tuple[object, ...], _UnitResult | None] = field(default_factory=dict)

    def units_of(self, scope: Sequence[Change]) -> tuple[tuple[tuple[Change, ...], ...], float]:
        """The scope's changes by unit (the groups linked by a key they share), in
        order, and the place of its last group's heading."""
        if scope is self.scope and self.usual_units is not None:
            return self.usual_units
        linked: dict[str, str] = {}  # union-find over groups

        def root(group: str) -> str:
            while linked.get(group, group) != group:
                group = linked[group]
            return group

        first_group: dict[str, str] = {}
        for change in scope:
            group = root(change.group or change.key)
            for key in (change.key, *change.also, *change.previous):
                other = first_group.setdefault(key_base(key), group)
                other = root(other)
                if other != group:
                    linked[group] = other
                    group = other
        units: dict[str, list[Change]] = {}
        for change in scope:
            units.setdefault(root(change.group or change.key), []).append(change)
        last = max((c.slot for c in scope if not c.group), default=0.0)
        found = (tuple(tuple(unit) for unit in units.values()), float(last))
        if scope is self.scope:
            self.usual_units = found
        return found

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
