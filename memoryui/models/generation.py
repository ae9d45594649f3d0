"""A layout's generation: its settings, each run of the two phases, and phase one's
jobs and results (reused while a rollout's content and the prompts stay the same)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from .rollouts import Rollout
from .versions import MemoryVersion
from .workspaces import Layout


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
    required_approvals = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(2)],
        help_text="Reviewers who must approve a proposal before it applies (1 or 2): "
        "with 2, the first approval leaves it pending and a second reviewer's applies it.",
    )
    phase_two_token_budget = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Tokens (sent and received) phase two may use before the run fails; "
        "empty for no limit.",
    )
    # Usage (memoryui.usage): "propose forgetting" proposes removing the entries no
    # agent read in this many days (entries younger than that stay).
    forget_unread_days = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text="Propose forgetting the entries no agent read in this many days.",
    )
    # Off: phase two selects exactly as the SDK does (the newest raw memories).
    select_by_usage = models.BooleanField(
        default=False,
        help_text="Phase two selects the raw memories whose tasks agents read most and last "
        "(as Codex does) instead of the newest, leaving out those unused in the days below.",
    )
    selection_unused_days = models.PositiveIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text="With selection by usage: leave out raw memories neither read nor updated "
        "in this many days.",
    )
    # Off: only the rule checks (generation.poison) read a proposal's entries.
    judge_entries = models.BooleanField(
        default=False,
        help_text="The phase-one model also reads each proposed entry with a fixed rubric and "
        "gives a verdict and a reason, shown on the review card as the model's (run by the "
        "worker, once per text). It never quarantines an entry by itself.",
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
    # When a worker last took over work of this run whose holder's lease had run out.
    taken_over_at = models.DateTimeField(null=True, blank=True)
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
