"""``bench/bench_poisoning.py`` runs to its end as bench/README.md shows it: both halves,
the flags on the labelled corpus and the evidence matchers on the sentences of its task
groups (each checked against the summaries its group's tasks cite)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_poisoning_benchmark_reports_the_flags_and_the_evidence_matchers(tmp_path):
    done = subprocess.run(
        [sys.executable, "bench/bench_poisoning.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DEBUG": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Detection rate: " in done.stdout
    evidence = done.stdout.split("## Evidence matchers")[1]
    counts = re.search(r"(\d+) sentences their summaries hold, (\d+) they do not", evidence)
    assert counts, evidence
    held, not_held = int(counts.group(1)), int(counts.group(2))
    assert held > 10 and not_held > 10
    used = next(line for line in evidence.splitlines() if line.startswith("| content words +"))
    found, caught = used.split("|")[2:4]
    assert found.strip() == f"{held}/{held}"
    assert int(caught.split("/")[0]) >= not_held * 0.9
