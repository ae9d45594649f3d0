"""What memoryui keeps: every imported file's exact bytes, what was parsed from them,
and every version of the consolidated memory files.

The database is the record because a sandbox's disk can change or vanish. Models never
parse files; ``generation.tree`` does, and ``memoryui.importer`` stores the results.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse
from django.utils import timezone

from generation.tree import FileKind

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Workspace(models.Model):
    class SourceKind(models.TextChoices):
        DIRECTORY = "directory", "Directory"
        SNAPSHOT = "snapshot", "Snapshot archive"

    name = models.CharField(max_length=100, unique=True)
    source_kind = models.CharField(max_length=16, choices=SourceKind.choices)
    source_path = models.CharField(max_length=1024)
    created_at = models.DateTimeField(auto_now_add=True)
    last_imported_at = models.DateTimeField(null=True, blank=True)
    # Scheduled sync: Celery beat re-imports the workspace every this many minutes, so
    # what sandboxes write shows up without anyone running a command.
    sync_interval_minutes = models.PositiveIntegerField(
        "sync every (minutes)",
        default=0,
        validators=[MaxValueValidator(7 * 24 * 60)],
        help_text="Re-import from the source every this many minutes; 0 turns it off.",
    )
    # When the next sync is due (None: off). A beat claims a workspace by moving this
    # forward with a conditional update, so no two beats import it at once.
    next_sync_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("memoryui:workspace_detail", args=[self.name])


class LayoutQuerySet(models.QuerySet["Layout"]):
    def present(self) -> LayoutQuerySet:
        return self.filter(missing_since__isnull=True)


class Layout(models.Model):
    """One agent's memory inside a workspace: a memories dir and its sessions dir."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="layouts")
    memories_dir = models.CharField(max_length=512)
    sessions_dir = models.CharField(max_length=512)
    missing_since = models.DateTimeField(null=True, blank=True)

    objects = LayoutQuerySet.as_manager()

    class Meta:
        ordering = ["workspace", "memories_dir"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "memories_dir"], name="layout_unique_memories_dir"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workspace.name}: {self.memories_dir}"


class Blob(models.Model):
    """File content, stored once per distinct sha256."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    data = models.BinaryField()

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size} bytes)"

    @classmethod
    def store(cls, data: bytes) -> str:
        """Keep ``data`` (once per distinct content); its sha256, the blob's key."""
        digest = hashlib.sha256(data).hexdigest()
        cls.objects.get_or_create(sha256=digest, defaults={"size": len(data), "data": data})
        return digest


class FileQuerySet(models.QuerySet["WorkspaceFile"]):
    def present(self) -> FileQuerySet:
        return self.filter(missing_since__isnull=True)

    def with_problems(self) -> FileQuerySet:
        return self.exclude(problem="")


class WorkspaceFile(models.Model):
    """A file (or directory) of an imported workspace, as it was last seen on disk."""

    # One list of kinds, generation.tree's; the stubs know only the class form.
    Kind = models.TextChoices("Kind", [(k.name, k.value) for k in FileKind])  # type: ignore[call-overload]

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="files")
    layout = models.ForeignKey(
        Layout, null=True, blank=True, on_delete=models.SET_NULL, related_name="files"
    )
    path = models.CharField(max_length=1024)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    blob = models.ForeignKey(Blob, null=True, blank=True, on_delete=models.PROTECT)
    size = models.BigIntegerField(default=0)
    mode = models.IntegerField(default=0o644)
    mtime_ns = models.BigIntegerField(default=0)
    problem = models.TextField(blank=True, help_text="Why this file was not taken as it is.")
    first_seen_at = models.DateTimeField(default=timezone.now)
    changed_at = models.DateTimeField(default=timezone.now)
    missing_since = models.DateTimeField(null=True, blank=True)

    objects = FileQuerySet.as_manager()

    class Meta:
        ordering = ["workspace", "path"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "path"], name="file_unique_path")
        ]
        indexes = [
            models.Index(fields=["layout", "kind"]),
            models.Index(fields=["workspace", "kind"], name="file_workspace_kind"),
            # Files gone from disk: few, looked up on every workspace and layout page.
            models.Index(
                fields=["layout"], condition=models.Q(missing_since__isnull=False), name="file_gone"
            ),
            models.Index(
                fields=["workspace"],
                condition=models.Q(missing_since__isnull=False),
                name="file_gone_workspace",
            ),
        ]

    def __str__(self) -> str:
        return self.path

    @property
    def sha256(self) -> str:
        return self.blob_id or ""


