"""Phase two of a run as an agent loop (``generation.phase_two_agent``): what goes into
the staging copy, which prompts the agent gets, and the result the pipeline stores.

The staging copy holds the run's base ``MEMORY.md`` and ``memory_summary.md``, the
rebuilt ``raw_memories.md``, the layout's ``phase_two_selection.json``, the rollout
summaries of the selected and removed rollouts (this run's or the imported ones) and
the layout's skill files. Prompt sets: ``memoryui`` (this project's texts) or ``sdk``
(rendered at run time by the installed ``openai-agents`` package; never copied here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from generation import llm, phase_two, phase_two_agent, prompts, tree

from . import diffs, skills  # skills: the curated skill files, not the ones on disk
from .models import (
    GenerationRun,
    PhaseOneJob,
    PhaseOneResult,
    RolloutSummary,
    WorkspaceFile,
)

MEMORY_MD = "MEMORY.md"
MEMORY_SUMMARY = "memory_summary.md"


@dataclass
class Consolidation:
    status: str  # "changed", "nothing", "failed", "cancelled"
    reason: str = ""
    memory_md: str = ""
    memory_summary: str = ""
    skill_changes: dict[str, dict[str, str | None]] = field(default_factory=dict)
    restored_pins: list[str] = field(default_factory=list)
    reintroduced: list[str] = field(default_factory=list)
    usage: llm.Usage = field(default_factory=llm.Usage)
    turns: int = 0


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def staging_files(
    run: GenerationRun,
    plan: phase_two.PhaseTwoInput,
    base_memory_md: str,
    base_summary: str,
    selection_file: WorkspaceFile | None,
) -> dict[str, bytes]:
    """The memory folder phase two's agent works on, relative to the memories dir."""
    layout = run.layout
    prefix = layout.memories_dir + "/"
    files: dict[str, bytes] = {
        MEMORY_MD: base_memory_md.encode(),
        MEMORY_SUMMARY: base_summary.encode(),
        "raw_memories.md": plan.raw_memories_md.encode(),
    }
    if selection_file is not None and selection_file.blob is not None:
        files["phase_two_selection.json"] = bytes(selection_file.blob.data)
    wanted = {i.rollout_summary_file for i in [*plan.selected, *plan.removed_items]}
    for summary in RolloutSummary.objects.filter(
        layout=layout, file__missing_since__isnull=True
    ).select_related("file__blob"):
        rel = summary.file.path.removeprefix(prefix)
        if rel in wanted and summary.file.blob is not None:
            files[rel] = bytes(summary.file.blob.data)
    for result in PhaseOneResult.objects.filter(
        pk__in=run.jobs.filter(status=PhaseOneJob.Status.DONE).values("result_id"),
        outcome=PhaseOneResult.Outcome.MEMORY,
    ):
        for rel, text in result.files.items():
            if rel in wanted:
                files[rel] = text.encode()

    for rel, data in skills.current_files(layout).items():
        if data is not None:
            files[rel] = data
    return files


def agent_prompts(
    prompt_set: str,
    *,
    memories_dir: str,
    plan: phase_two.PhaseTwoInput,
    pinned: list[str],
    rejected: list[str],
    extra_prompt: str,
    feedback: str = "",
) -> tuple[str, str]:
    """(instructions, prompt) for phase two's agent in the chosen prompt set;
    ``feedback``: the last review's request for changes (``prompts.review_feedback``)."""
    if prompt_set == "sdk":
        return "", sdk_phase_two_prompt(
            memories_dir=memories_dir,
            plan=plan,
            extra_prompt=extra_prompt,
        ) + _curated_section(pinned, rejected, feedback)
    return (
        prompts.phase_two_agent_instructions(extra_prompt),
        prompts.phase_two_agent_prompt(
            selection_lines=phase_two.selection_lines(plan),
            pinned=pinned,
            rejected=rejected,
            feedback=feedback,
        ),
    )


def sdk_phase_two_prompt(
    *, memories_dir: str, plan: phase_two.PhaseTwoInput, extra_prompt: str
) -> str:
    """The SDK's own phase-two prompt, rendered by the installed package."""
    from agents.sandbox.memory.prompts import render_memory_consolidation_prompt  # noqa: PLC0415 (deferred: the SDK loads when its prompt is rendered)
    from agents.sandbox.memory.storage import PhaseTwoInputSelection, PhaseTwoSelectionItem  # noqa: PLC0415 (deferred: the SDK loads when its prompt is rendered)

    def item(i: tree.SelectionItem) -> PhaseTwoSelectionItem:
        return PhaseTwoSelectionItem(
            rollout_id=i.rollout_id,
            updated_at=i.updated_at,
            rollout_path=i.rollout_path,
            rollout_summary_file=i.rollout_summary_file,
            terminal_state=i.terminal_state,
        )

    selection = PhaseTwoInputSelection(
        selected=[item(i) for i in plan.selected],
        retained_rollout_ids=set(plan.diff.retained),
        removed=[item(i) for i in plan.removed_items],
    )
    return render_memory_consolidation_prompt(
        memory_root=memories_dir, selection=selection, extra_prompt=extra_prompt or None
    )


