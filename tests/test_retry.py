"""The one backoff rule: each caller's schedule is a choice of parameters, so these pin
the rule itself (doubling, cap, full jitter, the server's Retry-After, the ceiling) and
the three schedules the callers use."""

from django.test import override_settings

from generation.retry import backoff_delay
from memoryui import pipeline, webhooks


def test_delay_doubles_with_each_attempt_until_the_cap():
    delays = [backoff_delay(n, base=1.0, cap=30.0) for n in range(7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_full_jitter_draws_between_zero_and_the_capped_delay():
    bounds = []
    backoff_delay(
        3, base=2.0, cap=10.0, jitter=True, uniform=lambda a, b: bounds.append((a, b)) or b
    )
    assert bounds == [(0.0, 10.0)]
    assert backoff_delay(3, base=2.0, jitter=True, uniform=lambda a, b: a) == 0.0


def test_never_sooner_than_the_server_asked_even_with_jitter():
    assert backoff_delay(1, base=1.0, jitter=True, retry_after=45.0, uniform=lambda a, b: a) == 45.0
    assert backoff_delay(5, base=1.0, retry_after=3.0) == 32.0


def test_the_ceiling_bounds_even_what_the_server_asked():
    assert backoff_delay(0, base=1.0, retry_after=3600.0, max_wait=120.0) == 120.0


@override_settings(MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS=30.0)
def test_webhook_schedule_is_base_then_double():
    assert [webhooks.backoff(n) for n in (1, 2, 3)] == [30.0, 60.0, 120.0]


@override_settings(MEMORYUI_RETRY_BASE_SECONDS=2.0)
def test_model_call_schedule_is_jittered_below_a_minute_and_honours_retry_after():
    for attempts in range(1, 10):
        assert 0.0 <= pipeline.retry_delay(attempts, None) <= 60.0
    assert pipeline.retry_delay(1, 90.0) >= 90.0
