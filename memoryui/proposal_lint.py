"""A new proposal's texts are linted by a worker once it is saved
(``memoryui.tasks.lint_proposal``), so that its first review, in any web process, reads
the findings the write-back keeps in the database instead of scanning a large
``MEMORY.md`` while the reviewer waits (``writeback.lint_proposal``); where the cache
is shared, the same task finds the proposal's duplicates and keeps them there. Its
signal receiver loads with Django (``apps``): this module stays light."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from . import task_queue
from .models import Proposal


@receiver(post_save, sender=Proposal, dispatch_uid="proposal-lint-ahead")
def _proposal_made(sender: Any, instance: Proposal, created: bool, **kwargs: Any) -> None:
    if created:
        transaction.on_commit(partial(lint_later, instance.pk))


def lint_later(proposal_id: int) -> None:
    """Best effort: without a broker the review page lints the proposal itself."""
    task_queue.send_best_effort(
        "memoryui.tasks.lint_proposal",
        proposal_id,
        what=f"the lint of proposal {proposal_id} ahead of its review",
    )
