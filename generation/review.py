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
from dataclasses import dataclass, field, replace
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
    # A pair (see ``pair``): the removed entries it replaces, how ("renamed", "merged",
    # "split", "rewritten"), and every member entry as (slot, side, key, text) so that
    # ``assemble`` puts each one back where it belongs.
    previous: tuple[str, ...] = ()
    pairing: str = ""
    pieces: tuple[tuple[int, str, str, str], ...] = ()
    slot: int = 0
    also: tuple[str, ...] = field(default=())  # further proposed keys of a split

    @property
    def paired(self) -> bool:
        return bool(self.pairing)

    @property
    def previous_titles(self) -> list[str]:
        return [title for _, side, _, title in self._titled() if side == "old"]

    @property
    def proposed_titles(self) -> list[str]:
        return [title for _, side, _, title in self._titled() if side == "new"]

    def _titled(self) -> list[tuple[int, str, str, str]]:
        out = []
        for slot, side, key, text in self.pieces:
            first = entries(text)
            out.append((slot, side, key, first[0].title if first else key))
        return out


def compare(current: str, proposed: str, *, pairing: bool = True) -> list[Change]:
    """Every entry of either document, in the proposed order (removed ones after the
    entry they followed), with what happened to it. With ``pairing``, removed and
    added entries that are the same task group renamed, merged or split (``pair``)
    become one "changed" change keyed by its first proposed entry."""
    return list(_compare(current, proposed, pairing))


@lru_cache(maxsize=32)
def _compare(current: str, proposed: str, pairing: bool = True) -> tuple[Change, ...]:
    old = {e.key: e for e in entries(current)}
    new = entries(proposed)
    matched = [e.key for e in new if e.key in old]
    matched_set = set(matched)
    in_place = _in_place([k for k in old if k in matched_set], matched)
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
    position_of = {c.key: i for i, c in enumerate(changes)}
    removed_after: dict[int, list[Change]] = {}
    for index, key in enumerate(old_order):
        if key in new_keys:
            continue
        removed = Change(key, "removed", old[key].kind, old[key].title, old[key].text, "")
        # After the nearest earlier entry that is still there, else first.
        anchor = next((k for k in reversed(old_order[:index]) if k in new_keys), None)
        removed_after.setdefault(-1 if anchor is None else position_of[anchor], []).append(removed)
    slots = list(removed_after.get(-1, []))
    for i, change in enumerate(changes):
        slots.append(change)
        slots.extend(removed_after.get(i, []))
    slots = [replace(c, slot=i) for i, c in enumerate(slots)]
    if not pairing:
        return tuple(slots)
    return tuple(_paired(slots))


def _paired(slots: list[Change]) -> list[Change]:
    removed = [c for c in slots if c.status == "removed"]
    added = [c for c in slots if c.status == "added"]
    if not removed or not added:
        return slots
    groups = [
        group
        for kind in sorted({c.kind for c in added} & {c.kind for c in removed})
        for group in pair(
            [(c.key, c.current) for c in removed if c.kind == kind],
            [(c.key, c.proposed) for c in added if c.kind == kind],
        )
    ]  # a task group pairs with a task group, a section with a section
    if not groups:
        return slots
    by_key_old = {c.key: c for c in removed}
    by_key_new = {c.key: c for c in added}
    replaced: dict[int, Change] = {}
    dropped: set[int] = set()
    for old_keys, new_keys in groups:
        olds = sorted((by_key_old[k] for k in old_keys), key=lambda c: c.slot)
        news = sorted((by_key_new[k] for k in new_keys), key=lambda c: c.slot)
        first = news[0]
        current = join(c.current for c in olds)
        proposed = join(c.proposed for c in news)
        if len(olds) > 1:
            how = "merged"
        elif len(news) > 1:
            how = "split"
        elif normalize(olds[0].title) != normalize(first.title):
            how = "renamed"
        else:
            how = "rewritten"
        pieces = tuple(
            sorted(
                [(c.slot, "old", c.key, c.current) for c in olds]
                + [(c.slot, "new", c.key, c.proposed) for c in news]
            )
        )
        replaced[first.slot] = Change(
            first.key,
            "moved" if same_text(current, proposed) else "changed",
            first.kind,
            first.title,
            current,
            proposed,
            previous=tuple(c.key for c in olds),
            pairing=how,
            pieces=pieces,
            slot=first.slot,
            also=tuple(c.key for c in news[1:]),
        )
        dropped.update(c.slot for c in olds)
        dropped.update(c.slot for c in news[1:])
    return [replaced.get(c.slot, c) for c in slots if c.slot not in dropped]


