"""Live review: two people on one proposal's review page see each other's decisions,
edits, comments and whereabouts without a reload.

Every change to an entry of a proposal (a decision made, changed or undone, a comment,
a pin) leaves a ``ReviewChange`` row, written by the signal receivers below in the same
transaction as the change; a page polls ``state`` for the rows after the last one it
saw. ``ReviewPresence`` keeps, per person and proposal, the card they are at; the poll
that reports it refreshes it, at most every ``PRESENCE_REFRESH_SECONDS``. Whatever
changes what a page shows also replaces the proposal's stamp in the cache
(``memoryui.live_polls``), on which an unchanged poll is answered without the
database."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from . import live_polls
from .models import (
    Comment,
    EntryDecision,
    Layout,
    Pin,
    Proposal,
    ReviewChange,
    ReviewPresence,
)

# Somebody is "here" while their page polls: it polls every second or two and
# refreshes its presence every few seconds, so a closed page drops out after about
# PRESENCE_SECONDS.
PRESENCE_SECONDS = 12
# A page's poll takes the full path (which refreshes its presence) once its poll token
# is this old, so about every 5 s: each such poll refreshes it, well within
# PRESENCE_SECONDS.
PRESENCE_REFRESH_SECONDS = live_polls.TOKEN_SECONDS
# More changes than this since a page was drawn: the page says to reload instead.
MAX_CHANGES = 100
# A decided proposal's change rows and anyone's presence older than this go (``prune``).
PRUNE_AFTER = timedelta(hours=1)


@dataclass
class Person:
    name: str
    card: str


@dataclass
class LiveState:
    """What a review page needs to catch up: ``etag`` names all of it."""

    cursor: int
    status: str
    status_label: str
    reserved_by: str
    people: list[Person]
    # Each changed entry and how many changes it had (in the order they came).
    changes: dict[tuple[str, str], int] = field(default_factory=dict)
    too_many: bool = False

    @property
    def tag(self) -> str:
        """What this person's page shows, in a word (the ETag's part after the stamp)."""
        people = ";".join(f"{p.name}@{p.card}" for p in self.people)
        seen = f"{self.status}|{self.reserved_by}|{people}"
        return f"{self.cursor}-{hashlib.sha1(seen.encode()).hexdigest()[:16]}"


def state(
    proposal_pk: int,
    layout: Layout,
    user: Any,
    *,
    card: str | None,
    since: int | None = None,
    since_time: datetime | None = None,
    now: datetime | None = None,
) -> LiveState | None:
    """The proposal's live state as ``user`` sees it (None: no such proposal in the
    layout): the last change's id, the proposal's status and reservation, the other
    people on the page and their cards, and, when ``since`` (a change id) or
    ``since_time`` is given, the entries changed after it. Records that ``user`` is
    at ``card`` (None: leaves their presence alone). Two queries (three with changes to
    list), and a write every few seconds."""
    now = now or timezone.now()
    last = ReviewChange.objects.filter(proposal=OuterRef("pk")).order_by("-id").values("id")[:1]
    row = (
        Proposal.objects.filter(pk=proposal_pk, layout=layout)
        .annotate(last_change=Subquery(last))
        .values("status", "reserved_by__username", "reserved_until", "last_change")
        .first()
    )
    if row is None:
        return None
    reserved = row["reserved_by__username"] if (row["reserved_until"] or now) > now else ""
    people: list[Person] = []
    mine: Mapping[str, Any] | None = None
    for presence in (
        ReviewPresence.objects.filter(proposal_id=proposal_pk)
        .order_by("user__username")
        .values("user_id", "user__username", "card", "seen_at")
    ):
        if presence["user_id"] == user.pk:
            mine = presence
        elif presence["seen_at"] >= now - timedelta(seconds=PRESENCE_SECONDS):
            people.append(Person(presence["user__username"], presence["card"]))
    if card is not None:
        _note_presence(proposal_pk, user, card, mine, now)
    live = LiveState(
        cursor=row["last_change"] or 0,
        status=row["status"],
        status_label=Proposal.Status(row["status"]).label,
        reserved_by=reserved or "",
        people=people,
    )
    if (since is not None and live.cursor > since) or (since is None and since_time is not None):
        changed = ReviewChange.objects.filter(proposal_id=proposal_pk)
        changed = (
            changed.filter(id__gt=since)
            if since is not None
            else changed.filter(at__gte=since_time)
        )
        rows = list(changed.order_by("id").values_list("document", "key")[: MAX_CHANGES + 1])
        live.too_many = len(rows) > MAX_CHANGES
        live.changes = dict(Counter(r for r in rows[:MAX_CHANGES] if r[1]))
    return live


def _note_presence(
    proposal_pk: int, user: Any, card: str, mine: Mapping[str, Any] | None, now: datetime
) -> None:
    """Refresh ``user``'s presence when it moved to another card or is getting old; when
    the others' pages show it differently now (another card, back after expiring),
    replace the proposal's stamp."""
    if (
        mine is None
        or mine["card"] != card
        or mine["seen_at"] < now - timedelta(seconds=PRESENCE_SECONDS)
    ):
        changed(proposal_pk)
    if (
        mine is not None
        and mine["card"] == card
        and mine["seen_at"] >= now - timedelta(seconds=PRESENCE_REFRESH_SECONDS)
    ):
        return
    if mine is not None:
        ReviewPresence.objects.filter(proposal_id=proposal_pk, user=user).update(
            card=card, seen_at=now
        )
    else:
        ReviewPresence.objects.bulk_create(
            [ReviewPresence(proposal_id=proposal_pk, user=user, card=card, seen_at=now)],
            ignore_conflicts=True,  # the same person's other tab was first
        )


