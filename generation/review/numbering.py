"""Putting the parts of a result in order: each task group's tasks under it, numbered
1, 2, ..., and the ``[Task n]`` references following their tasks."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from .document import TASK_HEADING_RE, entries, task_number


def renumber(text: str) -> str:
    """``text`` with the tasks of each task group numbered 1, 2, ... in order and the
    ``[Task n]`` references inside each group following their tasks (a number two
    tasks share points at the first)."""
    parts = entries(text)
    if not any(e.kind == "task" and e.group for e in parts):
        return text
    return "".join(
        ordered(
            [
                Part(i, e.text, e.group, e.key, "new", (("new", e.group, task_number(e.text)),))
                for i, e in enumerate(parts)
            ]
        )
    )


@dataclass(frozen=True)
class Part:
    """An entry's text in a result: where it goes and the tasks it stands for."""

    position: float
    text: str  # "" for what a decision leaves out
    group: str  # the task group it goes into ("" for a group's head or a top-level entry)
    key: str
    side: str = "new"  # the document its text (and its task references) comes from
    # The (side, group, number) of each task this part is in the result (its own, and
    # those of the pieces of a pair it replaces), or stood for when left out.
    stands_for: tuple[tuple[str, str, int | None], ...] = ()


def ordered(parts: list[Part]) -> list[str]:
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
    blocks: list[tuple[Part | None, list[Part]]] = [(None, [])]
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
