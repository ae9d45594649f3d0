"""``/healthz`` for load balancers and orchestrators: 200 when the database answers, the
migrations are applied, the broker accepts a connection and a worker ran the heartbeat
that beat sends (recently); 503 otherwise. No login, no host check, no HTTPS redirect
(probes come by IP over plain HTTP), and no detail beyond one boolean per check."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from memoryui.models import WorkerHeartbeat

PATH = "/healthz"
BROKER_TIMEOUT = 2.0  # seconds

_migrated = False  # once applied, migrations stay applied for this process


def check_database() -> bool:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except Exception:
        return False


def check_migrations() -> bool:
    global _migrated
    if _migrated:
        return True
    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        _migrated = not executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception:
        return False
    return _migrated


def check_broker() -> bool:
    from memoryui.celery import app  # noqa: PLC0415 (deferred: Celery loads only for the broker check)

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT)
        return True
    except Exception:
        return False


def check_worker() -> bool:

    try:
        beat = WorkerHeartbeat.objects.filter(name="worker").first()
    except Exception:
        return False
    stale = timedelta(seconds=settings.MEMORYUI_HEARTBEAT_STALE_SECONDS)
    return beat is not None and timezone.now() - beat.seen_at <= stale


CHECKS: dict[str, Callable[[], bool]] = {
    "database": check_database,
    "migrations": check_migrations,
    "broker": check_broker,
    "worker": check_worker,
}


def health() -> HttpResponse:
    database = check_database()
    results = {
        name: database and check() if name in ("migrations", "worker") else check()
        for name, check in CHECKS.items()
        if name != "database"
    }
    results = {"database": database, **results}
    healthy = all(results.values())
    body = {"status": "ok" if healthy else "unavailable", **results}
    response = HttpResponse(
        json.dumps(body), status=200 if healthy else 503, content_type="application/json"
    )
    response["Cache-Control"] = "no-store"
    return response


class HealthCheckMiddleware:
    """Answers ``GET /healthz`` before anything else runs (host validation, the HTTPS
    redirect, sessions, the login requirement)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info == PATH and request.method in ("GET", "HEAD"):
            return health()
        return self.get_response(request)
