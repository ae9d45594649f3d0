"""The model judge's verdicts (``generation.judge``), kept once per entry text and rubric
version: the same text in another proposal, or checked again, costs no model call."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class JudgeVerdict(models.Model):
    """The layout model's verdict on one entry text under one version of the rubric.
    Shown as the model's opinion; it never quarantines an entry by itself."""

    class Verdict(models.TextChoices):
        SAFE = "safe", "safe"
        SUSPICIOUS = "suspicious", "suspicious"
        POISONED = "poisoned", "poisoned"

    # generation.judge.key(text): the sha256 of the rubric's version and the text.
    key = models.CharField(max_length=64, unique=True)
    rubric_version = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=100, help_text="the model that gave the verdict")
    verdict = models.CharField(max_length=12, choices=Verdict.choices)
    reason = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.verdict} ({self.model})"
