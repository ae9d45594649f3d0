"""How long to wait before trying a failed call again: the one backoff rule that model
calls (phase one and two, in a worker or inline), phase two's agent and webhook
deliveries share, each with its own base, cap and jitter. No Django, no clock: the
caller sleeps (or hands the delay to Celery)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable


def backoff_delay(
    exponent: int,
    *,
    base: float,
    cap: float = math.inf,
    jitter: bool = False,
    retry_after: float | None = None,
    max_wait: float = math.inf,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait: ``base * 2**exponent``, at most ``cap``; with ``jitter`` a
    uniform draw between 0 and that ("full jitter", so that many clients failing
    together do not come back together). Never sooner than the server's ``Retry-After``,
    and never longer than ``max_wait`` whatever the server asked."""
    backoff = min(cap, base * 2.0**exponent)
    if jitter:
        backoff = uniform(0.0, backoff)
    return min(max_wait, max(backoff, retry_after or 0.0))
