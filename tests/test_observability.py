"""Operators can see it work: key=value log lines per area with ids and durations,
/metrics for allowed callers (queue depths, operations, lease takeovers, states), and
errors to Sentry when SENTRY_DSN is set."""

import logging
import os
import subprocess
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis
from django.test import Client
from django.utils import timezone

from memoryui import observability, pipeline, webhooks
from memoryui.importer import import_workspace
from memoryui.models import OperationStat, PhaseOneJob, Webhook, WebhookDelivery
from tests.test_webhooks import Receiver

ROOT = Path(__file__).resolve().parent.parent


def lines(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def metrics(client: Client | None = None, **headers) -> str:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


@pytest.mark.django_db
def test_an_import_is_logged_with_its_counts_and_duration_and_counted(workspace_copy, caplog):
    caplog.set_level(logging.INFO, logger="memoryui.import")
    result = import_workspace(workspace_copy("small-a"), "logged")

    [line] = lines(caplog, "memoryui.import")
    assert line.startswith("event=import.done workspace=logged source=")
    assert f"files={result.files} " in line and "outcome=ok" in line
    assert "duration_ms=" in line
    assert OperationStat.objects.get(operation="import", outcome="ok").count == 1


@pytest.mark.django_db
def test_a_delivery_is_logged_with_its_ids_and_the_receivers_origin_only(layout, caplog, settings):
    settings.MEMORYUI_OUTBOUND_ALLOW = ["127.0.0.1"]
    caplog.set_level(logging.INFO, logger="memoryui.delivery")
    with Receiver([503]) as receiver:
        hook = Webhook.objects.create(
            workspace=layout.workspace, url=receiver.url + "?token=s3cret", secret="s"
        )
        delivery = WebhookDelivery.objects.create(webhook=hook, event="export.done", payload={})
        webhooks.attempt(delivery.pk)

    [line] = lines(caplog, "memoryui.delivery")
    assert f"delivery={delivery.pk} webhook={hook.pk}" in line
    assert f"receiver=http://127.0.0.1:{receiver.server.server_port} " in line
    assert "status=503" in line and "outcome=pending" in line and "duration_ms=" in line
    assert "s3cret" not in line and "/hook" not in line


@pytest.mark.django_db
def test_metrics_are_for_allowed_addresses_or_the_token_only(settings):
    settings.MEMORYUI_METRICS_TOKEN = "metrics-token-for-tests"
    outsider = Client(REMOTE_ADDR="203.0.113.9")

    assert "memoryui_operations_total" in metrics()  # loopback is allowed by default
    assert outsider.get("/metrics").status_code == 404
    wrong = outsider.get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 404
    assert "memoryui_queue_depth" in metrics(
        outsider, HTTP_AUTHORIZATION="Bearer metrics-token-for-tests"
    )
    settings.MEMORYUI_METRICS_ALLOW = ["203.0.113.0/24"]
    assert "memoryui_generation_runs" in metrics(outsider)
    settings.MEMORYUI_METRICS_ALLOW, settings.MEMORYUI_METRICS_TOKEN = [], ""
    assert Client().get("/metrics").status_code == 404


@pytest.mark.django_db
def test_behind_a_trusted_proxy_metrics_judge_the_client_the_proxy_saw(settings):
    # A proxy on the same host: every request reaches the server from loopback.
    settings.MEMORYUI_TRUSTED_PROXIES = 1
    proxy = Client(REMOTE_ADDR="127.0.0.1")

    outside = proxy.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert outside.status_code == 404
    # Whatever the outside client puts first in the header it sends.
    forged = proxy.get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1, 203.0.113.9")
    assert forged.status_code == 404
    assert "memoryui_operations_total" in metrics(proxy, HTTP_X_FORWARDED_FOR="127.0.0.1")
    settings.MEMORYUI_METRICS_ALLOW = ["203.0.113.0/24"]
    assert "memoryui_operations_total" in metrics(proxy, HTTP_X_FORWARDED_FOR="203.0.113.9")


@pytest.mark.django_db
def test_metrics_show_the_queue_depths_of_a_file_system_broker(settings, tmp_path):
    settings.CELERY_BROKER_URL = "filesystem://localhost/"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path)}
    for i in range(3):
        (tmp_path / f"{i}_abc.webhooks.msg").write_text("{}")
    (tmp_path / "9_def.celery.msg").write_text("{}")

    text = metrics()

    assert 'memoryui_queue_depth{queue="webhooks"} 3.0' in text
    assert 'memoryui_queue_depth{queue="celery"} 1.0' in text
    assert "memoryui_broker_up 1.0" in text


@pytest.mark.django_db
def test_metrics_read_the_queue_depths_of_a_redis_broker(broker, settings):
    settings.CELERY_BROKER_URL = broker
    client = redis.Redis.from_url(broker)
    client.lpush("webhooks", "a", "b", "c")
    client.lpush("celery", "d")

    # (a worker another test left stopping may still take one: compare with Redis itself)
    depths = observability.queue_depths()

    assert depths == {"celery": client.llen("celery"), "webhooks": client.llen("webhooks")}
    assert depths["webhooks"] >= 2


@pytest.mark.django_db
def test_a_job_taken_over_from_a_dead_worker_is_logged_and_counted(model, layout, caplog):
    caplog.set_level(logging.INFO)
    run = pipeline.start_run(layout, reextract=True)
    job = run.jobs.first()
    past = timezone.now() - timedelta(minutes=5)
    PhaseOneJob.objects.filter(pk=job.pk).update(
        status=PhaseOneJob.Status.RUNNING, lease_until=past, attempts=1
    )

    assert pipeline.process_job(job.pk) == run.pk

    assert lines(caplog, "memoryui.lease") == [f"event=takeover kind=phase_one job={job.pk}"]
    [phase] = [m for m in lines(caplog, "memoryui.phase") if "phase_one.done" in m]
    assert f"job={job.pk} run={run.pk} outcome=ok duration_ms=" in phase
    assert "event=run.start" in lines(caplog, "memoryui.run")[0]
    text = metrics()
    assert 'memoryui_lease_takeovers_total{kind="phase_one"} 1.0' in text
    assert 'memoryui_lease_takeovers_total{kind="phase_two"} 0.0' in text
    assert 'memoryui_operations_total{operation="phase_one",outcome="ok"} 1.0' in text
    assert 'memoryui_phase_one_jobs{status="done"} 1.0' in text


def test_errors_go_to_sentry_when_a_dsn_is_set(tmp_path):
    received: list[str] = []

    class Sentry(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sentry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MEMORYUI_", "SENTRY_"))},
        "MEMORYUI_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "memoryui.settings",
        "SENTRY_DSN": f"http://publickey@127.0.0.1:{server.server_port}/42",
    }
    script = (
        "import django, sentry_sdk; django.setup(); "
        "sentry_sdk.capture_exception(RuntimeError('boom')); sentry_sdk.flush(5)"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=60
        )
    finally:
        server.shutdown()
        server.server_close()

    assert done.returncode == 0, done.stderr
    assert received and received[0].startswith("/api/42/envelope/")
