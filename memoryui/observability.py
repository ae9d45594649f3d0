"""What operators see: structured log lines and Prometheus metrics.

Logs: one logger per area (``memoryui.import``, ``memoryui.run``, ``memoryui.phase``,
``memoryui.writeback``, ``memoryui.export``, ``memoryui.upload``, ``memoryui.delivery``,
``memoryui.lease``), one line per event in ``key=value`` form with the ids involved and,
for operations, ``outcome`` and ``duration_ms``.

Metrics (``GET /metrics``, Prometheus text): operation counts and seconds by outcome and
lease takeovers, counted in the database so every process (web, any worker on any machine)
adds to the same numbers; and, read when scraped, the broker's queue depths, generation
runs and phase-one jobs by status, webhook deliveries by status and the age of the last
worker heartbeat. Allowed for the addresses in ``MEMORYUI_METRICS_ALLOW`` (loopback by
default) or with ``Authorization: Bearer $MEMORYUI_METRICS_TOKEN``; 404 for anyone else.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Count, F
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from .models import GenerationRun, OperationStat, PhaseOneJob, WebhookDelivery, WorkerHeartbeat

PATH = "/metrics"


def _value(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def log_event(area: str, event: str, level: int = logging.INFO, /, **fields: Any) -> None:
    """``event=<event> key=value ...`` on the ``memoryui.<area>`` logger."""
    parts = [f"event={event}"] + [f"{k}={_value(v)}" for k, v in fields.items() if v is not None]
    logging.getLogger(f"memoryui.{area}").log(level, " ".join(parts))


def count(operation: str, outcome: str, seconds: float = 0.0) -> None:
    """Add one ``outcome`` of ``operation`` (and its seconds) to the shared counters; a
    failure to count never fails the operation."""

    try:
        with transaction.atomic():
            done = OperationStat.objects.filter(operation=operation, outcome=outcome).update(
                count=F("count") + 1, seconds=F("seconds") + seconds
            )
            if not done:
                stat, created = OperationStat.objects.get_or_create(
                    operation=operation, outcome=outcome, defaults={"count": 1, "seconds": seconds}
                )
                if not created:
                    OperationStat.objects.filter(pk=stat.pk).update(
                        count=F("count") + 1, seconds=F("seconds") + seconds
                    )
    except DatabaseError as exc:
        log_event("metrics", "count_failed", logging.WARNING, operation=operation, error=exc)


@contextmanager
def operation(area: str, name: str, /, **fields: Any) -> Iterator[dict[str, Any]]:
    """Log ``<name>.start``, then ``<name>.done`` or ``<name>.failed`` with the duration
    (and the error), and count it. Fields added to the yielded dict go in the last line."""
    started = time.monotonic()
    extra: dict[str, Any] = {}
    log_event(area, f"{name}.start", logging.DEBUG, **fields)
    try:
        yield extra
    except BaseException as exc:
        seconds = time.monotonic() - started
        log_event(
            area,
            f"{name}.failed",
            logging.WARNING,
            **fields,
            **extra,
            duration_ms=round(seconds * 1000),
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        count(name, "failed", seconds)
        raise
    seconds = time.monotonic() - started
    outcome = str(extra.pop("outcome", "ok"))
    log_event(
        area, f"{name}.done", **fields, **extra, outcome=outcome, duration_ms=round(seconds * 1000)
    )
    count(name, outcome, seconds)


P = ParamSpec("P")
R = TypeVar("R")


def observed(
    name: str, start: Callable[..., dict[str, Any]], done: Callable[[Any], dict[str, Any]]
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Every call of the decorated function as an ``operation`` of the area ``name``:
    ``start`` gets the call's arguments and names the fields of its first line, ``done``
    gets the result and names those of its last."""

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        @wraps(func)
        def logged(*args: P.args, **kwargs: P.kwargs) -> R:
            with operation(name, name, **start(*args, **kwargs)) as extra:
                result = func(*args, **kwargs)
                extra.update(done(result))
            return result

        return logged

    return decorate


def lease_taken_over(kind: str, **ids: Any) -> None:
    log_event("lease", "takeover", logging.WARNING, kind=kind, **ids)
    count(f"lease_takeover.{kind}", "ok")


# --- /metrics -------------------------------------------------------------------------------


