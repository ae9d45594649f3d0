"""Figures the pages compute from what imports wrote (counts per kind, rollouts per day,
rollouts without a raw memory...), kept until the next import.

Only the importer writes files, rollouts, raw memories and rollout summaries, and every
import that writes rows stamps the workspace's ``rows_written_at`` in the same
transaction: a key that holds the stamp can never be stale, so nothing has to be
invalidated. An import that found a directory listed as before writes no row and keeps
the stamp (a scheduled sync of an unchanged tree keeps every figure). Django's default
cache holds them: one per process unless settings configure a shared one (Redis in
production). A workspace never imported (no stamp) is computed on every view.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from django.conf import settings
from django.core.cache import cache

from .models import Workspace

T = TypeVar("T")
# Old stamps are never read again; let them expire rather than wait for eviction.
TIMEOUT = 24 * 3600


def key(workspace: Workspace, name: str) -> str | None:
    stamp = workspace.rows_written_at
    if stamp is None:
        return None
    return f"memoryui:figures:{name}:{workspace.pk}:{stamp.timestamp():.6f}"


# Figures kept in this process as objects too (``cached(..., shared=True)``), newest
# last: a large one (a MEMORY.md's usage per entry) costs milliseconds to unpickle from
# the cache on every request. Their keys hold the import stamp, so they are never stale.
_SHARED_KEPT = 4
_shared: OrderedDict[str, Any] = OrderedDict()
_shared_lock = threading.Lock()


def cached(workspace: Workspace, name: str, compute: Callable[[], T], *, shared: bool = False) -> T:
    """``compute()``, or what it gave since the workspace's last import. ``shared``:
    also kept as the object itself in this process, handed to every caller, which must
    not change it."""
    cache_key = key(workspace, name)
    if cache_key is None:
        return compute()
    if shared:
        with _shared_lock:
            if cache_key in _shared:
                _shared.move_to_end(cache_key)
                return cast(T, _shared[cache_key])
    found = cast(T, cache.get_or_set(cache_key, compute, TIMEOUT))
    if shared:
        with _shared_lock:
            _shared[cache_key] = found
            while len(_shared) > _SHARED_KEPT:
                _shared.popitem(last=False)
    return found


def seen_by_other_processes() -> bool:
    """Whether a figure kept here by one process (a worker) is found by another (the
    web's): the cache is shared between processes, as Redis is in production, or tasks
    run in the web's own process. Django's per-process memory cache, the embedded
    default with a worker of its own, is not."""
    from .celery import app  # noqa: PLC0415 (deferred: a web process starts without Celery)

    backend = str(settings.CACHES["default"]["BACKEND"])
    local = backend.endswith(("LocMemCache", "DummyCache"))
    return not local or bool(app.conf.task_always_eager)


def forget_shared() -> None:
    """Drop what this process keeps as objects (tests: a new database gives the same
    keys again)."""
    with _shared_lock:
        _shared.clear()


def cached_many(
    workspaces: Sequence[Workspace], name: str, compute: Callable[[list[Workspace]], dict[int, T]]
) -> dict[int, T]:
    """Each workspace's figure by pk: those kept since their last import from the cache in
    one read, the others from one ``compute(missing)``, which must give every pk asked."""
    keys = {w.pk: key(w, name) for w in workspaces}
    found = cache.get_many([k for k in keys.values() if k is not None])
    figures = {pk: found[k] for pk, k in keys.items() if k in found}
    missing = [w for w in workspaces if w.pk not in figures]
    if missing:
        computed = compute(missing)
        figures.update(computed)
        cache.set_many(
            {k: computed[w.pk] for w in missing if (k := keys[w.pk]) is not None}, TIMEOUT
        )
    return figures
