"""The app's start-up: signal receivers, the system check of workspace routes, the
local folders Django needs before its first request or query, the garbage collector's
pace, and where the review's large results are shared (``review_cache``)."""

import gc
from pathlib import Path
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks


class MemoryuiConfig(AppConfig):
    name = "memoryui"
    verbose_name = "memoryui"

    def ready(self) -> None:
        # Light on purpose: every command and process runs this. The Celery app, which
        # recovers interrupted write-backs when a worker starts, lives in memoryui.celery.
        from . import live_review, notifications, proposal_lint, webhooks  # noqa: F401, PLC0415 (their signal receivers, once models load)
        from .review_cache import share_if_shared  # noqa: PLC0415 (Django's cache, once settings load)

        checks.register(check_workspace_routes, checks.Tags.urls)
        make_local_folders()
        pace_garbage_collector()
        share_if_shared()


# Container objects allocated (less those freed) between two young collections; Python's
# default is 700. A large workspace's parsed documents stay in per-process caches
# (``documents``, ``generation.review``: ~1.4 million objects for a 27 MB MEMORY.md), and
# with the default every parse of an assembled document (each review decision makes
# one) set off full collections that walked them all: 0.4-1.2 s each, 36 of them in 20
# decisions (bench/README). At this pace a young collection still runs every few
# milliseconds of allocation, and a full one only after millions of allocations.
YOUNG_COLLECTION_THRESHOLD = 50_000
MIDDLE_COLLECTION_THRESHOLD = 20


def pace_garbage_collector() -> None:
    """Fewer, larger collections: reference counting frees almost everything the
    requests allocate; the collector only has cycles to find."""
    young, middle, old = gc.get_threshold()
    if young:  # 0: somebody turned the collector off on purpose
        gc.set_threshold(
            max(young, YOUNG_COLLECTION_THRESHOLD), max(middle, MIDDLE_COLLECTION_THRESHOLD), old
        )


def make_local_folders() -> None:
    """SQLite cannot create the folder of its database file, and WhiteNoise warns when
    the static root is missing in development: both are made here, when Django starts,
    not when the settings are read."""
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        for name in (database["NAME"], database.get("TEST", {}).get("NAME")):
            if name and name != ":memory:" and not str(name).startswith("file:"):
                Path(name).parent.mkdir(parents=True, exist_ok=True)
    if settings.DEBUG:
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)


def check_workspace_routes(app_configs: Any = None, **kwargs: Any) -> list[checks.Error]:
    """A view under ``w/<name>/`` without ``roles.workspace_view`` would serve anyone."""
    from .roles import unguarded_workspace_routes  # noqa: PLC0415 (the app registry is not ready when apps.py loads)

    return [
        checks.Error(
            f"The view of {route!r} does not check the workspace role.",
            hint="Wrap it in memoryui.roles.workspace_view(Role...).",
            id="memoryui.E001",
        )
        for route in unguarded_workspace_routes()
    ]