def _labels(**labels: str) -> str:
    inner = ",".join(
        f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels.items()
    )
    return "{" + inner + "}" if inner else ""


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels: str) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {float(value)!r}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def queue_depths() -> dict[str, int]:
    """Messages waiting in each Celery queue this deployment uses (``celery``: imports,
    generation, write-backs, exports; ``webhooks``: deliveries)."""
    queues = ["celery", "webhooks"]
    url = settings.CELERY_BROKER_URL
    if url.startswith(("redis://", "rediss://")):
        import redis  # noqa: PLC0415 (deferred: only with a Redis broker)

        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            return {q: int(client.llen(q)) for q in queues}
        finally:
            client.close()
    if url.startswith("filesystem://"):
        folder = Path(str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]))
        names = [p.name for p in folder.glob("*.msg")] if folder.is_dir() else []
        return {q: sum(1 for n in names if n.endswith(f".{q}.msg")) for q in queues}
    return {}


def _operations(out: _Exposition) -> None:

    stats = list(OperationStat.objects.values_list("operation", "outcome", "count", "seconds"))
    out.family("memoryui_operations_total", "counter", "Operations by outcome.")
    for op, outcome, n, _ in stats:
        if not op.startswith("lease_takeover."):
            out.sample("memoryui_operations_total", n, operation=op, outcome=outcome)
    out.family("memoryui_operation_seconds_total", "counter", "Seconds spent, by outcome.")
    for op, outcome, _, seconds in stats:
        if not op.startswith("lease_takeover."):
            out.sample("memoryui_operation_seconds_total", seconds, operation=op, outcome=outcome)
    out.family(
        "memoryui_lease_takeovers_total",
        "counter",
        "Work taken over from a worker whose lease ran out (it died or hung).",
    )
    for kind in ("phase_one", "phase_two"):
        taken = sum(n for op, _, n, _ in stats if op == f"lease_takeover.{kind}")
        out.sample("memoryui_lease_takeovers_total", taken, kind=kind)


def _states(out: _Exposition) -> None:

    for name, model, help_text in (
        ("memoryui_generation_runs", GenerationRun, "Generation runs by status."),
        ("memoryui_phase_one_jobs", PhaseOneJob, "Phase-one jobs by status."),
        ("memoryui_webhook_deliveries", WebhookDelivery, "Webhook deliveries by status."),
    ):
        found = dict(model.objects.values_list("status").annotate(n=Count("pk")).order_by())
        out.family(name, "gauge", help_text)
        for status in model.Status.values:
            out.sample(name, found.get(status, 0), status=status)
    beat = WorkerHeartbeat.objects.filter(name="worker").values_list("seen_at", flat=True).first()
    out.family(
        "memoryui_worker_heartbeat_age_seconds",
        "gauge",
        "Seconds since a worker last ran beat's heartbeat (-1: never).",
    )
    age = (timezone.now() - beat).total_seconds() if beat else -1
    out.sample("memoryui_worker_heartbeat_age_seconds", age)


def metrics_text() -> str:
    out = _Exposition()
    _operations(out)
    _states(out)
    out.family("memoryui_queue_depth", "gauge", "Messages waiting in a Celery queue.")
    out.family("memoryui_broker_up", "gauge", "1 when the broker answered the depth query.")
    try:
        depths = queue_depths()
        for queue, depth in depths.items():
            out.sample("memoryui_queue_depth", depth, queue=queue)
        out.sample("memoryui_broker_up", 1)
    except Exception:  # the broker is down: say so, keep the rest
        out.sample("memoryui_broker_up", 0)
    return out.text()


def metrics_allowed(request: HttpRequest) -> bool:
    token = settings.MEMORYUI_METRICS_TOKEN
    given = request.META.get("HTTP_AUTHORIZATION", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    from .auth import client_ip  # noqa: PLC0415 (deferred: it loads Django's auth forms)

    # The client's address as the login judges it: behind MEMORYUI_TRUSTED_PROXIES, the one
    # the outermost trusted proxy saw, not the proxy's own (loopback, say).
    seen = client_ip(request)
    if seen is None:
        return False
    address = ipaddress.ip_address(seen)
    allowed = [ipaddress.ip_network(n, strict=False) for n in settings.MEMORYUI_METRICS_ALLOW]
    return any(address in network for network in allowed)


class MetricsMiddleware:
    """Answers ``GET /metrics`` before host validation, the HTTPS redirect and the login
    requirement (Prometheus scrapes by address over plain HTTP), for allowed callers."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info != PATH or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        if not metrics_allowed(request):
            return HttpResponse("Not found.\n", status=404, content_type="text/plain")
        response = HttpResponse(metrics_text(), content_type="text/plain; version=0.0.4")
        response["Cache-Control"] = "no-store"
        return response
