"""``phase_two_selection.json``: the raw memories phase two consolidated, and choosing
the next ones."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from .raw_memories import RAW_MEMORY_HEADERS, updated_at_sort_key
from .text import SURROGATE_ESCAPES, read_headers, without_lone_surrogates


@dataclass
class SelectionItem:
    rollout_id: str
    updated_at: str
    rollout_path: str
    rollout_summary_file: str
    terminal_state: str


@dataclass
class Selection:
    items: list[SelectionItem]
    updated_at: str
    problem: str | None


def parse_selection(data: bytes) -> Selection:
    """Parse ``phase_two_selection.json`` leniently, as the SDK does: anything invalid
    means "no previous selection", and a malformed item is skipped."""
    invalid = "; the SDK treats it as no previous selection"
    try:
        payload = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return Selection([], "", "not valid UTF-8" + invalid)
    except (ValueError, RecursionError) as exc:
        return Selection([], "", f"not valid JSON ({getattr(exc, 'msg', exc)})" + invalid)
    if not isinstance(payload, dict):
        return Selection([], "", "not a JSON object" + invalid)
    if any(m[1] is None for m in SURROGATE_ESCAPES.finditer(data)):
        payload = without_lone_surrogates(payload)[0]  # no UTF-8 (nor jsonb) holds one
    selected = payload.get("selected")
    if not isinstance(selected, list):
        return Selection([], "", 'no "selected" list' + invalid)
    items = []
    skipped = 0
    for raw in selected:
        if not isinstance(raw, dict):
            skipped += 1
            continue
        rollout_id = str(raw.get("rollout_id") or "").strip()
        summary_file = str(raw.get("rollout_summary_file") or "").strip()
        if not rollout_id or not summary_file:
            skipped += 1
            continue
        items.append(
            SelectionItem(
                rollout_id=rollout_id,
                updated_at=str(raw.get("updated_at") or "").strip(),
                rollout_path=str(raw.get("rollout_path") or "").strip(),
                rollout_summary_file=summary_file,
                terminal_state=str(raw.get("terminal_state") or "").strip(),
            )
        )
    problem = None
    if skipped:
        problem = f"{skipped} selected item(s) lack rollout_id or rollout_summary_file; ignored"
    return Selection(items, str(payload.get("updated_at") or ""), problem)


def select_for_consolidation(raw_memory_texts: Iterable[str], limit: int) -> list[SelectionItem]:
    """Phase two's input: the ``limit`` most recent selectable raw memories, ordered by
    (has a real ``updated_at``, ``updated_at`` as a string, rollout id), newest first."""
    ranked: list[tuple[tuple[int, str], str, SelectionItem]] = []
    for text in raw_memory_texts:
        headers = read_headers(text.rstrip("\n"), RAW_MEMORY_HEADERS)
        rollout_id = headers.get("rollout_id", "")
        summary_file = headers.get("rollout_summary_file", "")
        if not rollout_id or not summary_file:
            continue
        item = SelectionItem(
            rollout_id=rollout_id,
            updated_at=headers.get("updated_at", ""),
            rollout_path=headers.get("rollout_path", ""),
            rollout_summary_file=summary_file,
            terminal_state=headers.get("terminal_state", ""),
        )
        ranked.append((updated_at_sort_key(item.updated_at), rollout_id, item))
    ranked.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    return [entry[2] for entry in ranked[:limit]]


@dataclass(frozen=True)
class SelectionDiff:
    retained: list[str]
    added: list[str]
    removed: list[str]


def diff_selection(
    previous: Iterable[SelectionItem], current: Iterable[SelectionItem]
) -> SelectionDiff:
    """What a consolidation keeps, brings in and forgets, by rollout id."""
    before = [item.rollout_id for item in previous]
    now = [item.rollout_id for item in current]
    before_set, now_set = set(before), set(now)
    return SelectionDiff(
        retained=[r for r in now if r in before_set],
        added=[r for r in now if r not in before_set],
        removed=[r for r in before if r not in now_set],
    )


def dump_selection(items: Iterable[SelectionItem], updated_at: str) -> str:
    payload = {
        "version": 1,
        "updated_at": updated_at,
        "selected": [
            {
                "rollout_id": item.rollout_id,
                "updated_at": item.updated_at,
                "rollout_path": item.rollout_path,
                "rollout_summary_file": item.rollout_summary_file,
                "terminal_state": item.terminal_state,
            }
            for item in items
        ],
    }
    return json.dumps(payload, indent=2) + "\n"
