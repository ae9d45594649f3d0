"""Comparing two versions of a document entry by entry: added, removed, changed, moved
or unchanged, task groups renamed, and where a rejected move goes back to."""

from __future__ import annotations

import difflib
from dataclasses import replace
from functools import lru_cache

from .. import memory_md, shared_results
from .changes import Change
from .document import Entry, entries, member_key, normalize, same_text, task_number
from .pairing import paired, paired_in_place


def compare(current: str, proposed: str, *, pairing: bool = True) -> list[Change]:
    """Every entry of either document, in the proposed order (removed ones after the
    entry they followed), with what happened to it. With ``pairing``, removed and
    added entries that are the same task group renamed, merged or split (``pair``)
    become one "changed" change keyed by its first proposed entry."""
    return list(_compare(current, proposed, pairing))


def changed(current: str, proposed: str) -> tuple[Change, ...]:
    """The changes of ``compare`` that are not "unchanged": what a reviewer decides on,
    in order. Kept per pair of texts: a large document has ~100,000 entries and a
    page asks for these several times."""
    return _changed(current, proposed)


@lru_cache(maxsize=32)
def _changed(current: str, proposed: str) -> tuple[Change, ...]:
    return tuple(c for c in _compare(current, proposed, True) if c.status != "unchanged")


@lru_cache(maxsize=32)
def _compare(current: str, proposed: str, pairing: bool = True) -> tuple[Change, ...]:
    # Two large documents' comparison is shared by the deployment's processes.
    return shared_results.through(
        "compare" if pairing else "compare-unpaired",
        (current, proposed),
        lambda: _compared(current, proposed, pairing),
    )


def _compared(current: str, proposed: str, pairing: bool) -> tuple[Change, ...]:
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
    return tuple(paired(paired_in_place(slots)))


def _numbers_now(old: list[Entry], new: list[Entry]) -> dict[tuple[str, int], int]:
    """(group, number in ``old``) -> number in ``new`` of each task that stayed in its
    group (by key): what a reference to it becomes when the tasks are renumbered."""
    where: dict[str, tuple[str, int]] = {}
    for entry in new:
        if entry.kind == "task" and entry.group and (n := task_number(entry.text)) is not None:
            where.setdefault(entry.key, (entry.group, n))
    numbers: dict[tuple[str, int], int] = {}
    for entry in old:
        if entry.kind == "task" and entry.group and (n := task_number(entry.text)) is not None:
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


def _in_place(before: list[str], after: list[str]) -> set[str]:
    """Keys that kept their relative order (the rest moved), in near-linear time for
    documents that mostly keep their order."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return {key for a, _, size in matcher.get_matching_blocks() for key in before[a : a + size]}