class Rollout(models.Model):
    """One ``<sessions_dir>/<rollout_id>.jsonl``: one or more run segments."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="rollouts")
    file = models.OneToOneField(WorkspaceFile, on_delete=models.CASCADE, related_name="rollout")
    rollout_id = models.CharField(max_length=128)
    segment_count = models.PositiveIntegerField(default=0)
    item_count = models.PositiveIntegerField(default=0)
    updated_at_raw = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    # Denormalised for fast lists and charts: the day of updated_at (UTC), and a sort
    # key that puts rollouts without a date last (the epoch) in "most recent" order.
    updated_day = models.DateField(null=True, blank=True)
    sort_at = models.DateTimeField(default=EPOCH)
    terminal_state = models.CharField(max_length=32, blank=True)
    title = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-sort_at", "-rollout_id"]
        constraints = [
            models.UniqueConstraint(fields=["layout", "rollout_id"], name="rollout_unique_id")
        ]
        indexes = [
            models.Index(fields=["layout", "sort_at", "rollout_id"], name="rollout_recent"),
            models.Index(
                fields=["layout", "terminal_state", "sort_at", "rollout_id"],
                name="rollout_state_recent",
            ),
            # Covers the layout overview's rollouts per day and state.
            models.Index(fields=["layout", "updated_day", "terminal_state"], name="rollout_day"),
        ]

    def __str__(self) -> str:
        return self.rollout_id


class RawMemory(models.Model):
    """``<memories_dir>/raw_memories/<rollout_id>.md``: phase one's memory of a rollout."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="raw_memories")
    file = models.OneToOneField(WorkspaceFile, on_delete=models.CASCADE, related_name="raw_memory")
    rollout_id = models.CharField(max_length=128)
    updated_at_raw = models.CharField(max_length=64, blank=True)
    rollout_path = models.CharField(max_length=1024, blank=True)
    rollout_summary_file = models.CharField(max_length=1024, blank=True)
    terminal_state = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["-updated_at_raw", "rollout_id"]
        verbose_name_plural = "raw memories"
        # "Does this rollout have a raw memory?" for each row of the rollout list.
        indexes = [models.Index(fields=["layout", "rollout_id"], name="raw_memory_of_rollout")]

    def __str__(self) -> str:
        return self.rollout_id


