"""Three-way merge by entry of people's edits and the model's version."""

from __future__ import annotations

from dataclasses import dataclass

from .document import entries, join, same_text, task_number
from .numbering import Part, ordered


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
            (name, doc[key].group, task_number(doc[key].text))
            for name, doc in (("human", h), ("model", m))
            if key in doc and doc[key].kind == "task"
        )
        entry = (h if side == "human" else m).get(key)
        group = entry.group if entry else ""
        parts.append(Part(position, chosen or "", group, key, side, stands_for))
    return Merge(join(ordered(parts)), conflicts)


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
