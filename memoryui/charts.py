"""Small server-rendered SVG charts (no JavaScript, nothing loaded from elsewhere)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from generation.tree import TERMINAL_STATES

STATES = (*TERMINAL_STATES, "unknown")
MAX_DAYS = 60


@dataclass
class Bar:
    x: int
    day: date | None
    total: int
    segments: list[tuple[str, int, int, int]]  # state, count, y, height


# Room around the bars: y labels on the left, dates below, the legend above.
LEFT = 40
BOTTOM = 22
LEGEND_ROW = 18
MIN_WIDTH = 420
CHAR_WIDTH = 7  # an upper bound for a 12 px sans-serif character, for the legend's layout


def nice_ticks(top: int, most: int = 5) -> list[int]:
    """Round y ticks from 0 to at least ``top``: a step of 1, 2 or 5 x 10^k, at most
    ``most`` + 1 ticks."""
    if top <= 0:
        return [0, 1]
    magnitude = 1
    while True:
        for m in (1, 2, 5):
            step = m * magnitude
            if -(-top // step) <= most:
                return list(range(0, -(-top // step) * step + 1, step))
        magnitude *= 10


def _day_label(day: date | None) -> str:
    return f"{day:%-d %b}" if day else "no date"


@dataclass
class Chart:
    bars: list[Bar]
    width: int
    height: int
    bar_width: int
    max_total: int
    legend: list[tuple[str, int]]
    hidden_days: int
    ticks: list[int] = field(default_factory=list)
    state_url: str = ""  # the rollout list; ?state=<state> is appended for a legend item
    title: str = "Rollouts per day by terminal state"
    noun: str = "rollout"  # what a bar counts, singular
    css: str = "state"  # the class of a segment: <css>-<category>, coloured by app.css
    labels: Mapping[str, str] = field(default_factory=dict)  # a category's name to show

    def _legend(self, width: int) -> tuple[list[str], int]:
        """The legend's markup (each state a link to its rollouts) and its height."""
        parts, x, row = [], LEFT, 0
        for state, n in self.legend:
            label = f"{self.labels.get(state, state)} ({n:,})"
            item_width = 14 + CHAR_WIDTH * len(label) + 14
            if x > LEFT and x + item_width > width:
                x, row = LEFT, row + 1
            y = row * LEGEND_ROW
            item = (
                f'<rect class="{self.css}-{escape(state)}" x="{x}" y="{y + 3}" height="10" '
                f'width="10"></rect><text x="{x + 14}" y="{y + 12}">{escape(label)}</text>'
            )
            if self.state_url:
                href = escape(f"{self.state_url}?state={state}")
                item = f'<a href="{href}">{item}</a>'
            parts.append(item)
            x += item_width
        return parts, (row + 1) * LEGEND_ROW + 6 if self.legend else 0

    def svg(self) -> SafeString:
        """The chart's markup, built here rather than in a template: a few hundred
        numbers are ~50x cheaper to format in Python than through template tags."""
        width = max(MIN_WIDTH, LEFT + self.width + 28)
        legend, top = self._legend(width)
        total_height = top + self.height + BOTTOM
        first, last = (
            self.bars[0].day if self.bars else None,
            (self.bars[-1].day if self.bars else None),
        )
        days = f"{len(self.bars)} day{'' if len(self.bars) == 1 else 's'}"
        totals = ", ".join(f"{n:,} {escape(self.labels.get(s, s))}" for s, n in self.legend)
        parts = [
            f'<svg width="{width}" height="{total_height}" '
            f'viewBox="0 0 {width} {total_height}" role="img" '
            'aria-labelledby="chart-title chart-desc">'
            f'<title id="chart-title">{escape(self.title)}</title>'
            f'<desc id="chart-desc">{days}, {_day_label(first)} to {_day_label(last)}; '
            f"the busiest day has {self.max_total:,} {escape(self.noun)}s. "
            f"In all: {totals or 'none'}.</desc>",
            *legend,
        ]
        axis = top + self.height
        scale_top = self.ticks[-1] if self.ticks else 1
        for tick in self.ticks:
            y = axis - round(self.height * tick / scale_top)
            parts.append(
                f'<line class="grid" x1="{LEFT}" x2="{width}" y1="{y}" y2="{y}"></line>'
                f'<text class="tick" x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{tick:,}</text>'
            )
        parts.append(
            f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{top}" y2="{axis}"></line>'
            f'<line class="axis" x1="{LEFT}" x2="{width}" y1="{axis}" y2="{axis}"></line>'
        )
        for bar in self.bars:
            day = bar.day.isoformat() if bar.day else "no date"
            counts = "".join(
                f", {n} {escape(self.labels.get(state, state))}" for state, n, _, _ in bar.segments
            )
            noun = escape(self.noun) + ("" if bar.total == 1 else "s")
            parts.append(f"<g><title>{day}: {bar.total} {noun}{counts}</title>")
            parts.extend(
                f'<rect class="{self.css}-{escape(state)}" x="{LEFT + bar.x}" y="{top + y}" '
                f'width="{self.bar_width}" height="{h}"></rect>'
                for state, _, y, h in bar.segments
            )
            parts.append("</g>")
        for i in _labelled(len(self.bars), self.bar_width + 4):
            bar = self.bars[i]
            x = LEFT + bar.x + self.bar_width // 2
            parts.append(
                f'<text class="day" x="{x}" y="{axis + 16}" text-anchor="middle">'
                f"{_day_label(bar.day)}</text>"
            )
        parts.append("</svg>")
        return mark_safe("".join(parts))  # numbers, dates and escaped state names