class RolloutSummary(models.Model):
    """``<memories_dir>/rollout_summaries/<rollout_id>_<slug>.md``."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="rollout_summaries")
    file = models.OneToOneField(
        WorkspaceFile, on_delete=models.CASCADE, related_name="rollout_summary"
    )
    rollout_id = models.CharField(max_length=128)
    slug = models.CharField(max_length=128, blank=True)
    session_id = models.CharField(max_length=128, blank=True)
    updated_at_raw = models.CharField(max_length=64, blank=True)
    terminal_state = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["-updated_at_raw", "rollout_id"]
        verbose_name_plural = "rollout summaries"
        indexes = [models.Index(fields=["layout", "rollout_id"], name="summary_of_rollout")]

    def __str__(self) -> str:
        return f"{self.rollout_id}_{self.slug}"


class MemoryVersion(models.Model):
    """One version of a layout's ``MEMORY.md`` or ``memory_summary.md``.

    Imports add a version whenever the file on disk differs from the latest one;
    people and the pipeline add versions later. The latest is the current text.
    """

    class Document(models.TextChoices):
        MEMORY_MD = "memory_md", "MEMORY.md"
        MEMORY_SUMMARY = "memory_summary", "memory_summary.md"

    class Author(models.TextChoices):
        AGENT = "agent", "Agent / SDK (on disk)"
        PERSON = "person", "Person"
        PIPELINE = "pipeline", "memoryui pipeline"

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="versions")
    document = models.CharField(max_length=32, choices=Document.choices)
    number = models.PositiveIntegerField()
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT)
    author_kind = models.CharField(max_length=16, choices=Author.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # An agent's own edit found on disk by a re-import: to be accepted or reverted.
    needs_review = models.BooleanField(default=False)

    class Meta:
        ordering = ["layout", "document", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["layout", "document", "number"], name="version_unique_number"
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_document_display()} v{self.number}"


class SkillFileVersion(models.Model):
    """One version of a file under a layout's ``skills/<name>/``; ``blob`` None: the
    file is deleted in this version.

    Imports add a version whenever the file on disk differs from the latest one (or is
    gone from disk); people and approved proposals add versions later. The latest is
    the curated file that write-back and export write (or delete)."""

    Author = MemoryVersion.Author

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="skill_versions")
    path = models.CharField(max_length=1024, help_text="relative to the memories dir")
    number = models.PositiveIntegerField()
    blob = models.ForeignKey(Blob, null=True, blank=True, on_delete=models.PROTECT)
    author_kind = models.CharField(max_length=16, choices=MemoryVersion.Author.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # A sandbox's change that arrived by upload: not served to sandboxes until a person
    # saves it (the remote snapshot store's gate).
    needs_review = models.BooleanField(default=False)

    class Meta:
        ordering = ["layout", "path", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["layout", "path", "number"], name="skill_version_unique_number"
            )
        ]

    def __str__(self) -> str:
        return f"{self.path} v{self.number}"

    @property
    def deleted(self) -> bool:
        return self.blob_id is None


class ImportRun(models.Model):
    """One run of the importer over a workspace, with the report it printed."""

    class Status(models.TextChoices):
        OK = "ok", "Imported"
        WITH_ERRORS = "with_errors", "Imported with errors"
        FAILED = "failed", "Nothing imported"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="imports")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices)
    added = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    missing = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict)
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    scheduled = models.BooleanField(default=False, help_text="Run by the scheduled sync.")

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.workspace.name} @ {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def errors(self) -> list[dict[str, str]]:
        return list(self.report.get("errors", []))

    @property
    def new_versions(self) -> list[str]:
        return list(self.report.get("new_versions", []))


class ImportJob(models.Model):
    """A workspace being created from the dashboard, from an uploaded snapshot or a
    registered directory, and imported by a Celery task."""

    class Kind(models.TextChoices):
        UPLOAD = "upload", "Uploaded snapshot"
        DIRECTORY = "directory", "Registered directory"
        SANDBOX = "sandbox", "Sandbox upload (remote snapshot store)"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Importing"
        DONE = "done", "Imported"
        FAILED = "failed", "Failed"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    source_path = models.CharField(max_length=1024)
    original_name = models.CharField(max_length=255, blank=True)
    size = models.BigIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    run = models.ForeignKey(
        ImportRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.name} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)


class SearchDocument(models.Model):
    """Searchable text of a transcript, raw memory or rollout summary. PostgreSQL
    searches it with a full-text index; SQLite with a substring scan."""

    class Kind(models.TextChoices):
        TRANSCRIPT = "transcript", "Transcript"
        RAW_MEMORY = "raw_memory", "Raw memory"
        SUMMARY = "summary", "Rollout summary"

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="search_documents")
    file = models.OneToOneField(
        WorkspaceFile, on_delete=models.CASCADE, related_name="search_document"
    )
    rollout_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    body = models.TextField()

    class Meta:
        indexes = [models.Index(fields=["layout", "rollout_id"])]

    def __str__(self) -> str:
        return f"{self.kind}: {self.rollout_id}"


# --- generation ------------------------------------------------------------------


class GenerationSettings(models.Model):
    """How memoryui runs the two phases for one layout (editable in the dashboard)."""

    class Effort(models.TextChoices):
        DEFAULT = "", "model default"
        MINIMAL = "minimal", "minimal"
        LOW = "low", "low"
        MEDIUM = "medium", "medium"
        HIGH = "high", "high"

    class Api(models.TextChoices):
        RESPONSES = "responses", "Responses API (structured outputs)"
        CHAT = "chat", "Chat Completions, json_schema (OpenAI, vLLM, LM Studio)"
        CHAT_JSON_OBJECT = "chat_json_object", "Chat Completions, json_object + schema (llama.cpp)"

    layout = models.OneToOneField(
        Layout, on_delete=models.CASCADE, related_name="generation_settings"
    )
    phase_one_model = models.CharField(max_length=100, default="gpt-5-mini")
    phase_two_model = models.CharField(max_length=100, default="gpt-5")
    reasoning_effort = models.CharField(
        max_length=10, choices=Effort.choices, default="", blank=True
    )
    api = models.CharField(max_length=20, choices=Api.choices, default=Api.RESPONSES)
    extra_prompt = models.TextField(
        blank=True, help_text="Added to both phases' instructions. Keep it well under 5,000 tokens."
    )
    max_raw_memories_for_consolidation = models.PositiveIntegerField(
        default=256, validators=[MinValueValidator(1), MaxValueValidator(4096)]
    )
    concurrency = models.PositiveSmallIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="Phase-one model calls running at once for this layout.",
    )

    class PromptSet(models.TextChoices):
        MEMORYUI = "memoryui", "memoryui's own prompts"
        SDK = "sdk", "the installed openai-agents SDK's prompts"

    prompt_set = models.CharField(
        max_length=16, choices=PromptSet.choices, default=PromptSet.MEMORYUI
    )
    phase_two_max_turns = models.PositiveIntegerField(
        default=500,  # the SDK's MemoryGenerateConfig.phase_two_max_turns
        validators=[MinValueValidator(1), MaxValueValidator(5000)],
        help_text="Model calls phase two's agent may make before the run fails.",
    )
    phase_two_token_budget = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Tokens (sent and received) phase two may use before the run fails; "
        "empty for no limit.",
    )
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        verbose_name_plural = "generation settings"

    def __str__(self) -> str:
        return f"generation settings for {self.layout}"


class GenerationRunQuerySet(models.QuerySet["GenerationRun"]):
    def active(self) -> GenerationRunQuerySet:
        return self.filter(status__in=GenerationRun.ACTIVE)


class GenerationRun(models.Model):
    """One run of phase one over a layout's rollouts, then phase two once."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        EXTRACTING = "extracting", "Phase one: extracting"
        CONSOLIDATING = "consolidating", "Phase two: consolidating"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.EXTRACTING, Status.CONSOLIDATING)

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    offline_demo = models.BooleanField(default=False)
    settings_snapshot = models.JSONField(default=dict)
    phase_two_input_tokens = models.PositiveIntegerField(default=0)
    phase_two_output_tokens = models.PositiveIntegerField(default=0)
    phase_two_lease_until = models.DateTimeField(null=True, blank=True)
    # Phase two's agent, live: model calls so far and the files it has changed.
    phase_two_turns = models.PositiveIntegerField(default=0)
    phase_two_files_touched = models.JSONField(default=list, blank=True)
    phase_two_note = models.CharField(
        max_length=500, blank=True, help_text="How phase two ended without a proposal."
    )
    phase_two_dispatched_at = models.DateTimeField(null=True, blank=True)
    base_memory_md = models.ForeignKey(
        MemoryVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    base_memory_summary = models.ForeignKey(
        MemoryVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = GenerationRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.layout}"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE


class PhaseOneResult(models.Model):
    """A model's extraction for one rollout's exact content: reused by later runs as
    long as the content, model, prompt and extra prompt are the same."""

    class Outcome(models.TextChoices):
        MEMORY = "memory", "Raw memory"
        NOTHING = "nothing", "Nothing to remember"

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="+")
    rollout_id = models.CharField(max_length=128)
    cache_key = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    slug = models.CharField(max_length=80, blank=True)
    rollout_summary = models.TextField(blank=True)
    raw_memory = models.TextField(blank=True)
    files = models.JSONField(default=dict, help_text="memories-dir path -> file text")
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["layout", "cache_key"], name="phase_one_cache_key")
        ]

    def __str__(self) -> str:
        return f"{self.rollout_id}: {self.outcome}"


