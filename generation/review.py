"""Entry-level comparison, assembly and three-way merge of MEMORY.md and
memory_summary.md, for reviewing consolidations like pull requests.

An entry is what a reviewer decides on. In a document of the SDK's shape (``# Task
Group:`` blocks) that is the SDK's own unit: a task group's head (its title, ``scope:``
and place) is one entry, and each ``## Task <n>`` and each block-level section inside
it is another. Other documents keep their top-level blocks as entries. Entries are
matched across versions by kind and title (a task also by the first rollout it cites),
never by a task's number: the number is rendered, not reviewed.
"""

from __future__ import annotations

import bisect
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
    group: str = ""  # the key of the task group holding a task or section ("" at the top)


def entries(text: str) -> list[Entry]:
    """The entries of a document; joined back they give the text exactly."""
    return list(_entries(text))


@lru_cache(maxsize=32)
def _entries(text: str) -> tuple[Entry, ...]:
    root = memory_md.parse(text)
    grouped = any(block.kind == "task_group" for block in root.children)
    seen: dict[str, int] = {}

    def unique(base: str) -> str:
        seen[base] = seen.get(base, 0) + 1
        return base if seen[base] == 1 else f"{base}#{seen[base]}"

    result = []
    for block in root.children:
        if not (grouped and block.kind == "task_group"):
            key = unique(f"{block.kind}:{normalize(block.title)}")
            result.append(Entry(key, block.kind, block.title, block.dump()))
            continue
        lead = 0  # bullets and paragraphs under the group's heading belong to its head
        while lead < len(block.children) and block.children[lead].level == 0:
            lead += 1
        head = block.text + "".join(child.dump() for child in block.children[:lead])
        group = unique(f"task_group:{normalize(block.title)}")
        result.append(Entry(group, "task_group", block.title, head))
        for child in block.children[lead:]:
            key = unique(member_key(child.kind, child.title, group, child.citations))
            result.append(Entry(key, child.kind, child.title, child.dump(), group))
    return tuple(result)


def with_members(document: str, entry_key: str, text: str) -> str:
    """A task group's head with the tasks and sections under it in ``document`` (what
    the group as a whole cites); any other entry's ``text`` as it is."""
    return _group_texts(document).get(entry_key, text)


def group_title(documents: tuple[str, ...], group: str) -> str:
    """The title of the task group ``group`` (a key) in the first of ``documents``
    that has it."""
    for document in documents:
        title = _group_titles(document).get(group)
        if title is not None:
            return title
    return group.removeprefix("task_group:")


@lru_cache(maxsize=8)
def _group_titles(document: str) -> dict[str, str]:
    return {e.key: e.title for e in entries(document) if e.kind == "task_group" and not e.group}


@lru_cache(maxsize=8)
def _group_texts(document: str) -> dict[str, str]:
    texts: dict[str, str] = {}
    for entry in entries(document):
        if entry.kind == "task_group" and not entry.group:
            texts[entry.key] = entry.text
        elif entry.group in texts:
            texts[entry.group] += entry.text
    return texts


TASK_NUMBER_RE = re.compile(r"^Task[ \t]+\d+[ \t]*:[ \t]*", re.IGNORECASE)
TASK_HEADING_RE = re.compile(r"^(#{2,6}[ \t]+Task[ \t]+)(\d+)([ \t]*:)", re.IGNORECASE)


def member_key(kind: str, title: str, group: str, citations: list[str]) -> str:
    """The key of a task or section inside a task group. A task's key is its title
    without the number and the first rollout it cites, so it survives renumbering and
    a move to another group; a section's key names its group."""
    if kind == "task":
        cited = citations[0].rsplit("/", 1)[-1] if citations else ""
        return f"task:{normalize(task_title(title))}" + (f" @{cited}" if cited else "")
    return f"{kind}:{normalize(title)} in {group}"


def task_title(title: str) -> str:
    """A task's title without its ``Task <n>:`` number."""
    return TASK_NUMBER_RE.sub("", title)


def unnumbered(text: str) -> str:
    """An entry's text with a task heading's number taken out (for comparing)."""
    return TASK_HEADING_RE.sub(r"\1#\3", text, count=1)


def renumber(text: str) -> str:
    """``text`` with the tasks of each task group numbered 1, 2, ... in order and the
    ``[Task n]`` references inside each group following their tasks (a number two
    tasks share points at the first)."""
    parts = entries(text)
    if not any(e.kind == "task" and e.group for e in parts):
        return text
    return "".join(
        _ordered(
            [
                _Part(i, e.text, e.group, e.key, "new", (("new", e.group, _task_number(e.text)),))
                for i, e in enumerate(parts)
            ]
        )
    )


