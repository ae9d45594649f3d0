"""Small server-rendered SVG charts (no JavaScript, nothing loaded from elsewhere)."""

from dataclasses import dataclass
from datetime import date
from typing import Any

from generation.tree import TERMINAL_STATES

STATES = (*TERMINAL_STATES, "unknown")
MAX_DAYS = 60


@dataclass
class Bar:
    x: int
    day: date | None
    total: int
    segments: list[tuple[str, int, int, int]]  # state, count, y, height


@dataclass
class Chart:
    bars: list[Bar]
    width: int
    height: int
    bar_width: int
    max_total: int
    legend: list[tuple[str, int]]
    hidden_days: int


def terminal_states_per_day(rows: list[dict[str, Any]], height: int = 120) -> Chart:
    """Stacked bars of rollouts per day by terminal state (the last ``MAX_DAYS`` days
    that have rollouts; rollouts without a date form one "no date" bar)."""
    days: dict[date | None, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for row in rows:
        state = row["terminal_state"] if row["terminal_state"] in STATES else "unknown"
        days.setdefault(row["day"], {}).setdefault(state, 0)
        days[row["day"]][state] += row["n"]
        totals[state] = totals.get(state, 0) + row["n"]
    ordered = sorted(d for d in days if d is not None)
    hidden = max(0, len(ordered) - MAX_DAYS)
    keys: list[date | None] = list(ordered[hidden:])
    if None in days:
        keys.append(None)
    max_total = max((sum(days[d].values()) for d in keys), default=0)
    bar_width = 12 if len(keys) > 30 else 20
    bars = []
    for i, day in enumerate(keys):
        y = height
        segments = []
        for state in STATES:
            n = days[day].get(state, 0)
            if not n:
                continue
            h = max(1, round(height * n / max_total))
            y -= h
            segments.append((state, n, y, h))
        bars.append(Bar(i * (bar_width + 4), day, sum(days[day].values()), segments))
    return Chart(
        bars=bars,
        width=max(1, len(keys) * (bar_width + 4)),
        height=height,
        bar_width=bar_width,
        max_total=max_total,
        legend=[(s, totals[s]) for s in STATES if totals.get(s)],
        hidden_days=hidden,
    )
