"""An agent's own change to ``MEMORY.md`` / ``memory_summary.md`` as a proposal.

With the SDK's ``Memory()`` the agent consolidates inside its sandbox and persists the
result: an upload to the remote snapshot store (or a re-import of a folder sandboxes
write to) brings a version memoryui did not serve. The importer records it as an agent
version awaiting review (the gate of ``memoryui.served_memory``: sandboxes keep getting
the latest approved version) and hands it here, where it becomes a proposal of origin
*upload* (naming the sandbox by its snapshot id) or *import*, reviewed as the
pipeline's are: entry by entry, with the same checks, quarantine, edits and API.

- Its base is the version the sandbox was served: what the sandbox's last download
  served it (``UploadedSnapshot.served``), else the latest approved version.
- One open proposal per sandbox (per layout): a later upload from the same sandbox that
  changes memory again updates it (its text, its versions, its rollouts); decisions on
  entries whose proposed text stayed the same are kept, the others are undone.
- What the sandbox was served and its upload lacks (raw memories, rollout summaries
  the SDK's consolidation pruned) is its forgetting, each file on the proposal a
  decision of its own (``decide_forgetting``): approving marks the files whose removal
  was accepted (or left undecided, when undecided changes are accepted) gone from the
  workspace (no sandbox gets them, no consolidation selects them); a rejected removal,
  or a rejected proposal, keeps them.
- Approving it produces the approved version (``curation.approve``); rejecting it
  leaves the approved version served. Either way its agent versions stop awaiting
  review. Another open proposal from the same base is then reviewed against the new
  approved version, with the three-way merge and its conflicts (``curation``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from generation import review

from . import curation, documents, proposal_lock
from .models import (
    AuditEvent,
    EntryDecision,
    ImportRun,
    Layout,
    MemoryVersion,
    Proposal,
    UploadedSnapshot,
)

Document = MemoryVersion.Document
DOCUMENTS = (Document.MEMORY_MD, Document.MEMORY_SUMMARY)


def record(
    layout: Layout,
    versions: list[MemoryVersion],
    *,
    snapshot_id: str,
    import_run: ImportRun | None,
    inputs: Iterable[str],
    forgotten: Iterable[str] = (),
    skill_changes: dict[str, dict[str, Any]] | None = None,
    clashes: Iterable[dict[str, Any]] = (),
) -> Proposal | None:
    """The open proposal of this sandbox (``snapshot_id``; "" for an import) made or
    updated with the agent ``versions`` an import just recorded for ``layout``, the
    raw memories and rollout summaries it ``forgot`` and its ``skill_changes`` (per file
    relative to the memories dir, {"old": text or None, "new": text or None}), with the
    ``clashes`` of its upload (files another sandbox uploaded with other bytes)."""
    pending = [v for v in versions if v.needs_review]
    forgot = sorted(forgotten)
    skill_changes = skill_changes or {}
    if not pending and not forgot and not skill_changes:
        return None
    origin = Proposal.Origin.UPLOAD if snapshot_id else Proposal.Origin.IMPORT
    with transaction.atomic():
        Layout.objects.select_for_update().filter(pk=layout.pk).first()
        proposal = (
            Proposal.objects.select_for_update()
            .filter(
                layout=layout,
                status=Proposal.Status.PENDING,
                run__isnull=True,
                origin=origin,
                snapshot_id=snapshot_id,
            )
            # Its texts (megabytes in a large workspace) only when they change.
            .defer("memory_md", "memory_summary", "raw_memories_md", "selection")
            .first()
        )
        inputs = list(dict.fromkeys(str(r) for r in inputs))
        if proposal is not None and _holds_already(
            proposal, pending, inputs, forgot, skill_changes, list(clashes)
        ):
            # The sandbox persisted again without changing its memory: its proposal
            # stays as it is, unwritten and unaudited, whatever the workspace's size.
            return proposal
        texts = {v.document: documents.text(v.blob_id) for v in pending}
        if proposal is None:
            proposal = _create(layout, origin, snapshot_id, import_run, inputs, texts, forgot)
            action = "proposal.create"
        else:
            _update(proposal, import_run, inputs, texts, forgot)
            action = "proposal.update"
        _add_skill_changes(proposal, skill_changes)
        _add_clashes(proposal, list(clashes))
        proposal.agent_versions.add(*pending)
        AuditEvent.record(
            layout.workspace,
            action,
            actor="remote snapshot store" if snapshot_id else "import",
            layout=layout,
            target=f"proposal #{proposal.pk}",
            origin=origin,
            snapshot_id=snapshot_id,
            versions=[f"{Document(v.document).label} v{v.number}" for v in pending],
            inputs=len(inputs),
            forgotten=len(forgot),
            skill_files=sorted(skill_changes),
        )
    return proposal


def _holds_already(
    proposal: Proposal,
    pending: list[MemoryVersion],
    inputs: list[str],
    forgotten: list[str],
    skill_changes: dict[str, dict[str, Any]],
    clashes: list[dict[str, Any]],
) -> bool:
    """Whether the sandbox's open ``proposal`` already holds all of this upload: no new
    agent version, every input, forgotten file and clash known, every skill file
    proposing the same text."""
    if pending:
        return False
    known_skills = proposal.skill_changes or {}
    known_clashes = proposal.clashes or []
    return (
        set(forgotten) <= set(proposal.forgotten)
        and set(inputs) <= set(proposal.inputs)
        and all(
            rel in known_skills and known_skills[rel].get("new") == change["new"]
            for rel, change in skill_changes.items()
        )
        and all(clash in known_clashes for clash in clashes)
    )


def _add_clashes(proposal: Proposal, clashes: list[dict[str, Any]]) -> None:
    known = list(proposal.clashes or [])
    fresh = [c for c in clashes if c not in known]
    if fresh:
        proposal.clashes = known + fresh
        proposal.save(update_fields=["clashes"])


def _add_skill_changes(proposal: Proposal, changes: dict[str, dict[str, Any]]) -> None:
    """The upload's skill changes join the proposal's (a file changed again proposes
    its new text, from the same old one); a decision stays only on a file whose proposed
    text is what it was decided on."""
    if not changes:
        return
    merged = dict(proposal.skill_changes or {})
    decisions = dict(proposal.skill_decisions or {})
    for rel, change in changes.items():
        before = merged.get(rel)
        if before is not None and before.get("new") != change["new"]:
            decisions.pop(rel, None)
        merged[rel] = {"old": before["old"] if before else change["old"], "new": change["new"]}
    if (merged, decisions) == (proposal.skill_changes or {}, proposal.skill_decisions or {}):
        return  # the same files proposing the same texts
    proposal.skill_changes, proposal.skill_decisions = merged, decisions
    proposal.save(update_fields=["skill_changes", "skill_decisions"])


def _bases(layout: Layout, snapshot_id: str) -> dict[str, MemoryVersion | None]:
    """Per document, the version the sandbox was served (its last download's), else
    the latest approved one."""
    served: dict[str, Any] = {}
    if snapshot_id:
        row = (
            UploadedSnapshot.objects.filter(
                workspace_id=layout.workspace_id, snapshot_id=snapshot_id
            )
            .values_list("served", flat=True)
            .first()
        )
        served = (row or {}).get(str(layout.pk)) or {}
    bases: dict[str, MemoryVersion | None] = {}
    for document in DOCUMENTS:
        number = served.get(document)
        version = (
            MemoryVersion.objects.filter(layout=layout, document=document, number=number).first()
            if isinstance(number, int)
            else None
        )
        bases[document] = version or curation.latest_approved(layout, document)
    return bases


def _create(
    layout: Layout,
    origin: str,
    snapshot_id: str,
    import_run: ImportRun | None,
    inputs: list[str],
    texts: dict[str, str],
    forgotten: list[str],
) -> Proposal:
    bases = _bases(layout, snapshot_id)
    proposed = {d: texts.get(d, curation.text_of(bases[d])) for d in DOCUMENTS}
    return Proposal.objects.create(
        layout=layout,
        origin=origin,
        snapshot_id=snapshot_id,
        import_run=import_run,
        inputs=inputs,
        base_memory_md=bases[Document.MEMORY_MD],
        base_memory_summary=bases[Document.MEMORY_SUMMARY],
        memory_md=proposed[Document.MEMORY_MD],
        memory_summary=proposed[Document.MEMORY_SUMMARY],
        raw_memories_md="",
        forgotten=forgotten,
    )


def _update(
    proposal: Proposal,
    import_run: ImportRun | None,
    inputs: list[str],
    texts: dict[str, str],
    forgotten: list[str],
) -> None:
    """The sandbox changed memory again: its proposal proposes the new text. A decision
    stays only where the entry's proposed text is what it was decided on. What it
    forgot adds to what it had forgotten (while the proposal waits, its restores bring
    those files back, so a later upload holding them again takes nothing back). Only
    what changed is written: a persist that brings a new rollout and the same memory
    does not rewrite the proposal's texts."""
    changed = []
    forgot = sorted({*proposal.forgotten, *forgotten})
    if forgot != proposal.forgotten:
        proposal.forgotten = forgot
        changed.append("forgotten")
    fields = {
        Document.MEMORY_MD.value: "memory_md",
        Document.MEMORY_SUMMARY.value: "memory_summary",
    }
    for document, text in texts.items():
        before = {e.key: e.text for e in review.entries(getattr(proposal, fields[document]))}
        after = {e.key: e.text for e in review.entries(text)}
        stale = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
        EntryDecision.objects.filter(proposal=proposal, document=document, key__in=stale).delete()
        setattr(proposal, fields[document], text)
        changed.append(fields[document])
    known = list(dict.fromkeys([*proposal.inputs, *inputs]))
    if known != proposal.inputs:
        proposal.inputs = known
        changed.append("inputs")
    if import_run is not None:
        proposal.import_run = import_run
        changed.append("import_run")
    if changed:
        proposal.save(update_fields=changed)


FORGET, KEEP = "accept", "reject"


def decide_forgetting(
    proposal: Proposal, paths: Iterable[str], decision: str, *, user: Any
) -> None:
    """Accept (``FORGET``: the file goes with the proposal's approval) or reject
    (``KEEP``) the removal of each of ``paths``, files the proposal forgot; audited one
    event per file. Raises ``ValueError`` for a path the proposal did not forget and
    ``DecisionRefused`` when the proposal was decided meanwhile or another reviewer
    holds it."""
    paths = list(dict.fromkeys(paths))
    if decision not in (FORGET, KEEP):
        raise ValueError(f"a decision is {FORGET!r} or {KEEP!r}, not {decision!r}")
    layout = proposal.layout
    with proposal_lock.deciding(proposal, user):
        rows = Proposal.objects.filter(pk=proposal.pk)
        forgotten, decisions = rows.values_list("forgotten", "forgotten_decisions").get()
        unknown = [p for p in paths if p not in forgotten]
        if unknown:
            raise ValueError(f"not a file this proposal forgets: {', '.join(unknown)}")
        decisions = {**(decisions or {}), **dict.fromkeys(paths, decision)}
        rows.update(forgotten_decisions=decisions)
        proposal.forgotten_decisions = decisions
        for path in paths:
            AuditEvent.record(
                layout.workspace,
                f"proposal.forget_{decision}",
                user=user,
                layout=layout,
                target=path,
                proposal=proposal.pk,
            )


def forgotten_files(proposal: Proposal) -> list[dict[str, str]]:
    """The files the proposal forgot, each with its decision ("" undecided) and an id
    for its row on the review page: what the page and the API show."""
    decisions = proposal.forgotten_decisions or {}
    return [
        {
            "path": path,
            "decision": decisions.get(path, ""),
            "id": "forgotten-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in path),
        }
        for path in proposal.forgotten
    ]


def pending_for(version: MemoryVersion) -> Proposal | None:
    """The open proposal an agent version awaiting review belongs to."""
    return (
        version.agent_proposals.filter(status=Proposal.Status.PENDING)
        .select_related("layout__workspace", "base_memory_md", "base_memory_summary")
        .first()
    )