class PhaseOneJob(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    run = models.ForeignKey(GenerationRun, on_delete=models.CASCADE, related_name="jobs")
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # When a task was last sent for this job. A job sent but never taken (its message
    # was lost with a worker) is sent again once a lease has passed.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    result = models.ForeignKey(
        PhaseOneResult, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reused = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "pk"]
        indexes = [models.Index(fields=["run", "status", "dispatched_at"], name="job_window")]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.status})"


class Proposal(models.Model):
    """A consolidation's result, waiting for a person: nothing reaches the workspace
    until it is approved."""

    class Status(models.TextChoices):
        PENDING = "pending", "Awaiting review"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="proposals")
    run = models.OneToOneField(GenerationRun, on_delete=models.CASCADE, related_name="proposal")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
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


# --- people, roles and the audit log -----------------------------------------------


class Role(models.TextChoices):
    """What a person may do in a workspace; each role includes the ones before it."""

    VIEWER = "viewer", "Viewer (read)"
    REVIEWER = "reviewer", "Reviewer (approve and reject)"
    EDITOR = "editor", "Editor (edit and pin)"
    ADMIN = "admin", "Admin (settings, write-back, export, members)"


ROLE_ORDER = [Role.VIEWER, Role.REVIEWER, Role.EDITOR, Role.ADMIN]


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.workspace}"


