"""The layout overview's chart of rollouts per day by terminal state."""

import re
from datetime import date, timedelta

from memoryui.charts import nice_ticks, terminal_states_per_day


def test_each_day_is_a_stacked_bar_titled_with_its_counts():
    rows = [
        {"day": date(2026, 7, 1), "terminal_state": "completed", "n": 3},
        {"day": date(2026, 7, 1), "terminal_state": "failed", "n": 1},
        {"day": date(2026, 7, 2), "terminal_state": "completed", "n": 1},
        {"day": None, "terminal_state": "<odd>", "n": 2},
    ]
    svg = str(terminal_states_per_day(rows, height=120).svg())

    titles = re.findall(r"<title>(.*?)</title>", svg)
    assert titles == [
        "2026-07-01: 4 rollouts, 3 completed, 1 failed",
        "2026-07-02: 1 rollout, 1 completed",
        "no date: 2 rollouts, 2 unknown",
    ]
    heights = [int(h) for h in re.findall(r'height="(\d+)"></rect>', svg)]
    assert heights[:2] == [90, 30]  # the tallest day fills the chart, split 3:1
    assert "<odd>" not in svg


def test_y_axis_has_round_ticks_up_to_the_busiest_day():
    rows = [
        {"day": date(2026, 7, 1), "terminal_state": "completed", "n": 37},
        {"day": date(2026, 7, 2), "terminal_state": "failed", "n": 5},
    ]
    svg = str(terminal_states_per_day(rows).svg())

    ticks = re.findall(r'<text class="tick"[^>]*>([\d,]+)</text>', svg)
    assert ticks == ["0", "10", "20", "30", "40"]
    assert nice_ticks(180) == [0, 50, 100, 150, 200]
    assert nice_ticks(1) == [0, 1]


def test_x_axis_labels_the_first_last_and_a_few_days_between():
    rows = [
        {"day": date(2026, 7, 1) + timedelta(days=i), "terminal_state": "completed", "n": 1}
        for i in range(45)
    ]
    svg = str(terminal_states_per_day(rows).svg())

    labels = re.findall(r'<text class="day"[^>]*>(.*?)</text>', svg)
    assert labels[0] == "1 Jul" and labels[-1] == "14 Aug"
    assert 3 <= len(labels) <= 6
    # Labels never crowd: at least 56 px apart.
    xs = [int(x) for x in re.findall(r'<text class="day" x="(\d+)"', svg)]
    assert min(b - a for a, b in zip(xs, xs[1:], strict=False)) >= 56
    assert int(re.search(r'<svg width="(\d+)"', svg).group(1)) >= xs[-1] + 25  # not clipped


def test_chart_has_a_title_a_description_and_a_legend_linking_each_state():
    rows = [
        {"day": date(2026, 7, 1), "terminal_state": "completed", "n": 3},
        {"day": date(2026, 7, 3), "terminal_state": "failed", "n": 1},
    ]
    svg = str(terminal_states_per_day(rows, state_url="/w/x/l/1/rollouts/").svg())

    assert 'aria-labelledby="chart-title chart-desc"' in svg
    assert '<title id="chart-title">Rollouts per day by terminal state</title>' in svg
    desc = re.search(r'<desc id="chart-desc">(.*?)</desc>', svg).group(1)
    assert (
        desc
        == "2 days, 1 Jul to 3 Jul; the busiest day has 3 rollouts. In all: 3 completed, 1 failed."
    )
    legend = re.findall(r'<a href="([^"]+)">.*?<text[^>]*>(.*?)</text></a>', svg)
    assert legend == [
        ("/w/x/l/1/rollouts/?state=completed", "completed (3)"),
        ("/w/x/l/1/rollouts/?state=failed", "failed (1)"),
    ]