# --- pairing ---------------------------------------------------------------------
#
# Thresholds, on word sequences of the lower-cased text (tests/test_pairing.py holds
# the cases they were chosen on):
# - PAIR_RATIO: difflib ratio for one entry standing for another. A renamed entry
#   keeps its body (ratio > 0.9); a moved and edited one stays above 0.7; two
#   unrelated task groups in the same project share boilerplate up to ~0.35.
# - PART_CONTAINED: share of the smaller entry found, in order, in the larger one: an
#   entry merged into another (or split off it) is almost all there.
# - PART_RATIO: and the smaller is no tiny fraction of the larger (a short entry
#   made of common words is "contained" in any long one).
# - CITED_RATIO: when two entries cite mostly the same rollout summaries, a much
#   lower ratio suffices (the model reworded the group around the same sources).
PAIR_RATIO = 0.6
PART_CONTAINED = 0.8
PART_RATIO = 0.25
CITED_RATIO = 0.3
CITED_SHARE = 0.5
MIN_WORDS = 8  # shorter entries pair only through shared citations
CANDIDATES = 3  # per added entry, the removed ones sharing most rare words
# At most this many exact ratios per comparison (each costs ~1 ms for a 400-word task
# group): a rewrite of every entry of a 2,000-entry document stays within ~2 s, and
# what is left unpaired shows as removed and added, as without pairing.
RATIO_BUDGET = 2000

_WORD = re.compile(r"[a-z0-9_./-]+")


def _body(text: str) -> tuple[str, ...]:
    """The words of an entry after its first line (its title)."""
    return _words(text.split("\n", 1)[1] if "\n" in text else "")


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.lower()))


