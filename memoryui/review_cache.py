"""The review's large results (a large ``MEMORY.md``'s entries, the comparison of two)
kept in Django's cache when that cache is shared by the deployment's processes (Redis,
``CACHE_URL``), so that a process started anew reads what another computed
(``generation.shared_results``). Each process's own memory (the default cache) is not
used for them: every process keeps its results anyway.

A value is a compressed pickle, a few megabytes for a 27 MB ``MEMORY.md``; it is kept for
``KEPT_FOR`` seconds after it was computed, and a Redis that cannot be reached costs the
page its computing, never an error."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache

from generation import shared_results

log = logging.getLogger(__name__)

KEPT_FOR = 7 * 24 * 3600


class SharedCache:
    """``generation.shared_results.Store`` in Django's default cache."""

    def get(self, key: str) -> bytes | None:
        from redis.exceptions import RedisError  # noqa: PLC0415 (the Redis client, ~20 MB, loads with the cache's first use, not with Django)

        try:
            value = cache.get(key)
        except RedisError as exc:
            log.warning("the shared cache could not be read (%s): the review computes", exc)
            return None
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes) -> None:
        from redis.exceptions import RedisError  # noqa: PLC0415 (as in get)

        try:
            cache.set(key, value, timeout=KEPT_FOR)
        except RedisError as exc:
            log.warning("the shared cache could not keep a review result (%s)", exc)


def share_if_shared() -> None:
    """Share the review's large results through the cache if the processes share it."""
    shared_results.keep_in(SharedCache() if settings.CACHE_URL else None)
