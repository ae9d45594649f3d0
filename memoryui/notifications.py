"""Mail for people about what waits for them: a member watches a workspace (its
*Notifications* page) and gets, for each event or in one daily digest, "a proposal awaits
review", "an agent's change is held back from sandboxes", "a run failed".

An event makes one ``Notification`` per watcher inside the transaction that caused it;
the mail is sent by the worker once that commits (``tasks.send_notification``, or beat's
``tasks.send_digests`` for the daily ones), never in the request: a mail server that is
down makes the task try again later (base, 2 base, 4 base ... seconds) and never holds up
or undoes the decision. Each mail links to the page and carries a one-click unsubscribe
(RFC 8058: ``List-Unsubscribe`` with a signed link, ``List-Unsubscribe-Post``), which
ends that watch; the link works once.
"""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Iterable
from functools import partial
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone

from generation import retry

from . import task_queue
from .models import AuditEvent, GenerationRun, Notification, Proposal, Role, Watch, Workspace
from .roles import has_role

log = logging.getLogger("memoryui.notifications")

EVENTS = {
    "proposal.ready": "A proposal awaits review",
    "memory.held_back": "An agent's change is held back from sandboxes",
    "run.failed": "A generation run failed",
}
UNSUBSCRIBE_SALT = "memoryui.notifications.unsubscribe"


# --- events -----------------------------------------------------------------------------------


def notify(workspace: Workspace, event: str, text: str, path: str) -> list[Notification]:
    """One notification per watcher of the workspace; the ones mailed alone are queued
    for the worker once the current transaction commits."""
    made = []
    for watch in Watch.objects.filter(workspace=workspace).select_related("user"):
        # Someone who may no longer see the workspace (removed, or deactivated) is told
        # nothing about it; the watch stays, for when access comes back.
        if not watch.user.is_active or not watch.user.email:
            continue
        if not has_role(watch.user, workspace, Role.VIEWER):
            continue
        made.append(
            Notification.objects.create(
                watch=watch,
                event=event,
                text=text[:500],
                path=path[:500],
                digest=watch.mode == Watch.Mode.DAILY,
            )
        )
    for notification in made:
        if not notification.digest:
            transaction.on_commit(partial(_queue, notification.pk))
    return made


def _queue(notification_id: int) -> None:
    task_queue.send("memoryui.tasks.send_notification", notification_id)


@receiver(post_save, sender=Proposal, dispatch_uid="notifications-proposal-ready")
def _proposal_ready(sender: Any, instance: Proposal, created: bool, **kwargs: Any) -> None:
    if not created:
        return
    layout = instance.layout
    notify(
        layout.workspace,
        "proposal.ready",
        f"Proposal #{instance.pk} for {layout.memories_dir} awaits review.",
        reverse(
            "memoryui:proposal_review",
            kwargs={"name": layout.workspace.name, "layout_pk": layout.pk, "pk": instance.pk},
        ),
    )


@receiver(post_save, sender=AuditEvent, dispatch_uid="notifications-held-back")
def _held_back(sender: Any, instance: AuditEvent, created: bool, **kwargs: Any) -> None:
    if not created or instance.action != "snapshot_store.held_back":
        return
    workspace, layout = instance.workspace, instance.layout
    where = f" in {layout.memories_dir}" if layout is not None else ""
    notify(
        workspace,
        "memory.held_back",
        f"An agent's change{where} is held back from sandboxes until someone decides"
        f"{': ' + instance.target if instance.target else ''}.",
        reverse("memoryui:layout_detail", kwargs={"name": workspace.name, "layout_pk": layout.pk})
        if layout is not None
        else reverse("memoryui:workspace_detail", kwargs={"name": workspace.name}),
    )


def run_failed(run_id: int) -> None:
    run = GenerationRun.objects.select_related("layout__workspace").get(pk=run_id)
    layout = run.layout
    notify(
        layout.workspace,
        "run.failed",
        f"Generation run #{run.pk} for {layout.memories_dir} failed: {run.error[:200]}",
        reverse(
            "memoryui:run_detail",
            kwargs={"name": layout.workspace.name, "layout_pk": layout.pk, "run_pk": run.pk},
        ),
    )


# --- unsubscribing ----------------------------------------------------------------------------


def unsubscribe_token(watch: Watch) -> str:
    return signing.dumps({"w": watch.pk, "u": watch.user_id}, salt=UNSUBSCRIBE_SALT)


def unsubscribe_url(watch: Watch) -> str:
    path = reverse("notifications_unsubscribe", kwargs={"token": unsubscribe_token(watch)})
    return settings.MEMORYUI_BASE_URL + path


