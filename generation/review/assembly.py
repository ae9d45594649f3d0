"""The document a review produces from its decisions and edits."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .changes import Change
from .document import join, task_number
from .numbering import Part, ordered

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
    return join(ordered(result_parts(changes, decisions, edits)))


def result_parts(
    changes: Iterable[Change], decisions: dict[str, str], edits: dict[str, str]
) -> list[Part]:
    """What ``assemble`` puts in order (``numbering.ordered``): each change's text as
    decided, where it goes, and the tasks it stands for."""
    parts: list[Part] = []
    for change in changes:
        decision = decisions.get(change.key, ACCEPT)
        edited = edits.get(change.key)
        if change.pieces:
            kept: list[Part] = []
            left: list[tuple[str, str, int | None]] = []
            first = True
            for index, (slot, side, _, text) in enumerate(change.pieces):
                group = change.piece_groups[index] if change.piece_groups else change.group
                mine = (side, group, task_number(text))
                if side == "old" and decision != ACCEPT and edited is None:
                    kept.append(Part(slot, text, group, change.key, side, (mine,)))
                elif side == "new" and (decision == ACCEPT or edited is not None) and first:
                    kept.append(Part(slot, edited or text, group, change.key, side, (mine,)))
                    first = edited is None
                else:
                    left.append(mine)
            if kept:  # what the dropped pieces were, the first kept one is now
                kept[0] = replace(kept[0], stands_for=kept[0].stands_for + tuple(left))
            else:
                parts.append(Part(0, "", change.group, change.key, stands_for=tuple(left)))
            parts.extend(kept)
            continue
        old_group = change.home_group if change.home is not None else change.group
        both = (
            ("old", old_group, task_number(change.current)),
            ("new", change.group, task_number(change.proposed)),
        )
        if edited is not None:
            parts.append(Part(change.slot, edited, change.group, change.key, "new", both))
        elif decision == ACCEPT:
            parts.append(Part(change.slot, change.proposed, change.group, change.key, "new", both))
        elif change.home is not None:  # keep what was there, where it was
            parts.append(Part(change.home, change.current, old_group, change.key, "old", both))
        else:  # keep what was there (or nothing, for an addition)
            parts.append(Part(change.slot, change.current, change.group, change.key, "old", both))
    return parts