def numbered_like(text: str, like: str) -> str:
    """``text`` with its first task heading numbered as ``like``'s (to compare the two
    without the number)."""
    number = _task_number(like)
    if number is None or _task_number(text) in (None, number):
        return text
    return TASK_HEADING_RE.sub(rf"\g<1>{number}\g<3>", text, count=1)


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def same_text(a: str, b: str) -> bool:
    """Whether two entry texts say the same (trailing blank lines and a task's number
    aside)."""
    return unnumbered(a).rstrip() == unnumbered(b).rstrip()


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
    group: str = ""  # the task group it is in (proposed, else current)
    # Where a rejected move puts a task or section back (a slot between two others);
    # None: it stays where it is proposed.
    home: float | None = None
    home_group: str = ""  # and the group it goes back to
    piece_groups: tuple[str, ...] = ()  # the group of each of ``pieces``

    @property
    def paired(self) -> bool:
        return bool(self.pairing)

    @property
    def previous_titles(self) -> list[str]:
        if not self.pieces and self.previous:  # renamed in place: its own old text
            first = entries(self.current)
            return [first[0].title if first else self.previous[0]]
        old = [(key, title) for _, side, key, title in self._titled() if side == "old"]
        old.sort(key=lambda kt: kt[0] != self.key)  # the entry that kept its key first
        return [title for _, title in old]

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
    new = entries(proposed)
    renames = _group_renames(entries(current), new) if pairing else {}
    olds = [_renamed(e, renames) for e in entries(current)]
    old = {e.key: e for e, _ in olds}
    was = {e.key: before for e, before in olds if before != e.key}
    new_keys = {e.key for e in new}
    in_place = _in_place_by_level([e for e, _ in olds if e.key in new_keys], new, old)
    numbers = _numbers_now([e for e, _ in olds], new)
    changes: list[Change] = []
    for entry in new:
        before = old.get(entry.key)
        if before is None:
            status = "added"
        elif not same_text(following(before.text, before.group, numbers), entry.text):
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
                previous=(was[entry.key],) if entry.key in was else (),
                pairing="renamed" if entry.kind == "task_group" and entry.key in was else "",
                group=entry.group,
            )
        )
    old_order = list(old)
    position_of = {c.key: i for i, c in enumerate(changes)}
    removed_after: dict[int, list[Change]] = {}
    for index, key in enumerate(old_order):
        if key in new_keys:
            continue
        e = old[key]
        removed = Change(key, "removed", e.kind, e.title, e.text, "", group=e.group)
        # After the nearest earlier entry that is still there, else first.
        anchor = next((k for k in reversed(old_order[:index]) if k in new_keys), None)
        removed_after.setdefault(-1 if anchor is None else position_of[anchor], []).append(removed)
    slots = list(removed_after.get(-1, []))
    for i, change in enumerate(changes):
        slots.append(change)
        slots.extend(removed_after.get(i, []))
    slots = [replace(c, slot=i) for i, c in enumerate(slots)]
    slots = _homes(slots, [e for e, _ in olds], in_place, new_keys)
    if not pairing:
        return tuple(slots)
    # Citations and containment first: a merge or split that kept one entry's key
    # must not leave its other part to be paired with an unrelated entry.
    return tuple(_paired(_paired_in_place(slots)))


def _numbers_now(old: list[Entry], new: list[Entry]) -> dict[tuple[str, int], int]:
    """(group, number in ``old``) -> number in ``new`` of each task that stayed in its
    group (by key): what a reference to it becomes when the tasks are renumbered."""
    where: dict[str, tuple[str, int]] = {}
    for entry in new:
        if entry.kind == "task" and entry.group and (n := _task_number(entry.text)) is not None:
            where.setdefault(entry.key, (entry.group, n))
    numbers: dict[tuple[str, int], int] = {}
    for entry in old:
        if entry.kind == "task" and entry.group and (n := _task_number(entry.text)) is not None:
            now = where.get(entry.key)
            if now is not None and now[0] == entry.group:
                numbers.setdefault((entry.group, n), now[1])
    return numbers


