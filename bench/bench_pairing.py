"""Time the pairing of removed and added MEMORY.md entries (``generation.review.compare``)
on a 2,000-entry document: 200 entries renamed and edited, then every entry renamed.
Target: both comparisons within 3 s of CPU (the review page computes them).

    .venv/bin/python bench/bench_pairing.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
os.environ.setdefault("DEBUG", "1")  # development settings, as bin/start runs them

import django  # noqa: E402  (needs the path set above)

django.setup()  # the test module that builds the documents imports the models

from generation import review  # noqa: E402
from generation.review import comparison, document  # noqa: E402
from tests.test_pairing import big_edit  # noqa: E402

TARGET_SECONDS = 3.0


def main(repeat: int = 3) -> int:
    current, some_edited, all_renamed = big_edit()
    times = []
    for _ in range(repeat):
        comparison._compare.cache_clear()  # the review page's per-process caches: cold
        document._entries.cache_clear()
        started = time.process_time()
        review.compare(current, some_edited)
        review.compare(current, all_renamed)
        times.append(time.process_time() - started)
    median = statistics.median(times)
    verdict = "ok" if median <= TARGET_SECONDS else "over the goal"
    print(
        f"pairing 2,000 entries (200 edited, then all renamed): {median:.2f} s CPU "
        f"(median of {repeat}); goal <= {TARGET_SECONDS:.1f} s: {verdict}"
    )
    return 0 if median <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