class AuditEvent(models.Model):
    """Every change and decision, by whom, when, on what."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="audit_events")
    layout = models.ForeignKey(
        Layout, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor = models.CharField(max_length=150, help_text="who: a username, 'pipeline' or 'agent'")
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=1024, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["workspace", "-created_at"], name="audit_recent")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target}"

    @classmethod
    def record(
        cls,
        workspace: Workspace,
        action: str,
        *,
        user: Any = None,
        actor: str = "",
        layout: Layout | None = None,
        target: str = "",
        **detail: Any,
    ) -> AuditEvent:
        person = user if getattr(user, "pk", None) else None
        return cls.objects.create(
            workspace=workspace,
            layout=layout,
            user=person,
            actor=actor or (person.get_username() if person else "system"),
            action=action,
            target=target[:1024],
            detail=detail,
        )


# --- review and curation ---------------------------------------------------------------


class EntryDecision(models.Model):
    """A reviewer's accept or reject (optionally with an edit) of one proposal entry."""

    class Decision(models.TextChoices):
        ACCEPT = "accept", "Accepted"
        REJECT = "reject", "Rejected"

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="decisions")
    document = models.CharField(max_length=32, choices=MemoryVersion.Document.choices)
    key = models.CharField(max_length=600)
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


class EntryView(models.Model):
    """A reviewer marked one proposal entry as viewed (per person, like a pull
    request's "Viewed" checkbox): the review's progress, not a decision."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="views")
    document = models.CharField(max_length=32, choices=MemoryVersion.Document.choices)
    key = models.CharField(max_length=600)
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


class Pin(models.Model):
    """An entry that survives every later consolidation verbatim."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="pins")
    document = models.CharField(max_length=32, choices=MemoryVersion.Document.choices)
    key = models.CharField(max_length=600)
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


class RejectedEntry(models.Model):
    """An entry people rejected: phase two is told not to bring it back."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="rejections")
    document = models.CharField(max_length=32, choices=MemoryVersion.Document.choices)
    key = models.CharField(max_length=600)
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
    """A note on a proposal, or on one of its entries (``key``)."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="comments")
    document = models.CharField(max_length=32, blank=True)
    key = models.CharField(max_length=600, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    text = models.TextField()
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


class ApprovedEntry(models.Model):
    """An entry's text as people approved it: later proposals that keep the text keep
    the approval; one that changes it comes back as outdated."""

    layout = models.ForeignKey(Layout, on_delete=models.CASCADE, related_name="approvals")
    document = models.CharField(max_length=32, choices=MemoryVersion.Document.choices)
    key = models.CharField(max_length=600)
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


class EntryCheck(models.Model):
    """What memoryui found in one entry text of a proposal (the model's, or a reviewer's
    edit): each claim with its evidence and provenance, and the poisoning flags.
    Computed once per text (``entry_checks.ensure``), never per request."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="checks")
    document = models.CharField(max_length=32, choices=MemoryVersion.Document.choices)
    key = models.CharField(max_length=600)
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
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "document", "key", "sha256"], name="entry_check_unique"
            )
        ]

    def __str__(self) -> str:
        return f"check of {self.key}"


class WorkerHeartbeat(models.Model):
    """When a Celery worker last ran the heartbeat task that Celery beat sends: a fresh
    one means beat and a worker are both alive (``/healthz``)."""

    name = models.CharField(max_length=100, unique=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.seen_at:%Y-%m-%d %H:%M:%S}"


# --- the JSON API, the remote snapshot store and webhooks -----------------------------


class ApiToken(models.Model):
    """A personal API token: its secret is shown once and kept only as a sha256."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to tell it")
    secret_sha256 = models.CharField(max_length=64, unique=True)
    workspaces = models.JSONField(default=list, help_text="names of the workspaces it may reach")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > timezone.now()
        )