def pair(
    removed: list[tuple[str, str]], added: list[tuple[str, str]]
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Groups of (removed keys, added keys) that are one entry renamed or rewritten
    (1:1), merged (n:1) or split (1:n); every key is in at most one group. Candidates
    come from an index of rare words and citations, then difflib's quick_ratio
    prefilters before the exact ratio: near-linear for documents of thousands of
    entries."""
    old_words = [_words(t) for _, t in removed]
    new_words = [_words(t) for _, t in added]
    old_cites = [set(memory_md.CITATION_RE.findall(t)) for _, t in removed]
    new_cites = [set(memory_md.CITATION_RE.findall(t)) for _, t in added]
    index: dict[str, list[int]] = {}
    for i, words in enumerate(old_words):
        for word in set(words):
            index.setdefault(word, []).append(i)
    common = max(5, len(removed) // 20)
    # A renamed entry keeps its body: those pair by a hash, without difflib.
    bodies: dict[tuple[str, ...], list[int]] = {}
    for i, (_, text) in enumerate(removed):
        bodies.setdefault(_body(text), []).append(i)
    edges: list[tuple[float, int, int, bool, bool]] = []
    budget = RATIO_BUDGET
    for j, words in enumerate(new_words):
        same_body = bodies.get(_body(added[j][1]))
        if same_body and len(words) >= MIN_WORDS:
            edges.append((2.0, same_body.pop(0), j, True, True))
            continue
        shared: dict[int, int] = {}
        for word in set(words):
            hits = index.get(word, ())
            if len(hits) > common and not word.startswith("rollout_summaries/"):
                continue
            for i in hits:
                shared[i] = shared.get(i, 0) + 1
        best = sorted(shared, key=lambda i: (-shared[i], i))[:CANDIDATES]
        for i in best:
            if budget <= 0:
                break
            budget -= 1
            edge = _edge(old_words[i], words, old_cites[i], new_cites[j])
            if edge is not None:
                edges.append((edge[0], i, j, edge[1], edge[2]))
                if edge[0] >= 0.9:
                    break  # nearly the same entry: no other candidate can do better
    edges.sort(key=lambda e: (-e[0], e[1], e[2]))
    group_of_old: dict[int, int] = {}
    group_of_new: dict[int, int] = {}
    groups: list[tuple[list[int], list[int]]] = []
    for _, i, j, _whole, part in edges:
        gi, gj = group_of_old.get(i), group_of_new.get(j)
        if gi is None and gj is None:
            group_of_old[i] = group_of_new[j] = len(groups)
            groups.append(([i], [j]))
        elif gi is not None and gj is None and part:
            olds, news = groups[gi]
            if len(olds) == 1:  # one entry split in several
                news.append(j)
                group_of_new[j] = gi
        elif gj is not None and gi is None and part:
            olds, news = groups[gj]
            if len(news) == 1:  # several entries merged into one
                olds.append(i)
                group_of_old[i] = gj
    return [
        (tuple(removed[i][0] for i in sorted(o)), tuple(added[j][0] for j in sorted(n)))
        for o, n in groups
    ]


def _edge(
    a: tuple[str, ...], b: tuple[str, ...], cites_a: set[str], cites_b: set[str]
) -> tuple[float, bool, bool] | None:
    """(score, whole, part) when ``a`` and ``b`` are the same entry (whole) and/or one
    is (almost all) part of the other, else None."""
    if not a or not b:
        return None
    cited = len(cites_a & cites_b) / min(len(cites_a), len(cites_b)) if cites_a and cites_b else 0.0
    small = min(len(a), len(b))
    if small < MIN_WORDS and cited < CITED_SHARE:
        return None  # a few words are alike by chance
    floor = CITED_RATIO if cited >= CITED_SHARE else min(PAIR_RATIO, PART_RATIO)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.real_quick_ratio() < floor or matcher.quick_ratio() < floor:
        return None
    ratio = matcher.ratio()
    matches = ratio * (len(a) + len(b)) / 2
    contained = matches / small
    score = ratio + 0.1 * cited
    whole = ratio >= PAIR_RATIO or (cited >= CITED_SHARE and ratio >= CITED_RATIO)
    part = ratio >= PART_RATIO and (
        contained >= PART_CONTAINED or (cited >= CITED_SHARE and contained >= 0.5)
    )
    return (score, whole, part) if whole or part else None


def _in_place(before: list[str], after: list[str]) -> set[str]:
    """Keys that kept their relative order (the rest moved), in near-linear time for
    documents that mostly keep their order."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return {key for a, _, size in matcher.get_matching_blocks() for key in before[a : a + size]}


ACCEPT, REJECT = "accept", "reject"


def assemble(changes: Iterable[Change], decisions: dict[str, str], edits: dict[str, str]) -> str:
    """The document a review produces. Undecided entries count as accepted: approving a
    proposal takes it as proposed, except for what was rejected or edited. An accepted
    pair puts its proposed entries where they are proposed and drops the entries they
    replace; a rejected one keeps those where they were and adds nothing."""
    parts: list[tuple[int, str]] = []
    for change in changes:
        decision = decisions.get(change.key, ACCEPT)
        if change.pieces:
            edited = edits.get(change.key)
            first = True
            for slot, side, _, text in change.pieces:
                if side == "old" and decision != ACCEPT and edited is None:
                    parts.append((slot, text))
                elif side == "new" and (decision == ACCEPT or edited is not None):
                    if edited is not None:
                        if first:
                            parts.append((slot, edited))
                        first = False
                    else:
                        parts.append((slot, text))
            continue
        if change.key in edits:
            text = edits[change.key]
        elif decision == ACCEPT:
            text = change.proposed
        else:
            text = change.current  # keep what was there (or nothing, for an addition)
        parts.append((change.slot, text))
    parts.sort(key=lambda p: p[0])
    return join(text for _, text in parts if text)


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