def unsubscribe(token: str) -> Watch | None:
    """End the watch the token names. None when it was already ended (the link works
    once); ``signing.BadSignature`` when the token is not one memoryui signed."""
    data = signing.loads(token, salt=UNSUBSCRIBE_SALT)
    with transaction.atomic():
        watch = (
            Watch.objects.select_for_update()
            .select_related("workspace", "user")
            .filter(pk=data["w"], user_id=data["u"])
            .first()
        )
        if watch is None:
            return None
        watch.delete()
        AuditEvent.record(
            watch.workspace,
            "notifications.unsubscribe",
            user=watch.user,
            target=watch.user.get_username(),
        )
    return watch


# --- sending ----------------------------------------------------------------------------------


def backoff(attempt: int) -> float:
    """Seconds before the try after ``attempt`` (1-based)."""
    return retry.backoff_delay(attempt - 1, base=settings.MEMORYUI_NOTIFICATION_RETRY_BASE_SECONDS)


def _message(watch: Watch, subject: str, lines: list[str]) -> EmailMessage:
    url = unsubscribe_url(watch)
    body = "\n".join(
        [
            *lines,
            "",
            f"You get this because you watch the workspace {watch.workspace.name} "
            f"({watch.get_mode_display().lower()}).",
            f"Stop: {url}",
        ]
    )
    return EmailMessage(
        subject=f"[memoryui] {watch.workspace.name}: {subject}",
        body=body,
        to=[watch.user.email],
        headers={
            "List-Unsubscribe": f"<{url}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            "Auto-Submitted": "auto-generated",
        },
    )


def _send(messages: list[EmailMessage]) -> str:
    """Send; what went wrong, or "" when the server took them."""
    try:
        connection = get_connection(timeout=settings.MEMORYUI_NOTIFICATION_SMTP_TIMEOUT_SECONDS)
        connection.send_messages(messages)
    except (smtplib.SMTPException, OSError) as exc:
        return f"{exc.__class__.__name__}: {exc}"[:500]
    return ""


def _record(notifications: Iterable[Notification], error: str) -> float | None:
    """Note the try on each; the seconds before the next one, or None (sent, or out of
    tries)."""
    notifications = list(notifications)
    attempts = max(n.attempts for n in notifications) + 1
    sent_at = None if error else timezone.now()
    Notification.objects.filter(pk__in=[n.pk for n in notifications]).update(
        attempts=attempts, error=error, sent_at=sent_at
    )
    if not error:
        return None
    log.warning("notification.failed attempt=%s error=%r", attempts, error)
    if attempts >= settings.MEMORYUI_NOTIFICATION_MAX_ATTEMPTS:
        return None
    return backoff(attempts)


def send_one(notification_id: int) -> float | None:
    """Mail one notification (once: a sent one is not sent again). The seconds before the
    next try when the mail server did not take it."""
    notification = (
        Notification.objects.select_related("watch__user", "watch__workspace")
        .filter(pk=notification_id, digest=False, sent_at__isnull=True)
        .first()
    )
    if notification is None:  # sent already, unsubscribed meanwhile, or for the digest
        return None
    link = settings.MEMORYUI_BASE_URL + notification.path
    message = _message(
        notification.watch,
        EVENTS.get(notification.event, notification.event),
        [notification.text, "", f"Open: {link}"],
    )
    return _record([notification], _send([message]))


def send_digests() -> int:
    """One mail per daily watch with unsent notifications, listing them all (beat, once
    a day). A watch whose mail the server did not take is tried at the next run."""
    pending = list(
        Notification.objects.filter(digest=True, sent_at__isnull=True)
        .select_related("watch__user", "watch__workspace")
        .order_by("watch_id", "created_at", "pk")
    )
    by_watch: dict[int, list[Notification]] = {}
    for notification in pending:
        by_watch.setdefault(notification.watch_id, []).append(notification)
    sent = 0
    for notifications in by_watch.values():
        watch = notifications[0].watch
        lines = [
            f"{len(notifications)} event{'s' if len(notifications) != 1 else ''} since the "
            "last digest:",
            "",
        ]
        for n in notifications:
            lines += [
                f"- {n.created_at:%Y-%m-%d %H:%M} UTC: {n.text}",
                f"  {settings.MEMORYUI_BASE_URL}{n.path}",
            ]
        error = _send([_message(watch, "daily digest", lines)])
        _record(notifications, error)
        sent += not error
    return sent