class UploadedSnapshot(models.Model):
    """A workspace archive a sandbox uploaded to the remote snapshot store."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="uploaded_snapshots"
    )
    snapshot_id = models.CharField(max_length=128)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    path = models.CharField(max_length=1024)
    uploaded_at = models.DateTimeField(default=timezone.now)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    import_run = models.ForeignKey(
        ImportRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    import_job = models.ForeignKey(
        "ImportJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-uploaded_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "snapshot_id"], name="uploaded_snapshot_unique_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workspace.name}/{self.snapshot_id}"


class Webhook(models.Model):
    """A receiver of a workspace's events, signed with its secret."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=1000)
    secret = models.CharField(max_length=100)
    events = models.JSONField(default=list, help_text="event names; empty: every event")
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["workspace", "pk"]

    def __str__(self) -> str:
        return f"webhook {self.origin}"

    def clean(self) -> None:
        """The admin's check: the same refusals as the webhooks page."""
        from .outbound import Refused, validate_target

        try:
            validate_target(self.url)
        except Refused as exc:
            raise ValidationError({"url": f"This receiver is refused: {exc}."}) from exc

    @property
    def origin(self) -> str:
        """What pages and the audit log show: never the path, query or credentials."""
        from .outbound import origin

        return origin(self.url)


class WebhookDelivery(models.Model):
    """One event sent to one webhook, and every attempt at it."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.event} to {self.webhook.url}"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    retry_in = models.FloatField(null=True, blank=True, help_text="seconds until the next try")

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"


class SnapshotStorePolicy(models.Model):
    """What the remote snapshot store does after a workspace's upload is imported."""

    workspace = models.OneToOneField(
        Workspace, on_delete=models.CASCADE, related_name="snapshot_store_policy"
    )
    generate_on_upload = models.BooleanField(
        default=False,
        help_text="Start a generation run for every layout after each upload.",
    )
    serve_unreviewed = models.BooleanField(
        default=False,
        help_text="Serve sandboxes the latest memory, agent changes not yet reviewed "
        "included (by default they get the latest approved memory only).",
    )

    def __str__(self) -> str:
        return f"snapshot store policy of {self.workspace}"


class LintAllowance(models.Model):
    """An admin let a lint finding through for one content of its file: write-back and
    export honor it until the file's content changes (then the finding asks again)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    finding_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=32)
    path = models.CharField(max_length=1024, help_text="relative to the workspace")
    sha256 = models.CharField(max_length=64, help_text="the file's content it was given for")
    allowed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "finding_id", "sha256"], name="lint_allowance_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.finding_id} in {self.path} ({self.sha256[:12]})"


class LintResult(models.Model):
    """What the lint found in one content of a file (``generation.lint.lint_file``), kept
    so that write-back and export, in whichever process they run, scan only content never
    scanned before. ``key``: the lint's version, the path, the content's sha256 and the
    workspace's layouts, hashed (each is part of what the lint looks at)."""

    key = models.CharField(max_length=64, primary_key=True)
    findings = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"lint result {self.key[:12]} ({len(self.findings)} findings)"


class OperationStat(models.Model):
    """How often an operation ended one way, and the seconds it took in all: counters
    every process (web, workers) adds to, which /metrics exports (see observability)."""

    operation = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)
    seconds = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["operation", "outcome"], name="operation_outcome")
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.outcome}: {self.count}"
