"""The layout overview's chart of rollouts per day by terminal state."""

import re
from datetime import date

from memoryui.charts import terminal_states_per_day


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
