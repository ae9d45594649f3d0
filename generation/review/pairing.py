"""Pairing removed and added entries that are one entry renamed, rewritten, merged or
split, by the words they share and the rollouts they cite."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace

from .. import memory_md
from .changes import Change
from .document import join, normalize, same_text, task_title


def paired(slots: list[Change]) -> list[Change]:
    """``slots`` with removed and added entries that are one entry renamed, rewritten,
    merged or split (``pair``) made one change, keyed by its first proposed entry."""
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
            by_citations=kind == "task",
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
        elif normalize(task_title(olds[0].title)) != normalize(task_title(first.title)):
            how = "renamed"
        else:
            how = "rewritten"
        pieces, piece_groups = _pieces(
            [(c.slot, "old", c.key, c.current, c.group) for c in olds]
            + [(c.slot, "new", c.key, c.proposed, c.group) for c in news]
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
            group=first.group,
            piece_groups=piece_groups,
        )
        dropped.update(c.slot for c in olds)
        dropped.update(c.slot for c in news[1:])
    return [replaced.get(c.slot, c) for c in slots if c.slot not in dropped]


def _pieces(
    members: list[tuple[int, str, str, str, str]],
) -> tuple[tuple[tuple[int, str, str, str], ...], tuple[str, ...]]:
    """A pair's (slot, side, key, text) pieces in slot order, and the group of each."""
    ordered = sorted(members, key=lambda m: (m[0], m[1] == "new", m[2]))
    return tuple(m[:4] for m in ordered), tuple(m[4] for m in ordered)


def paired_in_place(slots: list[Change]) -> list[Change]:
    """Merges and splits that keep one entry's key: a changed entry that took in a
    removed one (merged with it) or gave part of itself to an added one (split into
    it), found by the rollouts they cite and by their words. Each becomes one change,
    decided as one."""
    changed = [
        c for c in slots if c.status == "changed" and not c.pieces and c.kind != "task_group"
    ]
    removed = [c for c in slots if c.status == "removed"]
    added = [c for c in slots if c.status == "added"]
    if not changed or not (removed or added):
        return slots
    taken: set[int] = set()
    replaced: dict[int, Change] = {}
    for change in changed:
        before, after = _words(change.current), _words(change.proposed)
        cites_before = set(memory_md.CITATION_RE.findall(change.current))
        cites_after = set(memory_md.CITATION_RE.findall(change.proposed))
        merged = [
            c
            for c in removed
            if c.slot not in taken
            and c.kind == change.kind
            and _went_into(c.current, after, before, cites_after - cites_before)
        ]
        split = [
            c
            for c in added
            if c.slot not in taken
            and c.kind == change.kind
            and (
                _went_into(c.proposed, before, after, cites_before - cites_after)
                or _split_off(c.proposed, change.current, cites_before)
            )
        ]
        if not merged and not split:
            continue
        taken.update(c.slot for c in (*merged, *split))
        pieces, piece_groups = _pieces(
            [(change.slot, "old", change.key, change.current, change.home_group or change.group)]
            + [(c.slot, "old", c.key, c.current, c.group) for c in merged]
            + [(change.slot, "new", change.key, change.proposed, change.group)]
            + [(c.slot, "new", c.key, c.proposed, c.group) for c in split]
        )
        replaced[change.slot] = replace(
            change,
            current=join(c.current for c in sorted((change, *merged), key=lambda c: c.slot)),
            proposed=join(c.proposed for c in sorted((change, *split), key=lambda c: c.slot)),
            previous=tuple(c.key for c in merged),
            pairing="merged" if merged else "split",
            pieces=pieces,
            piece_groups=piece_groups,
            also=tuple(c.key for c in split),
        )
    return [replaced.get(c.slot, c) for c in slots if c.slot not in taken]


def _went_into(
    part: str, whole: tuple[str, ...], other: tuple[str, ...], cites_gained: set[str]
) -> bool:
    """Whether the entry ``part`` is now (almost all) inside ``whole`` and was not
    inside ``other`` (the same entry on the other side): it cites rollouts ``whole``
    gained, or its words are found there, in order."""
    cites = set(memory_md.CITATION_RE.findall(part))
    if cites and len(cites & cites_gained) / len(cites) >= CITED_SHARE:
        return True
    words = _body(part)
    if len(words) < MIN_WORDS:
        return False
    vocabulary = set(words)
    if len(vocabulary & set(whole)) < PART_CONTAINED * len(vocabulary):
        return False  # most of its words are not even there
    return _contained(words, whole) >= PART_CONTAINED and _contained(words, other) < CITED_SHARE


def _split_off(part: str, whole: str, cites_whole: set[str]) -> bool:
    """Whether the added entry ``part`` is a piece split off ``whole`` that still cites
    the same rollouts (the model made two tasks of one): it cites only rollouts
    ``whole`` cited, and at least half of its own words (its title's included; not its
    citations or the SDK's headings) are ``whole``'s. Text decides; citations only
    narrow the candidates."""
    cites = set(memory_md.CITATION_RE.findall(part))
    if not cites or not cites <= cites_whole:
        return False
    mine, theirs = set(content_words(part)), set(content_words(whole))
    return len(mine) >= 2 and len(mine & theirs) >= SPLIT_SHARE * len(mine)


SPLIT_SHARE = 0.5
_STRUCTURE = re.compile(
    r"^#{1,6}[ \t]+(?:rollout_summary_files|keywords)[ \t]*$|^.*rollout_summaries/.*$"
    r"|^#{1,6}[ \t]+Task[ \t]+\d+[ \t]*:|,[ \t]*outcome[ \t]+\S+[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)


def content_words(text: str) -> tuple[str, ...]:
    """The words an entry says, its title included: without its citation lines, the
    SDK's ``rollout_summary_files``/``keywords`` headings, a task's number and outcome
    (what any two tasks of one rollout share)."""
    return _words(_STRUCTURE.sub("", text))


def _contained(part: tuple[str, ...], whole: tuple[str, ...]) -> float:
    """The share of ``part``'s words found, in order, in ``whole``."""
    matcher = difflib.SequenceMatcher(None, part, whole, autojunk=False)
    return sum(size for _, _, size in matcher.get_matching_blocks()) / max(len(part), 1)


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
    removed: list[tuple[str, str]], added: list[tuple[str, str]], *, by_citations: bool = False
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Groups of (removed keys, added keys) that are one entry renamed or rewritten
    (1:1), merged (n:1) or split (1:n); every key is in at most one group. Candidates
    come from an index of rare words and citations, then difflib's quick_ratio
    prefilters before the exact ratio: near-linear for documents of thousands of
    entries. ``by_citations`` (tasks): two entries that both cite rollouts but none in
    common are never the same."""
    old_words = [_words(t) for _, t in removed]
    new_words = [_words(t) for _, t in added]
    old_cites = [_cited(t) for _, t in removed]
    new_cites = [_cited(t) for _, t in added]
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
            if by_citations and old_cites[i] and new_cites[j] and not old_cites[i] & new_cites[j]:
                continue  # tasks citing different rollouts are different tasks
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


ROLLOUT_CITED_RE = re.compile(r"rollout_id=([A-Za-z0-9][A-Za-z0-9._-]*)")


def _cited(text: str) -> set[str]:
    """What an entry cites: its rollout summary files and the rollouts they are of. A
    rollout extracted again gets a summary file of another name; its task still cites the
    same ``rollout_id``, so the old task and the new one are recognised as one."""
    return set(memory_md.CITATION_RE.findall(text)) | {
        f"rollout_id={rid}" for rid in ROLLOUT_CITED_RE.findall(text)
    }


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
