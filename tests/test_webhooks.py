"""Webhooks: signed deliveries a receiver verifies with the documented recipe, the
workspace's events, retries with exponential backoff by a real Celery worker, and the
delivery log with redelivery."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from memoryui import curation, pipeline, tasks, webhooks, writeback
from memoryui.celery import app
from memoryui.importer import import_workspace
from memoryui.models import (
    Layout,
    Membership,
    MemoryVersion,
    OperationStat,
    Proposal,
    Role,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from memoryui.snapshots import export_snapshot
from tests.factories import make_user
from tests.test_celery_worker import start_worker, stop, wait_for
from tests.test_curation import append_to_memory_md


class Receiver:
    """A webhook receiver on 127.0.0.1 answering the given statuses in turn (the last
    one from then on), recording each request."""

    def __init__(self, statuses=(200,), delay: float = 0.0) -> None:
        self.statuses = list(statuses)
        self.requests: list[tuple[float, dict[str, str], bytes]] = []
        self.arrived = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.arrived:
                    outer.requests.append((time.monotonic(), dict(self.headers), body))
                    n = len(outer.requests)
                    outer.arrived.notify_all()
                status = outer.statuses[min(n, len(outer.statuses)) - 1]
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def wait(self, count: int, timeout: float = 60) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.requests) >= count, timeout), (
                f"{len(self.requests)} of {count} requests arrived"
            )


def documented_verify(secret: str, headers, body: bytes) -> bool:
    """The recipe from the README (tests/test_outbound.py runs it as written)."""
    from tests.test_outbound import readme_verifier  # noqa: PLC0415 (cycle: it imports this module)

    try:
        return bool(readme_verifier()["verify"](secret, headers, body, set()))
    except Exception:
        return False


@pytest.fixture(autouse=True)
def local_receivers(settings, monkeypatch):
    """The receivers here listen on 127.0.0.1, which webhooks refuse unless allowed
    (also in the workers these tests start)."""
    settings.MEMORYUI_OUTBOUND_ALLOW = ["127.0.0.1"]
    monkeypatch.setenv("MEMORYUI_OUTBOUND_ALLOW", "127.0.0.1")


def hook(layout, url, events=()) -> Webhook:
    return Webhook.objects.create(
        workspace=layout.workspace, url=url, events=list(events), secret=webhooks.new_secret()
    )


def test_a_delivery_is_signed_so_the_documented_recipe_verifies_it(layout):
    with Receiver() as receiver:
        target = hook(layout, receiver.url)
        delivery = webhooks.emit(layout.workspace, "export.done", {"snapshot_id": "s1"})[0]

        assert webhooks.attempt(delivery.pk) is None
        _, headers, body = receiver.requests[0]

    assert documented_verify(target.secret, headers, body)
    assert json.loads(body)["event"] == "export.done"
    assert json.loads(body)["data"] == {"snapshot_id": "s1"}
    assert headers["X-Memoryui-Event"] == "export.done"
    assert not documented_verify(target.secret, headers, body.replace(b"s1", b"s2"))
    assert not documented_verify("whsec_other", headers, body)
    old = {**headers, "X-Memoryui-Timestamp": str(int(time.time()) - 3600)}
    assert not documented_verify(target.secret, old, body)  # a replay, even re-signed:
    old["X-Memoryui-Signature"] = webhooks.signature(
        target.secret, old["X-Memoryui-Timestamp"], body
    )
    assert not documented_verify(target.secret, old, body)
    assert not webhooks.verify(
        target.secret, old["X-Memoryui-Timestamp"], body, old["X-Memoryui-Signature"]
    )
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == WebhookDelivery.Status.DELIVERED


def test_the_workspaces_events_are_queued_for_the_hooks_that_want_them(
    model, layout, tmp_path, django_capture_on_commit_callbacks
):
    everything = hook(layout, "http://127.0.0.1:9/all")
    approvals = hook(layout, "http://127.0.0.1:9/approvals", ["proposal.approved"])
    admin = make_user("ada", staff=True)

    with django_capture_on_commit_callbacks(execute=False) as sent:
        run = pipeline.start_run(layout, reextract=True)
        pipeline.run_inline(run.pk, threads=1, sleep=lambda s: None)
        curation.approve(Proposal.objects.get(run=run), user=admin)
        second = pipeline.start_run(layout, reextract=True)
        # Phase one reuses every result: the script is phase two's.
        model.script(*append_to_memory_md("# Task Group: second\n\nscope: a second look\n"))
        pipeline.run_inline(second.pk, threads=1, sleep=lambda s: None)
        curation.reject_proposal(Proposal.objects.get(run=second), user=admin)
        writeback.write_back(layout, user=admin)
        export_snapshot(layout.workspace, snapshot_id="e1", base_path=tmp_path, user=admin)
        failing = pipeline.start_run(layout, reextract=True)
        pipeline.fail_run(failing.pk, "the model went away")

    events = list(everything.deliveries.order_by("pk").values_list("event", flat=True))
    assert events == [
        "proposal.ready",
        "proposal.approved",
        "proposal.ready",
        "proposal.rejected",
        "writeback.done",
        "export.done",
        "run.failed",
    ]
    assert list(approvals.deliveries.values_list("event", flat=True)) == ["proposal.approved"]
    assert len(sent) >= 8  # one task per delivery, sent once the change commits
    failed = everything.deliveries.get(event="run.failed").payload
    assert failed["data"]["error"] == "the model went away" and failed["workspace"] == "a"
    assert MemoryVersion.objects.filter(layout=layout).exists()


@pytest.mark.django_db(transaction=True)
def test_a_failing_receiver_is_retried_with_backoff_by_a_worker_and_the_log_shows_each_try(
    broker, workspace_copy, tmp_path, monkeypatch
):
    import_workspace(workspace_copy("small-b"), "b")
    admin = make_user("ada", staff=True)
    monkeypatch.setenv("MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS", "0.5")
    monkeypatch.setenv("MEMORYUI_WEBHOOK_MAX_ATTEMPTS", "5")
    with Receiver([500, 503, 200]) as receiver:
        target = Webhook.objects.create(
            workspace_id=Layout.objects.filter(workspace__name="b").first().workspace_id,
            url=receiver.url,
            secret=webhooks.new_secret(),
        )
        delivery = WebhookDelivery.objects.create(
            webhook=target, event="run.failed", payload={"event": "run.failed"}
        )
        worker = start_worker(broker, "", "hooks", tmp_path, beat=False)
        try:
            with app.connection_for_write(broker) as conn:
                tasks.deliver_webhook.apply_async((delivery.pk,), connection=conn)
            receiver.wait(3)
            wait_for(
                lambda: WebhookDelivery.objects.get(pk=delivery.pk).status == "delivered",
                30,
                "the delivery to be marked delivered",
                worker,
            )
        finally:
            log = stop(worker)
        times = [t for t, _, _ in receiver.requests]

    assert len(receiver.requests) == 3, log
    assert times[1] - times[0] >= 0.5 and times[2] - times[1] >= 1.0  # 0.5 s, then 1 s
    attempts = list(delivery.attempts.order_by("number"))
    assert [(a.number, a.status_code, a.retry_in) for a in attempts] == [
        (1, 500, 0.5),
        (2, 503, 1.0),
        (3, 200, None),
    ]
    assert all(
        documented_verify(target.secret, headers, body) for _, headers, body in receiver.requests
    )
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("memoryui:webhook_list", args=["b"])).content.decode()
    assert page.count("HTTP 500") == 1 and "HTTP 503" in page and "HTTP 200" in page
    assert "next try in 0.5 s" in page and "next try in 1.0 s" in page
    assert "Delivered" in page


def test_redelivery_from_the_log_sends_again_and_logs_the_new_attempt(
    layout, eager, settings, django_capture_on_commit_callbacks
):
    admin = make_user("ada")
    Membership.objects.create(workspace=layout.workspace, user=admin, role=Role.ADMIN)
    viewer = make_user("vic")
    Membership.objects.create(workspace=layout.workspace, user=viewer, role=Role.VIEWER)
    settings.MEMORYUI_WEBHOOK_MAX_ATTEMPTS = 1
    with Receiver([500, 200]) as receiver:
        target = hook(layout, receiver.url)
        delivery = WebhookDelivery.objects.create(
            webhook=target, event="export.done", payload={"event": "export.done"}
        )
        webhooks.attempt(delivery.pk)
        assert WebhookDelivery.objects.get(pk=delivery.pk).status == "failed"
        admin_client, viewer_client = Client(), Client()
        admin_client.force_login(admin)
        viewer_client.force_login(viewer)
        url = reverse("memoryui:webhook_redeliver", args=["a", delivery.pk])

        refused = viewer_client.post(url)
        log_for_viewer = viewer_client.get(reverse("memoryui:webhook_list", args=["a"]))
        settings.MEMORYUI_WEBHOOK_MAX_ATTEMPTS = 5
        with django_capture_on_commit_callbacks(execute=True):
            response = admin_client.post(url)
        receiver.wait(2)

    assert refused.status_code == 403 and log_for_viewer.status_code == 403
    assert response.status_code == 302
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "delivered"
    assert list(delivery.attempts.values_list("number", "status_code")) == [(1, 500), (2, 200)]


def test_an_admin_adds_a_webhook_and_sees_its_secret_once(layout, monkeypatch):
    public = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 443))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: public)  # no DNS here
    admin = make_user("ada", staff=True)
    client = Client()
    client.force_login(admin)
    url = reverse("memoryui:webhook_list", args=["a"])

    added = client.post(
        url, {"url": "https://hooks.example.com/memoryui", "events": ["run.failed"]}
    )
    bad = client.post(url, {"url": "not a url", "events": ["nope"]})

    created = Webhook.objects.get()
    assert created.secret in added.content.decode() and created.events == ["run.failed"]
    assert created.secret not in client.get(url).content.decode()
    assert bad.status_code == 400 and Webhook.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_fifty_deletes_racing_deliveries_end_quietly_and_count_the_dropped_ones(layout):
    """An admin deletes a webhook while a worker delivers to it: before the worker reads
    the delivery, while the receiver answers (20 ms), or as the attempt is written. No
    5xx, no task error; a delivery whose webhook went is dropped and counted."""
    admin = make_user("admin", staff=True)
    client = Client()
    client.force_login(admin)
    errors: list[BaseException] = []
    results: list[float | None] = []

    def deliver(delivery_id: int) -> None:
        try:
            results.append(tasks.deliver_webhook.apply(args=(delivery_id,), throw=True).result)
        except BaseException as exc:  # noqa: BLE001 (any task error fails the test)
            errors.append(exc)
        finally:
            connection.close()

    webhooks._send("http://127.0.0.1:9/", b"", {})  # the HTTP client loaded, once
    with Receiver(delay=0.02) as receiver:
        for n in range(50):
            target = hook(layout, receiver.url)
            delivery = webhooks.emit(layout.workspace, "export.done", {"n": n})[0]
            worker = threading.Thread(target=deliver, args=(delivery.pk,))
            worker.start()
            time.sleep((n % 10) * 0.005)  # 0 to 45 ms: before, during and after the POST
            response = client.post(
                reverse("memoryui:webhook_delete", args=[layout.workspace.name, target.pk])
            )
            worker.join(30)
            assert response.status_code == 302, (n, response.status_code)
            assert not errors, (n, errors)
    assert not Webhook.objects.exists() and not WebhookAttempt.objects.exists()
    assert len(results) == 50
    dropped = OperationStat.objects.filter(operation="delivery", outcome="dropped").first()
    # The ones deleted before their attempt was written were dropped; the others were
    # delivered, their attempt deleted with the webhook.
    assert dropped is not None and 0 < dropped.count <= 50
