"""bin/test's signs of life (tests/progress.py), tried on a small run of its own: the
progress file a run keeps, the count a minute for the hidden run, and the test named when
a run goes quiet."""

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests import progress

ROOT = Path(__file__).resolve().parent.parent

SMALL_RUN = """
import time

def test_quick():
    pass

def test_fails():
    assert False

def test_slow():
    time.sleep({slow})
"""


def small_run(tmp_path: Path, progress_file: Path, slow: float) -> subprocess.Popen:
    (tmp_path / "test_small.py").write_text(SMALL_RUN.format(slow=slow))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:django",
            "-p",
            "tests.progress",
            "test_small.py",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), progress.ENV: str(progress_file)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_a_run_keeps_its_count_and_the_test_it_runs_in_the_progress_file(tmp_path):
    file = tmp_path / "progress.json"

    run = small_run(tmp_path, file, slow=0)
    run.wait(timeout=120)

    state = json.loads(file.read_text())
    assert (state["total"], state["done"], state["failed"], state["running"]) == (3, 3, 1, None)


def test_the_watcher_counts_the_hidden_run_and_names_the_test_a_quiet_run_waits_on(tmp_path):
    file = tmp_path / "progress.json"
    run = small_run(tmp_path, file, slow=6)
    out = io.StringIO()
    done = threading.Event()
    watcher = threading.Thread(
        target=progress.watch,
        args=({"PostgreSQL": file}, {"PostgreSQL"}),
        kwargs={"every": 2, "quiet_after": 2, "poll": 0.2, "out": out, "stop": done.is_set},
    )
    watcher.start()
    try:
        run.wait(timeout=120)
        time.sleep(5)  # the run has ended: one more line says so, then none
    finally:
        done.set()
        watcher.join(timeout=10)

    lines = out.getvalue().splitlines()
    assert sum("3 of 3 tests, 1 failed, finished" in line for line in lines) == 1, lines
    counts = [line for line in lines if line.startswith("bin/test: PostgreSQL run: ")]
    quiet = [line for line in lines if "quiet for" in line]
    assert counts and all(" of 3 tests" in line for line in counts), lines
    assert any("2 of 3 tests, 1 failed" in line for line in counts), lines
    # Quiet for 2 s, then again every 2 s while test_slow sleeps: named each time.
    assert len(quiet) >= 2, lines
    assert all("test_small.py::test_slow has been running for" in line for line in quiet), lines