def _curated_section(pinned: list[str], rejected: list[str], feedback: str = "") -> str:
    """What people decided, told to the agent after the SDK's prompt (memoryui's text)."""
    parts = []
    pinned = [p for p in pinned if p.strip()]
    rejected = [r for r in rejected if r.strip()]
    if pinned:
        parts.append(
            "Pinned entries: keep each one in MEMORY.md exactly as written.\n"
            + "\n".join(
                prompts.tagged(prompts.PINNED_TAG, p, n=str(i)) for i, p in enumerate(pinned, 1)
            )
        )
    if rejected:
        parts.append(
            "Rejected entries: people removed these; do not write them again in any form.\n"
            + "\n".join(
                prompts.tagged(prompts.REJECTED_TAG, r, n=str(i)) for i, r in enumerate(rejected, 1)
            )
        )
    parts += [feedback] if feedback else []
    return "\n\n" + "\n\n".join(parts) if parts else ""


def consolidate(
    run: GenerationRun,
    plan: phase_two.PhaseTwoInput,
    *,
    base_memory_md: str,
    base_summary: str,
    selection_file: WorkspaceFile | None,
    pinned: list[str],
    rejected: list[str],
    feedback: str = "",
    client: Any,
    config: llm.ModelConfig,
    should_cancel: Callable[[], bool],
    on_turn: Callable[[phase_two_agent.Turn], None],
) -> Consolidation:
    snapshot = run.settings_snapshot
    if not plan.selected:
        return Consolidation("failed", "nothing to consolidate: no raw memory is selected")
    try:
        instructions, prompt = agent_prompts(
            snapshot.get("prompt_set", "memoryui"),
            memories_dir=run.layout.memories_dir,
            plan=plan,
            pinned=pinned,
            rejected=rejected,
            extra_prompt=snapshot.get("extra_prompt", ""),
            feedback=feedback,
        )
    except ImportError as exc:
        return Consolidation(
            "failed",
            "the sdk prompt set needs the openai-agents package (the sdk extra), which "
            f"cannot be imported here ({exc}); install it or choose the memoryui prompt set",
        )
    budget = snapshot.get("phase_two_token_budget")
    limits = phase_two_agent.Limits(
        max_turns=int(snapshot.get("phase_two_max_turns") or phase_two_agent.DEFAULT_MAX_TURNS),
        token_budget=int(budget) if budget else None,
    )
    files = staging_files(run, plan, base_memory_md, base_summary, selection_file)
    with phase_two_agent.Staging(files, root_name=run.layout.memories_dir) as staging:
        result = phase_two_agent.run_agent(
            client=client,
            config=config,
            instructions=instructions,
            prompt=prompt,
            staging=staging,
            limits=limits,
            should_cancel=should_cancel,
            on_turn=on_turn,
            retry_base=settings.MEMORYUI_RETRY_BASE_SECONDS,
        )
    done = Consolidation(result.status, result.reason, usage=result.usage, turns=result.turns)
    if result.status != "changed":
        return done
    changes = result.changes
    memory_md = _text(changes[MEMORY_MD][1]) if MEMORY_MD in changes else base_memory_md
    summary = _text(changes[MEMORY_SUMMARY][1]) if MEMORY_SUMMARY in changes else base_summary
    done.memory_md, done.restored_pins = phase_two.restore_pins(memory_md or "", pinned)
    done.memory_summary = summary or ""
    done.reintroduced = phase_two.find_reintroduced([done.memory_md, done.memory_summary], rejected)
    done.skill_changes = {
        rel: {"old": _text(old), "new": _text(new)}
        for rel, (old, new) in changes.items()
        if rel.startswith("skills/")
    }
    return done


def skill_diffs(proposal: Any) -> list[dict[str, Any]]:
    """The proposal's skill files for the review and run pages: path, status, diff."""

    shown = []
    decisions = getattr(proposal, "skill_decisions", None) or {}
    # An agent's change with a flag is quarantined (``skills.settle_agent_changes``).
    agents = getattr(proposal, "run_id", 0) is None and bool(proposal.skill_changes)
    dirs = skills.layout_dirs(proposal.layout) if agents else []
    for rel, change in sorted((proposal.skill_changes or {}).items()):
        old, new = change.get("old"), change.get("new")
        status = "added" if old is None else "deleted" if new is None else "changed"
        rows = diffs.side_by_side(old or "", new or "")
        anchor = "".join(c if c.isalnum() or c in "-_" else "-" for c in rel)
        shown.append(
            {
                "path": rel,
                "status": status,
                "rows": rows,
                "decision": decisions.get(rel, ""),
                "id": f"skill-change-{anchor}",
                "flags": skills.flags(proposal.layout, rel, new, dirs) if agents else [],
            }
        )
    return shown
