"""Readable dates: ``{% load dates %}{{ value|when }}`` renders

    <time datetime="2026-07-01T09:30:00+00:00" title="2026-07-01 09:30:00 UTC">3 hours ago</time>

relative while recent (under a week, either way), the date itself when older; the exact
local date-time with its time zone is in the tooltip and the ISO form in ``datetime``.
``{{ value|when:"never" }}`` shows "never" for an empty value. Values may be datetimes,
dates or ISO-8601 strings (as memory files write them); a string that is not a date is
shown as it is.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString

register = template.Library()

RELATIVE_FOR = timedelta(days=7)


def _parse(value: object) -> datetime | date | None:
    if isinstance(value, datetime | date):
        return value
    if isinstance(value, str) and value.strip():
        try:
            return parse_datetime(value.strip()) or parse_date(value.strip())
        except ValueError:
            return None
    return None


def _ago(delta: timedelta) -> str:
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        return "just now"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            text = f"{n} {unit}{'' if n == 1 else 's'}"
            break
    return f"in {text}" if delta.total_seconds() < 0 else f"{text} ago"


def when_html(value: object, now: datetime | None = None, empty: str = "") -> SafeString | str:
    """The ``<time>`` element for ``value`` as seen at ``now`` (default: the clock)."""
    parsed = _parse(value)
    if parsed is None:
        return escape(value) if value not in (None, "") else empty
    now = now or timezone.now()
    if not isinstance(parsed, datetime):  # a day: no time to be relative about
        return format_html(
            '<time datetime="{}" title="{}">{}</time>',
            parsed.isoformat(),
            parsed.isoformat(),
            f"{parsed:%-d %b %Y}",
        )
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, timezone.get_default_timezone())
    local = timezone.localtime(parsed)
    delta = now - parsed
    if abs(delta) < RELATIVE_FOR:
        label = _ago(delta)
    elif local.year == timezone.localtime(now).year:
        label = f"{local:%-d %b %H:%M}"
    else:
        label = f"{local:%-d %b %Y}"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        parsed.isoformat(),
        f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}",
        label,
    )


@register.filter
def when(value: object, empty: str = "") -> SafeString | str:
    return when_html(value, empty=empty)
