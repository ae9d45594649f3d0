"""What people decide on: a consolidation's proposal, their decisions, views and
comments on its entries, and what the curation keeps across consolidations (pins,
rejections, approvals, protected raw memories, the checks of each entry's text)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from generation.review import interned

from .generation import GenerationRun
from .versions import MemoryVersion
from .workspaces import ImportRun, Layout


class Proposal(models.Model):
    """A consolidation's result, waiting for a person: nothing reaches the workspace
    until it is approved. Made by memoryui's pipeline (``run``), or by an agent: a
    sandbox's upload or an import brought its own ``MEMORY.md`` / ``memory_summary.md``
    (``agent_versions``, the versions it wrote, awaiting review), based on the version
    it was served (``memoryui.agent_proposals``)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Awaiting review"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        # Closed without applying, with the reviewer's message (``review_message``):
        # the next proposal of the layout shows it and phase two is told it.
        CHANGES_REQUESTED = "changes_requested", "Changes requested"

    class Origin(models.TextChoices):
        PIPELINE = "pipeline", "pipeline run"
        UPLOAD = "upload", "sandbox upload"
        IMPORT = "import", "import"

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="proposals")
    run = models.OneToOneField(
        GenerationRun, null=True, blank=True, on_delete=models.CASCADE, related_name="proposal"
    )
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.PIPELINE)
    # An agent's proposal: the sandbox (its snapshot id; "" for an import), the import
    # that brought it last, the rollouts of its uploads, and the versions it wrote.
    snapshot_id = models.CharField(max_length=128, blank=True)
    import_run = models.ForeignKey(
        ImportRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    inputs = models.JSONField(default=list, blank=True)
    # Raw memories and rollout summaries (workspace paths) the sandbox was served and
    # its uploads lack: the agent's forgetting, applied to the workspace on approval.
    forgotten = models.JSONField(default=list, blank=True)
    # People's decision on each forgotten file: {path: "accept" (forget it) | "reject"
    # (keep it)}; a file nobody decided follows the approval's choice for undecided ones.
    forgotten_decisions = models.JSONField(default=dict, blank=True)
    # Raw memories and rollout summaries this sandbox uploaded with other bytes than
    # another sandbox did for the same rollout id: [{"path", "sandboxes": [theirs, ours]}]
    # (each sandbox's downloads keep its own).
    clashes = models.JSONField(default=list, blank=True)
    agent_versions = models.ManyToManyField(
        MemoryVersion, blank=True, related_name="agent_proposals"
    )
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.PENDING)
    base_memory_md = models.ForeignKey(
        MemoryVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    base_memory_summary = models.ForeignKey(
        MemoryVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    memory_md = models.TextField()
    memory_summary = models.TextField()
    raw_memories_md = models.TextField()
    selection = models.JSONField(default=list, help_text="phase_two_selection items")
    retained = models.JSONField(default=list)
    added = models.JSONField(default=list)
    removed = models.JSONField(default=list)
    restored_pins = models.JSONField(default=list)
    reintroduced = models.JSONField(default=list)
    # Skill files phase two's agent added, changed or deleted, relative to the memories
    # dir: {"skills/<name>/SKILL.md": {"old": text or null, "new": text or null}}.
    skill_changes = models.JSONField(default=dict, blank=True)
    # People's decision per skill file: {"skills/<name>/SKILL.md": "accept" | "reject"};
    # a file nobody decided is accepted with the proposal.
    skill_decisions = models.JSONField(default=dict, blank=True)
    # Likely duplicates a reviewer looked at, per pair ("document key key", the keys
    # sorted): {"ack": "keep" (keep both) or "different" (not a duplicate), "by", "at"}.
    duplicate_acks = models.JSONField(default=dict, blank=True)
    # Reviewers who approved while the layout requires more than one approval:
    # [{"user": pk, "name", "at"}]; the last required one applies the proposal.
    approvals = models.JSONField(default=list, blank=True)
    # What the reviewer asked for when requesting changes.
    review_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reserved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reserved_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"proposal {self.pk} for {self.layout}"

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any) -> Proposal:
        """A proposal as read, its texts the objects this process keeps for them
        (``generation.review.interned``): the comparison caches then find them by
        identity, whichever page or task read the proposal first."""
        proposal = super().from_db(db, field_names, values)
        for name in ("memory_md", "memory_summary"):
            text = proposal.__dict__.get(name)
            if isinstance(text, str) and text:
                proposal.__dict__[name] = interned(text)
        return proposal


class EntryRef(models.Model):
    """Which entry: its document (``MEMORY.md`` or ``memory_summary.md``) and its key
    there (``generation.memory_md``'s key), for every model about one entry. (A comment
    may be on no entry: ``Comment`` keeps its own optional pair.)"""

    document = models.CharField(max_length=32, choices=MemoryVersion.Document.choices)
    key = models.CharField(max_length=600)

    class Meta:
        abstract = True


class EntryDecision(EntryRef):
    """A reviewer's accept or reject (optionally with an edit) of one proposal entry."""

    class Decision(models.TextChoices):
        ACCEPT = "accept", "Accepted"
        REJECT = "reject", "Rejected"

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="decisions")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    edited_text = models.TextField(blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    decided_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "document", "key"], name="decision_unique_entry"
            )
        ]

    def __str__(self) -> str:
        return f"{self.decision} {self.key}"


