"""/healthz for load balancers: no login, no host check, no HTTPS redirect, and only one
boolean per check."""

from datetime import timedelta

import pytest
from django.utils import timezone

from memoryui.celery import app
from memoryui.models import WorkerHeartbeat
from memoryui.tasks import heartbeat

pytestmark = pytest.mark.django_db


def test_healthz_is_ok_without_a_login_once_a_worker_ran_the_heartbeat(client):
    heartbeat()  # what a worker runs when beat sends it
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": True,
        "migrations": True,
        "broker": True,
        "worker": True,
    }
    assert response["Cache-Control"] == "no-store"


def test_healthz_fails_with_booleans_only_when_the_heartbeat_is_stale(client, settings):
    settings.MEMORYUI_HEARTBEAT_STALE_SECONDS = 60
    WorkerHeartbeat.objects.create(name="worker", seen_at=timezone.now() - timedelta(seconds=61))
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body == {
        "status": "unavailable",
        "database": True,
        "migrations": True,
        "broker": True,
        "worker": False,
    }


def test_healthz_answers_probes_by_ip_over_plain_http(client, settings):
    settings.ALLOWED_HOSTS = ["memory.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    heartbeat()
    response = client.get("/healthz", HTTP_HOST="10.0.0.7")
    assert response.status_code == 200
    assert client.get("/", HTTP_HOST="10.0.0.7").status_code == 400  # other pages: checked


def test_healthz_fails_when_the_broker_cannot_be_reached(client, settings):

    heartbeat()
    previous = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    try:
        response = client.get("/healthz")
    finally:
        app.conf.broker_url = previous
    assert response.status_code == 503
    assert response.json()["broker"] is False
