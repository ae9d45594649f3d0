"""The review queue: reservations (one reviewer holds a proposal for a while),
assignment, comments."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import live_review, proposal_lock
from ..models import AuditEvent, Comment, Proposal

RESERVATION = timedelta(minutes=30)


def add_comment(
    proposal: Proposal,
    text: str,
    *,
    user: Any,
    document: str = "",
    key: str = "",
    line: int | None = None,
    line_text: str = "",
) -> Comment:
    """A comment on the proposal, on an entry (``key``), or on one line of an entry
    (``line``, from 1, and ``line_text``, what it read then)."""
    comment = Comment.objects.create(
        proposal=proposal,
        document=document,
        key=key,
        text=text.strip()[:10_000],
        author=user if getattr(user, "pk", None) else None,
        line=line,
        line_text=line_text,
    )
    AuditEvent.record(
        proposal.layout.workspace,
        "comment.add",
        user=user,
        layout=proposal.layout,
        target=f"proposal #{proposal.pk}"
        + (f" {key}" if key else "")
        + (f" line {line}" if line else ""),
    )
    return comment


def reserve(proposal: Proposal, user: Any) -> None:
    """Reserve a pending proposal for ``user`` for ``RESERVATION`` (again: extend it);
    meanwhile nobody else can decide on it. Raises ``DecisionRefused`` when it is
    decided or someone else holds it."""
    with proposal_lock.deciding(proposal, user):
        until = timezone.now() + RESERVATION
        Proposal.objects.filter(pk=proposal.pk).update(reserved_by=user, reserved_until=until)
        live_review.changed(proposal.pk)
        AuditEvent.record(
            proposal.layout.workspace,
            "proposal.reserve",
            user=user,
            layout=proposal.layout,
            target=f"proposal #{proposal.pk}",
            until=until.isoformat(),
        )
    proposal.reserved_by, proposal.reserved_until = user, until


def release(proposal: Proposal, user: Any, *, override: bool = False) -> bool:
    """End a reservation: the holder's own, or anyone's with ``override`` (workspace
    admins). False when there was none to end; raises ``HeldByOther`` when someone
    else holds it and ``override`` is off."""
    with transaction.atomic():
        locked = proposal_lock.read_locked(proposal)
        if not (locked.reserved_until and locked.reserved_until > timezone.now()):
            released = False
        elif proposal_lock.held_by_other(locked, user) and not override:
            raise proposal_lock.HeldByOther(locked)
        else:
            holder = str(locked.reserved_by)
            Proposal.objects.filter(pk=proposal.pk).update(reserved_by=None, reserved_until=None)
            live_review.changed(proposal.pk)
            AuditEvent.record(
                proposal.layout.workspace,
                "proposal.release",
                user=user,
                layout=proposal.layout,
                target=f"proposal #{proposal.pk}",
                holder=holder,
            )
            released = True
    proposal.reserved_by, proposal.reserved_until = None, None
    return released


def assign(proposal: Proposal, reviewer: Any, *, user: Any) -> None:
    Proposal.objects.filter(pk=proposal.pk).update(assigned_to=reviewer)
    AuditEvent.record(
        proposal.layout.workspace,
        "proposal.assign",
        user=user,
        layout=proposal.layout,
        target=f"proposal #{proposal.pk}",
        reviewer=getattr(reviewer, "username", None),
    )
