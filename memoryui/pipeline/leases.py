"""Leases: a worker holds the work it claimed (a phase-one job, a run's phase two) until
a time it keeps pushing back while it works (``renewing``); once the time has passed,
another worker may take the work over."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import QuerySet
from django.utils import timezone

logger = logging.getLogger(__name__)


def new_lease(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(seconds=settings.MEMORYUI_JOB_LEASE_SECONDS)


@contextmanager
def renewing(held: QuerySet[Any], field: str, lease: datetime) -> Iterator[None]:
    """Keep a claim while its holder works: a thread renews the lease in ``field`` every
    ``MEMORYUI_LEASE_RENEW_SECONDS``, as long as the row still carries the lease this
    holder set last (the lease's value is the holder's token). A model call may take
    minutes; a lease kept short and renewed lets another worker take over within about
    a lease of a worker's death, and never while the holder is alive.

    Renewing stops when the row was finished, cancelled or taken over, and on leaving
    the block."""
    done = threading.Event()

    def renew() -> None:
        current = lease
        while not done.wait(settings.MEMORYUI_LEASE_RENEW_SECONDS):
            extended = new_lease()
            try:
                renewed = held.filter(**{field: current}).update(**{field: extended})
            except DatabaseError as exc:  # try again next time; the lease still runs
                logger.warning("could not renew a lease (%s): %s", field, exc)
                continue
            finally:
                connection.close()  # one connection per renewal, none held between
            if not renewed:
                return
            current = extended

    thread = threading.Thread(target=renew, name=f"lease-{field}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
