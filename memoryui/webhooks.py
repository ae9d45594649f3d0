"""Webhooks: a workspace's events POSTed as JSON to the receivers its admins register,
signed with HMAC-SHA256 over a timestamp and the body, delivered by a Celery task
(``memoryui.tasks.deliver_webhook``) that retries a failing receiver with exponential
backoff. Every attempt is logged.

Events: ``proposal.ready``, ``proposal.approved``, ``proposal.rejected``,
``writeback.done``, ``export.done``, ``run.failed``.

Deliveries go through ``outbound`` (no internal addresses, no redirects, a deadline, a
size cap) on their own Celery queue. The README has the receiver's verification recipe
(signature, timestamp, delivery id), which tests/test_webhooks.py runs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from generation import retry

from . import observability, task_queue
from .models import (
    AuditEvent,
    GenerationRun,
    Proposal,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    Workspace,
)

EVENTS = [
    ("proposal.ready", "A proposal is ready for review"),
    ("proposal.approved", "A proposal was approved"),
    ("proposal.rejected", "A proposal was rejected"),
    ("proposal.changes_requested", "Changes were requested on a proposal"),
    ("writeback.done", "A write-back wrote files"),
    ("export.done", "A snapshot was exported or downloaded"),
    ("run.failed", "A generation run failed"),
    ("memory.held_back", "Lint holds back memory from sandboxes"),
]
USER_AGENT = "memoryui-webhooks/1"


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(
    secret: str, timestamp: str, body: bytes, signed: str, *, tolerance: int = 300, now=None
) -> bool:
    """The recipe receivers follow: the signature matches and the timestamp is recent."""
    if not timestamp.isdigit():
        return False
    fresh = abs((now if now is not None else time.time()) - int(timestamp)) <= tolerance
    return hmac.compare_digest(signature(secret, timestamp, body), signed) and fresh


def backoff(attempt: int) -> float:
    """Seconds before the try after ``attempt`` (1-based): base, 2 base, 4 base, ..."""
    return retry.backoff_delay(attempt - 1, base=settings.MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS)


# --- sending ------------------------------------------------------------------------------


def emit(workspace: Workspace, event: str, data: dict[str, Any]) -> list[WebhookDelivery]:
    """Queue ``event`` for every active webhook of the workspace that wants it; the
    tasks are sent once the current transaction commits."""
    made = []
    for hook in Webhook.objects.filter(workspace=workspace, active=True):
        if hook.events and event not in hook.events:
            continue
        delivery = WebhookDelivery.objects.create(
            webhook=hook,
            event=event,
            payload={
                "event": event,
                "workspace": workspace.name,
                "created_at": timezone.now().isoformat(),
                "data": data,
            },
        )
        made.append(delivery)
        transaction.on_commit(partial(_queue, delivery.pk))
    return made


def _queue(delivery_id: int) -> None:
    task_queue.send("memoryui.webhooks.deliver_webhook", delivery_id)


def _send(url: str, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
    """POST once through the outbound client: the status, and what went wrong."""
    # The HTTP client (httpx2, httpcore2: 0.16 s of CPU) loads with the first delivery,
    # not in every command and process that starts Django (this module's signals do).
    import httpx2  # noqa: PLC0415 (deferred: the HTTP client loads with the first delivery)

    from . import outbound  # noqa: PLC0415 (deferred: the HTTP client loads with the first delivery)

    deadline = settings.MEMORYUI_WEBHOOK_DEADLINE_SECONDS
    try:
        answer = outbound.post(
            url,
            content=body,
            headers=headers,
            deadline_seconds=deadline,
            max_response_bytes=settings.MEMORYUI_WEBHOOK_MAX_RESPONSE_BYTES,
        )
    except outbound.Refused as exc:
        return None, f"refused to deliver: {exc}"
    except httpx2.TimeoutException:
        return None, f"the receiver did not answer within the {deadline:g} s deadline"
    except httpx2.HTTPError as exc:
        return None, f"could not reach the receiver ({exc.__class__.__name__}: {exc})"
    if 300 <= answer.status < 400:
        return answer.status, f"the receiver answered {answer.status}; redirects are not followed"
    if not 200 <= answer.status < 300:
        return answer.status, f"the receiver answered {answer.status}"
    return answer.status, ""


def attempt(delivery_id: int) -> float | None:
    """POST the delivery once and log the attempt. Returns the seconds to wait before
    the next try, or None when delivered, out of tries, or dropped: its webhook (or
    workspace) was deleted before or while it was sent, which ends it quietly, counted
    (``delivery`` ``dropped``), never as a task error."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None:
        _dropped(delivery_id)
        return None
    hook = delivery.webhook
    number = delivery.attempts.count() + 1
    body = json.dumps(delivery.payload, sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Memoryui-Event": delivery.event,
        "X-Memoryui-Delivery": str(delivery.pk),
        "X-Memoryui-Timestamp": timestamp,
        "X-Memoryui-Signature": signature(hook.secret, timestamp, body),
    }
    started = time.monotonic()
    status, error = _send(hook.url, body, headers)
    seconds = time.monotonic() - started
    ok = status is not None and 200 <= status < 300
    retry_in = None if ok or number >= settings.MEMORYUI_WEBHOOK_MAX_ATTEMPTS else backoff(number)
    new_status = (
        WebhookDelivery.Status.DELIVERED
        if ok
        else WebhookDelivery.Status.PENDING
        if retry_in is not None
        else WebhookDelivery.Status.FAILED
    )
    with transaction.atomic():
        # The delivery's row, locked: a delete (``delete_webhook``) waits for this attempt
        # and removes it too, or this waits for the delete and finds the delivery gone.
        if not WebhookDelivery.objects.select_for_update().filter(pk=delivery.pk).exists():
            _dropped(delivery_id)
            return None
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            status_code=status,
            error=error[:500],
            retry_in=retry_in,
        )
        WebhookDelivery.objects.filter(pk=delivery.pk).update(status=new_status)
    observability.log_event(
        "delivery",
        "delivery.attempt",
        logging.INFO if ok else logging.WARNING,
        delivery=delivery.pk,
        webhook=hook.pk,
        receiver=hook.origin,
        event_name=delivery.event,
        attempt=number,
        status=status,
        outcome=new_status,
        duration_ms=round(seconds * 1000),
        retry_in=retry_in,
        error=error or None,
    )
    observability.count("delivery", "ok" if ok else "failed", seconds)
    return retry_in