def following(text: str, group: str, numbers: dict[tuple[str, int], int]) -> str:
    """``text`` (of an entry of ``group``) with its ``[Task n]`` references numbered
    as ``numbers`` (``_numbers_now``) says: renumbering alone is no change."""
    if "[Task " not in text or not numbers:
        return text
    return TASK_REF_RE.sub(
        lambda m: f"[Task {numbers.get((group, int(m.group(1))), int(m.group(1)))}]", text
    )


TASK_REF_RE = memory_md.TASK_REF_RE


def _renamed(entry: Entry, renames: dict[str, str]) -> tuple[Entry, str]:
    """An entry of the current document as the proposal names it when its task group
    was renamed (the head and the sections of the group take the new group's key),
    with its own key."""
    group = renames.get(entry.group, entry.group)
    if entry.kind == "task_group" and entry.key in renames:
        return replace(entry, key=renames[entry.key]), entry.key
    if entry.group in renames:
        key = entry.key
        if entry.kind != "task":
            key = member_key(entry.kind, entry.title, group, [])
        return replace(entry, key=key, group=group), entry.key
    return entry, entry.key


def _group_renames(old: list[Entry], new: list[Entry]) -> dict[str, str]:
    """Task groups the proposal renamed: old head key -> new, for a removed and an
    added group that hold mostly the same tasks (or, without tasks, the same text under
    the title). Indexed by task and by text, so thousands of groups stay fast."""
    old_heads = {e.key: e for e in old if e.kind == "task_group"}
    new_heads = {e.key: e for e in new if e.kind == "task_group"}
    gone = [k for k in old_heads if k not in new_heads]
    came = [k for k in new_heads if k not in old_heads]
    if not gone or not came:
        return {}
    tasks_of: dict[str, set[str]] = {}
    for e in (*old, *new):
        if e.kind == "task" and e.group:
            tasks_of.setdefault(e.group, set()).add(e.key)
    gone_set = set(gone)
    group_of_task = {
        task: group for group in gone for task in tasks_of.get(group, ())
    }  # a task key is in one old group
    by_body: dict[str, list[str]] = {}
    for key in gone:
        if not tasks_of.get(key):
            by_body.setdefault(_under_title(old_heads[key].text), []).append(key)
    renames: dict[str, str] = {}
    taken: set[str] = set()
    for after in came:
        mine = tasks_of.get(after, set())
        if not mine:
            under = _under_title(new_heads[after].text)
            candidates = [k for k in by_body.get(under, []) if k not in taken]
            if candidates:
                renames[candidates[0]] = after
                taken.add(candidates[0])
            continue
        shared: dict[str, int] = {}
        for task in mine:
            group = group_of_task.get(task)
            if group is not None and group in gone_set and group not in taken:
                shared[group] = shared.get(group, 0) + 1
        best = max(shared, key=lambda g: (shared[g], g), default=None)
        if best is None:
            continue
        union = len(mine | tasks_of.get(best, set()))
        if shared[best] / union >= 0.5:
            renames[best] = after
            taken.add(best)
    return renames


def _under_title(text: str) -> str:
    return normalize(text.split("\n", 1)[1]) if "\n" in text else ""


def _in_place_by_level(old: list[Entry], new: list[Entry], by_key: dict[str, Entry]) -> set[str]:
    """Keys that kept their place: top-level entries (task groups among them) by their
    order among themselves, a task or section by its order inside its group; one in
    another group than before has moved."""
    present = {e.key for e in old}
    in_place = _in_place(
        [e.key for e in old if not e.group],
        [e.key for e in new if not e.group and e.key in present],
    )
    members_old: dict[str, list[str]] = {}
    members_new: dict[str, list[str]] = {}
    for e in new:
        if e.group and e.key in present and by_key[e.key].group == e.group:
            members_new.setdefault(e.group, []).append(e.key)
    kept = {k for ks in members_new.values() for k in ks}
    for e in old:
        if e.group and e.key in kept:
            members_old.setdefault(e.group, []).append(e.key)
    for group, keys in members_new.items():
        in_place |= _in_place(members_old.get(group, []), keys)
    return in_place


def _homes(
    slots: list[Change], old: list[Entry], in_place: set[str], present: set[str]
) -> list[Change]:
    """Give each entry that moved the place a rejection puts it back to: after the
    nearest entry before it in the current document that stayed in place (a task
    group among the top-level entries, a task or section in its old group)."""
    slot_of = {c.key: c.slot for c in slots}
    homes: dict[str, tuple[float, str]] = {}
    last_top: str | None = None  # the last top-level entry in place so far
    last_any: str | None = None
    for index, entry in enumerate(old):
        if entry.key in in_place:
            last_any = entry.key
            if not entry.group:
                last_top = entry.key
            continue
        if entry.key not in present:
            continue
        anchor = last_any if entry.group else last_top
        position = (slot_of[anchor] if anchor is not None else -1) + 0.5 + index * 1e-6
        homes[entry.key] = (position, entry.group)
    return [
        replace(c, home=homes[c.key][0], home_group=homes[c.key][1])
        if c.key in homes and c.status in ("moved", "changed")
        else c
        for c in slots
    ]


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