class EntryView(EntryRef):
    """A reviewer marked one proposal entry as viewed (per person, like a pull
    request's "Viewed" checkbox): the review's progress, not a decision."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="views")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "document", "key", "user"], name="entry_view_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} viewed {self.key}"


class Pin(EntryRef):
    """An entry that survives every later consolidation verbatim."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="pins")
    title = models.CharField(max_length=500, blank=True)
    text = models.TextField()
    pinned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["layout", "document", "key"], name="pin_unique_entry")
        ]

    def __str__(self) -> str:
        return f"pin {self.key}"


class RejectedEntry(EntryRef):
    """An entry people rejected: phase two is told not to bring it back."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="rejections")
    title = models.CharField(max_length=500, blank=True)
    text = models.TextField()
    proposal = models.ForeignKey(
        Proposal, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rejected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"rejected {self.key}"


class Comment(models.Model):
    """A note on a proposal, or on one of its entries (``key``), or on one line of an
    entry: ``line`` (from 1) and ``line_text`` in the proposed entry's text as it was
    when the comment was made, so that a later edit leaves it "outdated" rather than
    pointing at another line."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="comments")
    document = models.CharField(max_length=32, blank=True)
    key = models.CharField(max_length=600, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    text = models.TextField()
    line = models.PositiveIntegerField(null=True, blank=True)
    line_text = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"comment by {self.author} on proposal {self.proposal_id}"


class ProtectedRawMemory(models.Model):
    """A raw memory kept in the next consolidations' selection whatever its age."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="protected")
    rollout_id = models.CharField(max_length=128)
    protected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["layout", "rollout_id"], name="protected_unique")
        ]

    def __str__(self) -> str:
        return f"protected {self.rollout_id}"


class ApprovedEntry(EntryRef):
    """An entry's text as people approved it: later proposals that keep the text keep
    the approval; one that changes it comes back as outdated."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="approvals")
    text = models.TextField()
    proposal = models.ForeignKey(
        Proposal, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    approved_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["layout", "document", "key"], name="approval_unique_entry"
            )
        ]

    def __str__(self) -> str:
        return f"approved {self.key}"


class EntryCheck(EntryRef):
    """What memoryui found in one entry text of a proposal (the model's, or a reviewer's
    edit): each claim with its evidence and provenance, and the poisoning flags.
    Computed once per text (``entry_checks.ensure``), never per request."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="checks")
    sha256 = models.CharField(max_length=64, help_text="of the text checked")
    # The strongest flag's strength (generation.poison.STRENGTH); 0: no flag.
    risk = models.PositiveSmallIntegerField(default=0)
    flags = models.JSONField(default=list, blank=True)
    # Each claim with its evidence and provenance: read only when a reviewer opens it.
    claims = models.JSONField(default=list, blank=True)
    # What the card says of the claims without reading them.
    claim_count = models.PositiveIntegerField(default=0)
    unsupported = models.PositiveIntegerField(default=0)
    tool_only = models.PositiveIntegerField(default=0)
    # Its title and keyword bullets (checked too, counted apart from the sentences).
    label_count = models.PositiveIntegerField(default=0)
    labels_missing = models.PositiveIntegerField(default=0)
    # The model judge's verdict on the text (``memoryui.judging``), when the layout has
    # the judge on and the worker has read it: shown beside the flags, never in ``risk``.
    judged = models.ForeignKey(
        "memoryui.JudgeVerdict", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "document", "key", "sha256"], name="entry_check_unique"
            )
        ]

    def __str__(self) -> str:
        return f"check of {self.key}"