def _labelled(count: int, pitch: int, room: int = 56, most: int = 6) -> list[int]:
    """Which bars get a date below them: the first, the last and a few evenly between,
    ``room`` pixels apart at least (a label is ~45 px wide; bars are ``pitch`` apart)."""
    if count == 0:
        return []
    step = max(-(-room // pitch), -(-(count - 1) // (most - 1)), 1)
    chosen = list(range(0, count, step))
    if chosen[-1] != count - 1:
        if (count - 1 - chosen[-1]) * pitch < room and len(chosen) > 1:
            chosen.pop()
        chosen.append(count - 1)
    return chosen


def terminal_states_per_day(
    rows: Sequence[Mapping[str, Any]], height: int = 120, state_url: str = ""
) -> Chart:
    """Stacked bars of rollouts per day by terminal state (the last ``MAX_DAYS`` days
    that have rollouts; rollouts without a date form one "no date" bar)."""
    counts: dict[date | None, dict[str, int]] = {}
    for row in rows:
        state = row["terminal_state"] if row["terminal_state"] in STATES else "unknown"
        day = counts.setdefault(row["day"], {})
        day[state] = day.get(state, 0) + row["n"]
    return stacked_per_day(counts, STATES, height=height, state_url=state_url)


def stacked_per_day(
    counts: Mapping[date | None, Mapping[str, int]],
    categories: Sequence[str],
    *,
    height: int = 120,
    state_url: str = "",
    title: str = "Rollouts per day by terminal state",
    noun: str = "rollout",
    css: str = "state",
    labels: Mapping[str, str] | None = None,
) -> Chart:
    """Stacked bars of counts per day and category, stacked in ``categories``' order (the
    last ``MAX_DAYS`` days that have counts; counts without a date form one "no date" bar
    after them)."""
    days = {day: per for day, per in counts.items() if any(per.values())}
    totals: dict[str, int] = {}
    for per in days.values():
        for category, n in per.items():
            totals[category] = totals.get(category, 0) + n
    ordered = sorted(d for d in days if d is not None)
    hidden = max(0, len(ordered) - MAX_DAYS)
    keys: list[date | None] = list(ordered[hidden:])
    if None in days:
        keys.append(None)
    max_total = max((sum(days[d].values()) for d in keys), default=0)
    ticks = nice_ticks(max_total)
    bar_width = 12 if len(keys) > 30 else 20
    bars = []
    for i, day in enumerate(keys):
        y = height
        segments = []
        for category in categories:
            n = days[day].get(category, 0)
            if not n:
                continue
            h = max(1, round(height * n / ticks[-1]))
            y -= h
            segments.append((category, n, y, h))
        bars.append(Bar(i * (bar_width + 4), day, sum(days[day].values()), segments))
    return Chart(
        bars=bars,
        width=max(1, len(keys) * (bar_width + 4)),
        height=height,
        bar_width=bar_width,
        max_total=max_total,
        legend=[(c, totals[c]) for c in categories if totals.get(c)],
        hidden_days=hidden,
        ticks=ticks,
        state_url=state_url,
        title=title,
        noun=noun,
        css=css,
        labels=dict(labels or {}),
    )