def _dropped(delivery_id: int) -> None:
    observability.log_event("delivery", "delivery.dropped", delivery=delivery_id)
    observability.count("delivery", "dropped")


def delete_webhook(hook: Webhook) -> None:
    """Delete a webhook, its deliveries and their attempts, also while a worker delivers
    one: the webhook's row and its deliveries' are locked first, so that an attempt being
    written ends before the delete (and goes with it) or finds its delivery gone."""
    with transaction.atomic():
        Webhook.objects.select_for_update().filter(pk=hook.pk).exists()
        list(WebhookDelivery.objects.select_for_update().filter(webhook=hook).values("pk"))
        hook.delete()


def redeliver(delivery: WebhookDelivery) -> None:
    """Send a delivery again (a new series of attempts, logged after the old ones)."""
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=WebhookDelivery.Status.PENDING)
    transaction.on_commit(lambda: _queue(delivery.pk))


# --- where events come from ------------------------------------------------------------------

AUDIT_EVENTS = {
    "proposal.approve": "proposal.approved",
    "proposal.reject": "proposal.rejected",
    "proposal.request_changes": "proposal.changes_requested",
    "writeback.write": "writeback.done",
    "export.snapshot": "export.done",
    "export.download": "export.done",
    "snapshot_store.held_back": "memory.held_back",
}


@receiver(post_save, sender=Proposal, dispatch_uid="webhooks-proposal-ready")
def _proposal_ready(sender, instance: Proposal, created: bool, **kwargs: Any) -> None:
    if created:
        layout = instance.layout
        emit(
            layout.workspace,
            "proposal.ready",
            {
                "proposal": instance.pk,
                "layout": layout.memories_dir,
                "run": instance.run_id,
                "origin": instance.origin,
                "snapshot_id": instance.snapshot_id or None,
            },
        )


@receiver(post_save, sender=AuditEvent, dispatch_uid="webhooks-audit")
def _audited(sender, instance: AuditEvent, created: bool, **kwargs: Any) -> None:
    event = AUDIT_EVENTS.get(instance.action)
    if created and event:
        emit(
            instance.workspace,
            event,
            {
                "actor": instance.actor,
                "layout": instance.layout.memories_dir if instance.layout is not None else None,
                "target": instance.target,
                "detail": instance.detail,
            },
        )


def run_failed(run_id: int) -> None:
    run = GenerationRun.objects.select_related("layout__workspace").get(pk=run_id)
    emit(
        run.layout.workspace,
        "run.failed",
        {"run": run.pk, "layout": run.layout.memories_dir, "error": run.error},
    )