def _paired_in_place(slots: list[Change]) -> list[Change]:
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


def _in_place(before: list[str], after: list[str]) -> set[str]:
    """Keys that kept their relative order (the rest moved), in near-linear time for
    documents that mostly keep their order."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return {key for a, _, size in matcher.get_matching_blocks() for key in before[a : a + size]}


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
    cited: list[tuple[Entry, set[str]]] = []
    by_cite: dict[str, list[int]] = {}
    for entry in entries(text):
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


ACCEPT, REJECT = "accept", "reject"


def assemble(changes: Iterable[Change], decisions: dict[str, str], edits: dict[str, str]) -> str:
    """The document a review produces. Undecided entries count as accepted: approving a
    proposal takes it as proposed, except for what was rejected or edited. An accepted
    pair puts its proposed entries where they are proposed and drops the entries they
    replace; a rejected one keeps those where they were and adds nothing. A rejected
    move puts the entry back where it was (a task group with its tasks). The tasks of
    each group are then numbered 1, 2, ... in document order, whatever was decided, and
    each ``[Task n]`` reference inside the group follows the task it pointed at in the
    document its text comes from (one to a task no longer there is taken out)."""
    parts: list[_Part] = []
    for change in changes:
        decision = decisions.get(change.key, ACCEPT)
        edited = edits.get(change.key)
        if change.pieces:
            kept: list[_Part] = []
            left: list[tuple[str, str, int | None]] = []
            first = True
            for index, (slot, side, _, text) in enumerate(change.pieces):
                group = change.piece_groups[index] if change.piece_groups else change.group
                mine = (side, group, _task_number(text))
                if side == "old" and decision != ACCEPT and edited is None:
                    kept.append(_Part(slot, text, group, change.key, side, (mine,)))
                elif side == "new" and (decision == ACCEPT or edited is not None) and first:
                    kept.append(_Part(slot, edited or text, group, change.key, side, (mine,)))
                    first = edited is None
                else:
                    left.append(mine)
            if kept:  # what the dropped pieces were, the first kept one is now
                kept[0] = replace(kept[0], stands_for=kept[0].stands_for + tuple(left))
            else:
                parts.append(_Part(0, "", change.group, change.key, stands_for=tuple(left)))
            parts.extend(kept)
            continue
        old_group = change.home_group if change.home is not None else change.group
        both = (
            ("old", old_group, _task_number(change.current)),
            ("new", change.group, _task_number(change.proposed)),
        )
        if edited is not None:
            parts.append(_Part(change.slot, edited, change.group, change.key, "new", both))
        elif decision == ACCEPT:
            parts.append(_Part(change.slot, change.proposed, change.group, change.key, "new", both))
        elif change.home is not None:  # keep what was there, where it was
            parts.append(_Part(change.home, change.current, old_group, change.key, "old", both))
        else:  # keep what was there (or nothing, for an addition)
            parts.append(_Part(change.slot, change.current, change.group, change.key, "old", both))
    return join(_ordered(parts))


def _task_number(text: str) -> int | None:
    match = TASK_HEADING_RE.match(text)
    return int(match.group(2)) if match else None


@dataclass(frozen=True)
class _Part:
    position: float
    text: str  # "" for what a decision leaves out
    group: str  # the task group it goes into ("" for a group's head or a top-level entry)
    key: str
    side: str = "new"  # the document its text (and its task references) comes from
    # The (side, group, number) of each task this part is in the result (its own, and
    # those of the pieces of a pair it replaces), or stood for when left out.
    stands_for: tuple[tuple[str, str, int | None], ...] = ()


def _ordered(parts: list[_Part]) -> list[str]:
    """Top-level entries in order, each task group's tasks and sections under it in
    order, its tasks numbered 1, 2, ... and the ``[Task n]`` references in it following
    them; a task whose group is gone stays after the entry it followed."""
    # (side, group, number) of a task -> (the group it is in now, its number there)
    final: dict[tuple[str, str, int], tuple[str, int] | None] = {}
    for part in parts:
        if not part.text:
            for side, group, number in part.stands_for:
                if number is not None:
                    final.setdefault((side, group, number), None)
    parts = [p for p in parts if p.text]
    tops = sorted((p for p in parts if not p.group), key=lambda p: p.position)
    blocks: list[tuple[_Part | None, list[_Part]]] = [(None, [])]
    blocks += [(top, []) for top in tops]
    index_of = {top.key: i for i, (top, _) in enumerate(blocks) if top is not None}
    positions = [top.position for top in tops]
    for part in sorted((p for p in parts if p.group), key=lambda p: p.position):
        i = index_of.get(part.group)
        if i is None:
            i = bisect.bisect_right(positions, part.position)  # the block before it
        blocks[i][1].append(part)
    texts: dict[int, str] = {}
    for top, members in blocks:
        here = top.key if top is not None else ""
        n = 0
        for member in members:
            match = TASK_HEADING_RE.match(member.text)
            if match is None:
                continue
            n += 1
            if int(match.group(2)) != n:
                texts[id(member)] = TASK_HEADING_RE.sub(rf"\g<1>{n}\g<3>", member.text, 1)
            for side, group, number in member.stands_for:
                if number is not None and final.get((side, group, number)) is None:
                    final[(side, group, number)] = (here, n)
    out = []
    for top, members in blocks:
        here = top.key if top is not None else ""
        if top is not None:
            out.append(top.text)
        for member in members:
            text = texts.get(id(member), member.text)
            out.append(_references(text, member.side, member.group, here, final))
    return out


def _references(
    text: str,
    side: str,
    group: str,
    here: str,
    final: dict[tuple[str, str, int], tuple[str, int] | None],
) -> str:
    """``text`` (from ``group`` of ``side``, now in ``here``) with each ``[Task n]``
    numbered as its task is now; one whose task was left out or is in another group
    now is taken out (with the space before it); one to no known task stays as it
    is."""
    if "[Task " not in text:
        return text

    def number(match: re.Match[str]) -> str:
        key = (side, group, int(match.group(2)))
        if key not in final:
            return match.group(0)
        now = final[key]
        if now is not None and now[0] == here:
            return f"{match.group(1)}[Task {now[1]}]"
        # Taken out; the space before it stays when another reference follows.
        return match.group(1) if match.string.startswith("[Task ", match.end()) else ""

    return _REFERENCE_RE.sub(number, text)


_REFERENCE_RE = re.compile(r"([ \t]?)\[Task (\d+)\]")


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
    order = _with_human_additions([e.key for e in entries(model)], list(h))
    conflicts = []
    parts = []
    for position, key in enumerate(order):
        base_text = b[key].text if key in b else None
        human_text = h[key].text if key in h else None
        model_text = m[key].text if key in m else None
        if _same(human_text, base_text):
            chosen, side = model_text, "model"
        elif _same(model_text, base_text) or _same(model_text, human_text):
            chosen, side = human_text, "human"
        else:
            title = (h.get(key) or m.get(key) or b.get(key)).title  # type: ignore[union-attr]
            conflicts.append(
                Conflict(key, title, base_text or "", human_text or "", model_text or "")
            )
            chosen, side = human_text, "human"
        # Each side's references are to its own numbers of the task.
        stands_for = tuple(
            (name, doc[key].group, _task_number(doc[key].text))
            for name, doc in (("human", h), ("model", m))
            if key in doc and doc[key].kind == "task"
        )
        entry = (h if side == "human" else m).get(key)
        group = entry.group if entry else ""
        parts.append(_Part(position, chosen or "", group, key, side, stands_for))
    return Merge(join(_ordered(parts)), conflicts)


def _with_human_additions(order: list[str], human: list[str]) -> list[str]:
    """The model's entry order with the entries only people have put after the entry
    they follow in the people's version (a task added by hand stays in its group)."""
    out = list(order)
    present = set(out)
    for index, key in enumerate(human):
        if key in present:
            continue
        before = next((k for k in reversed(human[:index]) if k in present), None)
        out.insert(out.index(before) + 1 if before is not None else 0, key)
        present.add(key)
    return out


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return same_text(a, b)


_WS = re.compile(r"\s+")


def contains_entry(document: str, entry_text: str) -> bool:
    """Whether an entry's text appears in a document, whitespace and case aside."""
    return _WS.sub(" ", entry_text.strip().lower()) in _WS.sub(" ", document.lower())
