"""The pending proposal's lock: the one step every decision on a proposal starts with,
for document entries and skill files alike (``curation``, ``skills``).

A decision (an entry's, a skill file's, approve, reject, reserve ...) reads the proposal
again under a row lock and checks it there: of two decisions at once exactly one finds
the proposal pending, the other is refused with what happened instead
(``DecisionRefused``). A reservation (``curation.reserve``) holds the proposal for one
reviewer: meanwhile the others' decisions are refused (``HeldByOther``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import transaction
from django.utils import timezone

from .models import Proposal


class DecisionRefused(ValueError):
    """A proposal decision that cannot be made: the proposal was decided meanwhile, or
    another reviewer holds it. ``proposal`` is as read under the lock, so it says who
    did what, when."""

    def __init__(self, proposal: Proposal, message: str) -> None:
        super().__init__(message)
        self.proposal = proposal


class AlreadyDecided(DecisionRefused):
    def __init__(self, proposal: Proposal) -> None:
        when = timezone.localtime(proposal.decided_at) if proposal.decided_at else None
        super().__init__(
            proposal,
            f"Proposal #{proposal.pk} was already {proposal.get_status_display().lower()}"
            f" by {proposal.decided_by or 'someone'}"
            + (f" at {when:%Y-%m-%d %H:%M:%S %Z}" if when else "")
            + ".",
        )


class HeldByOther(DecisionRefused):
    def __init__(self, proposal: Proposal) -> None:
        until = timezone.localtime(proposal.reserved_until) if proposal.reserved_until else None
        super().__init__(
            proposal,
            f"{proposal.reserved_by} is reviewing this proposal right now"
            + (f" (reserved until {until:%H:%M %Z})" if until else "")
            + ".",
        )


# What the lock reads: enough to say who decided the proposal or holds it.
_LOCKED_FIELDS = ("status", "decided_by", "decided_at", "reserved_by", "reserved_until")


def read_locked(proposal: Proposal) -> Proposal:
    """The proposal read again under a row lock, held until the caller's transaction
    ends: its status and reservation as they are now."""
    return Proposal.objects.select_for_update().only(*_LOCKED_FIELDS).get(pk=proposal.pk)


def lock_pending(proposal: Proposal, user: Any) -> Proposal:
    """Read the proposal again under a row lock (``read_locked``) and refuse unless it
    is pending and not reserved by someone else. Every decision goes through here, so
    of two at once the second waits for the first and then sees what it did."""
    locked = read_locked(proposal)
    if locked.status != Proposal.Status.PENDING:
        raise AlreadyDecided(locked)
    if held_by_other(locked, user):
        raise HeldByOther(locked)
    return locked


def held_by_other(proposal: Proposal, user: Any) -> bool:
    return bool(
        proposal.reserved_by_id
        and proposal.reserved_by_id != getattr(user, "pk", None)
        and proposal.reserved_until
        and proposal.reserved_until > timezone.now()
    )


def held_by(proposal: Proposal, user: Any) -> bool:
    return bool(
        proposal.reserved_by_id
        and proposal.reserved_by_id == getattr(user, "pk", None)
        and proposal.reserved_until
        and proposal.reserved_until > timezone.now()
    )


@contextmanager
def deciding(proposal: Proposal, user: Any) -> Iterator[Proposal]:
    """A decision by ``user`` on ``proposal``: a transaction holding the proposal's row
    lock (``lock_pending``; yields the proposal as read under it). Raises
    ``DecisionRefused`` when the proposal was decided meanwhile or another reviewer holds
    it; what the block raises undoes the decision."""
    with transaction.atomic():
        yield lock_pending(proposal, user)
