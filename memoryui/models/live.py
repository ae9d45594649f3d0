"""Live review: what changed on a proposal's entries since a page was drawn, and who is
looking at which card (``memoryui.live_review``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .review import Proposal


class ReviewChange(models.Model):
    """One entry of a proposal changed (decided, undone, edited, commented): the review
    pages open on it fetch that card again. The highest id of a proposal is what its
    live endpoint's ETag stands on."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="live_changes")
    document = models.CharField(max_length=32, blank=True)
    key = models.CharField(max_length=600, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["proposal", "id"], name="review_change_since")]

    def __str__(self) -> str:
        return f"change of {self.key or 'the proposal'} in proposal {self.proposal_id}"


class ReviewPresence(models.Model):
    """Who has a proposal's review page open, and the card they are at (an element id
    of the page, empty when none): short-lived, refreshed by the page's polling and
    ignored once older than ``live_review.PRESENCE_SECONDS``."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    card = models.CharField(max_length=300, blank=True)
    seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["proposal", "user"], name="review_presence_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} at {self.card or 'the page'} of proposal {self.proposal_id}"
