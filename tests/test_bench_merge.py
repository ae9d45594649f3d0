"""bench/bench_merge.py in the suite, small: a sandbox's persists merged one after the
other, each timed against reading its upload once (figures printed, not asserted)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_merge_benchmark_merges_each_persist_and_reports_it(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "bench/bench_merge.py",
            "--rollouts",
            "60",
            "--rounds",
            "3",
            "--new",
            "--sandboxes",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    print(done.stdout)
    assert "first persist:" in done.stdout
    assert "60 rollouts, 2 sandboxes, 1 changed a persist, sqlite: merge" in done.stdout
    assert "reading the upload once" in done.stdout
