"""Phase two: the selected raw memories and the current files in, a proposed MEMORY.md and
memory_summary.md out.

``plan_phase_two`` selects exactly what the SDK would and rebuilds ``raw_memories.md``;
``run_phase_two`` asks the model for both files, then holds it to what people decided:
pinned entries are put back verbatim when the model dropped them, and rejected entries
that came back are reported. Nothing here writes files: the result is a proposal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from generation import memory_md, prompts, review, tree
from generation.llm import ModelCall, PermanentModelError, Usage

PHASE_TWO_SCHEMA_NAME = "memory_consolidation"
PHASE_TWO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memory_md": {"type": "string"},
        "memory_summary": {"type": "string"},
    },
    "required": ["memory_md", "memory_summary"],
    "additionalProperties": False,
}


@dataclass
class PhaseTwoInput:
    selected: list[tree.SelectionItem]
    diff: tree.SelectionDiff
    raw_memories_md: str
    # Previously selected items that fell out, with their summary files, for the prompt.
    removed_items: list[tree.SelectionItem] = field(default_factory=list)


def plan_phase_two(
    raw_memory_texts: Iterable[str],
    previous: tree.Selection | None,
    limit: int,
    protected: Iterable[str] = (),
    by_usage: UsageRanking | None = None,
) -> PhaseTwoInput:
    """The SDK's selection (the ``limit`` newest raw memories), how it differs from the
    previous ``phase_two_selection.json``, and ``raw_memories.md`` rebuilt from it.

    Raw memories whose rollout id is ``protected`` (people chose to keep them) are
    selected whatever their age, in place of the oldest others; the order stays the
    SDK's.

    ``by_usage`` (a layout's option, off by default) ranks by usage instead, as Codex
    does (``rank_by_usage``)."""
    texts = list(raw_memory_texts)
    everything = tree.select_for_consolidation(texts, len(texts))
    ranked = everything if by_usage is None else rank_by_usage(everything, by_usage)
    keep = set(protected) & {item.rollout_id for item in everything}
    if by_usage is None:
        selected = tree.select_for_consolidation(texts, limit)
    else:
        selected = ranked[:limit]
    if keep - {item.rollout_id for item in selected}:
        others = limit - len(keep)
        chosen = {
            i.rollout_id for i in [r for r in ranked if r.rollout_id not in keep][: max(0, others)]
        }
        in_ranking = {item.rollout_id for item in ranked}
        order = ranked + [i for i in everything if i.rollout_id not in in_ranking]
        selected = [i for i in order if i.rollout_id in keep or i.rollout_id in chosen]
    by_id: dict[str, str] = {}
    for text in texts:
        rollout_id = tree.read_headers(text, ("rollout_id",)).get("rollout_id", "")
        by_id.setdefault(rollout_id, text)
    before = previous.items if previous else []
    diff = tree.diff_selection(before, selected)
    removed = set(diff.removed)
    return PhaseTwoInput(
        selected=selected,
        diff=diff,
        raw_memories_md=tree.merge_raw_memories(by_id[item.rollout_id] for item in selected),
        removed_items=[item for item in before if item.rollout_id in removed],
    )


@dataclass(frozen=True)
class UsageRanking:
    """How often agents used each rollout's memory: ``reads`` of the MEMORY.md entries
    that cite it and the ``last_read`` of them (ISO, UTC) by rollout id; raw memories
    neither read nor updated since ``cutoff`` (ISO, UTC) are left out."""

    reads: dict[str, int]
    last_read: dict[str, str]
    cutoff: str


def rank_by_usage(items: list[tree.SelectionItem], usage: UsageRanking) -> list[tree.SelectionItem]:
    """``items`` most used first (reads, then the latest of the last read and the raw
    memory's own ``updated_at``, then the rollout id), without the ones unused since
    the cutoff. A raw memory never read yet counts from its ``updated_at``, so a new one
    is kept until it has had ``cutoff``'s time to be read."""

    def last_use(item: tree.SelectionItem) -> str:
        updated = item.updated_at if tree.updated_at_sort_key(item.updated_at)[0] else ""
        return max(usage.last_read.get(item.rollout_id, ""), updated)

    used = [item for item in items if last_use(item) >= usage.cutoff]
    used.sort(
        key=lambda i: (usage.reads.get(i.rollout_id, 0), last_use(i), i.rollout_id), reverse=True
    )
    return used


def selection_lines(plan: PhaseTwoInput) -> str:
    """The selection as the model reads it: counts, then each rollout and its status."""
    retained = set(plan.diff.retained)
    lines = [
        f"selected: {len(plan.selected)} (added since the last consolidation: "
        f"{len(plan.diff.added)}, retained: {len(plan.diff.retained)}); "
        f"removed since the last consolidation: {len(plan.removed_items)}",
    ]
    for item in plan.selected:
        status = "retained" if item.rollout_id in retained else "added"
        lines.append(f"- [{status}] {_describe(item)}")
    for item in plan.removed_items:
        lines.append(f"- [removed] {_describe(item)}")
    return "\n".join(lines)


def _describe(item: tree.SelectionItem) -> str:
    return (
        f"rollout_id={item.rollout_id}, rollout_summary_file={item.rollout_summary_file}, "
        f"updated_at={item.updated_at or 'unknown'}, "
        f"terminal_state={item.terminal_state or 'unknown'}"
    )


@dataclass
class PhaseTwoResult:
    memory_md: str
    memory_summary: str
    restored_pins: list[str]
    reintroduced: list[str]
    usage: Usage


def run_phase_two(
    *,
    plan: PhaseTwoInput,
    current_memory_md: str,
    current_summary: str,
    pinned: list[str],
    rejected: list[str],
    extra_prompt: str,
    call: ModelCall,
) -> PhaseTwoResult:
    """Ask the model for new MEMORY.md and memory_summary.md. Pinned entries (exact
    block texts) it dropped are restored; rejected entries it brought back are listed
    in ``reintroduced`` for the reviewer. Raises PermanentModelError when there is
    nothing to consolidate or the model returns an empty MEMORY.md."""
    if not plan.selected:
        raise PermanentModelError("nothing to consolidate: no raw memory is selected")
    prompt = prompts.phase_two_prompt(
        selection_lines=selection_lines(plan),
        raw_memories_md=plan.raw_memories_md,
        current_memory_md=current_memory_md,
        current_summary=current_summary,
        pinned=pinned,
        rejected=rejected,
    )
    output, usage = call(
        prompts.phase_two_instructions(extra_prompt),
        prompt,
        PHASE_TWO_SCHEMA_NAME,
        PHASE_TWO_SCHEMA,
    )
    new_memory, new_summary = output.get("memory_md"), output.get("memory_summary")
    if not isinstance(new_memory, str) or not isinstance(new_summary, str):
        raise PermanentModelError("the answer lacks memory_md or memory_summary", usage=usage)
    if not new_memory.strip():
        raise PermanentModelError("the model returned an empty MEMORY.md", usage=usage)
    new_memory, restored = restore_pins(new_memory, pinned)
    return PhaseTwoResult(
        memory_md=new_memory,
        memory_summary=new_summary,
        restored_pins=restored,
        reintroduced=find_reintroduced([new_memory, new_summary], rejected),
        usage=usage,
    )


# --- pinned and rejected entries -------------------------------------------------------


def restore_pins(document: str, pinned: Iterable[str]) -> tuple[str, list[str]]:
    """Put back every pinned entry missing from ``document``: in place of a block with
    the same heading when there is one, else at the end. Returns the document and the
    entries restored. An entry counts as present when its text (trailing whitespace
    aside) appears verbatim, so a model that kept it and wrote more under it is fine."""
    restored: list[str] = []
    for pin in pinned:
        if not pin.strip() or _unnumbered(pin).rstrip() in _unnumbered(document):
            continue  # a task renumbered by an insertion above it is still there
        document = _replace_same_heading(document, pin) or _append(document, pin)
        restored.append(pin)
    return document, restored


def _replace_same_heading(document: str, pin: str) -> str | None:
    pinned_blocks = memory_md.parse(pin).children
    if not pinned_blocks or pinned_blocks[0].level == 0 or not pinned_blocks[0].title:
        return None
    head = pinned_blocks[0]
    root = memory_md.parse(document)
    for block in root.walk():
        if (
            block.level == head.level
            and block.kind == head.kind
            and _title(block).casefold() == _title(head).casefold()
        ):
            text = pin if pin.endswith("\n") else pin + "\n"
            if block.kind == "task":  # the task keeps the number it has now
                now = review.TASK_HEADING_RE.match(block.text)
                if now is not None:
                    text = review.TASK_HEADING_RE.sub(rf"\g<1>{now.group(2)}\g<3>", text, count=1)
            block.text = text
            block.children = []
            return root.dump()
    return None


def _title(block: memory_md.Block) -> str:
    return review.task_title(block.title).strip() if block.kind == "task" else block.title.strip()


_TASK_NUMBER = re.compile(r"(?m)^(#{2,6}[ \t]+Task[ \t]+)\d+")


def _unnumbered(text: str) -> str:
    return _TASK_NUMBER.sub(r"\1#", text)


def _append(document: str, pin: str) -> str:
    if not document.strip():
        return pin
    return document.rstrip("\n") + "\n\n" + pin


def _normalize(text: str) -> str:
    return " ".join(text.split()).casefold()


def find_reintroduced(documents: Iterable[str], rejected: Iterable[str]) -> list[str]:
    """The rejected entries whose text appears again in any of ``documents``, compared
    with whitespace collapsed and case ignored."""
    haystack = _normalize("\n".join(documents))
    return [entry for entry in rejected if _normalize(entry) and _normalize(entry) in haystack]