def prune(now: datetime | None = None) -> tuple[int, int]:
    """Drop the change rows of decided proposals (their pages say to reload, and a page
    drawn now has no change to catch up on) and presences, older than ``PRUNE_AFTER``:
    how many of each. A pending proposal keeps its rows, which an open page may still
    need (one an entry change, fewer than its audit events)."""
    cutoff = (now or timezone.now()) - PRUNE_AFTER
    changes, _ = (
        ReviewChange.objects.filter(at__lt=cutoff)
        .exclude(proposal__status=Proposal.Status.PENDING)
        .delete()
    )
    presences, _ = ReviewPresence.objects.filter(seen_at__lt=cutoff).delete()
    return changes, presences


def leave(proposal_pk: int, layout: Layout, user: Any) -> None:
    """``user`` closed the proposal's page: their presence goes now."""
    gone, _ = ReviewPresence.objects.filter(
        proposal_id=proposal_pk, proposal__layout=layout, user=user
    ).delete()
    if gone:
        changed(proposal_pk)


def changed(proposal_id: int) -> None:
    """Something the proposal's review pages show changed (an entry, its status or
    reservation, who is where): their next poll takes the full path. The stamp is
    replaced now and again once the transaction commits, so that a poll that read the
    new stamp before the change was visible does not keep its old answer."""
    live_polls.bump(proposal_id)
    transaction.on_commit(lambda: live_polls.bump(proposal_id))


def note_change(proposal_id: int, document: str = "", key: str = "") -> None:
    """An entry of the proposal changed (``key`` empty: the proposal as a whole)."""
    ReviewChange.objects.create(proposal_id=proposal_id, document=document, key=key)
    changed(proposal_id)


def _deleted_with_another(sender: type, kwargs: dict[str, Any]) -> bool:
    """A row deleted because its proposal, layout or workspace is (no change to show,
    and a change row written now would point at a proposal about to go)."""
    if "origin" not in kwargs:  # post_save
        return False
    origin = kwargs["origin"]
    return (origin.model if isinstance(origin, QuerySet) else type(origin)) is not sender


@receiver(post_save, sender=EntryDecision)
@receiver(post_delete, sender=EntryDecision)
def _decision_changed(sender: type, instance: EntryDecision, **kwargs: Any) -> None:
    if not _deleted_with_another(sender, kwargs):
        note_change(instance.proposal_id, instance.document, instance.key)


@receiver(post_save, sender=Comment)
@receiver(post_delete, sender=Comment)
def _comment_changed(sender: type, instance: Comment, **kwargs: Any) -> None:
    if not _deleted_with_another(sender, kwargs):
        note_change(instance.proposal_id, instance.document, instance.key)


@receiver(post_save, sender=Pin)
@receiver(post_delete, sender=Pin)
def _pin_changed(sender: type, instance: Pin, **kwargs: Any) -> None:
    """A pin shows on the entry's card in every pending proposal of the layout."""
    if _deleted_with_another(sender, kwargs):
        return
    pending = list(
        Proposal.objects.filter(
            layout_id=instance.layout_id, status=Proposal.Status.PENDING
        ).values_list("pk", flat=True)
    )
    ReviewChange.objects.bulk_create(
        [
            ReviewChange(proposal_id=pk, document=instance.document, key=instance.key)
            for pk in pending
        ]
    )
    for pk in pending:
        changed(pk)
