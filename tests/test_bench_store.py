"""bench/bench_store.py in the suite, small: the deployment as compose runs it (gunicorn,
two Celery workers, beat, PostgreSQL, Redis, S3-compatible storage) under five sandboxes
restoring and persisting for twenty seconds. Every restore must be byte-exact, no
request may fail, and every persist answered 202 must be merged once; the timings are
printed, not asserted (the machine is shared)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")


def test_five_sandboxes_restore_exactly_what_they_persisted_and_every_persist_is_merged():
    database = POSTGRES.rsplit("/", 1)[0] + f"/memoryui_store_bench_{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DEBUG")}
    done = subprocess.run(
        [sys.executable, "bench/bench_store.py", "--sandboxes", "5", "--seconds", "20",
         "--rollouts", "200", "--database-url", database, "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    print(done.stderr[-3000:])
    assert done.stdout, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    print(json.dumps(summary, indent=2))
    assert summary["error_count"] == 0, summary["errors"]
    assert summary["mismatch_count"] == 0, summary["mismatches"]
    assert summary["unmerged_jobs"] == {} and summary["persists"] >= 5
    assert summary["restores"] >= summary["persists"]
    assert set(summary["job_statuses"]) == {"done"}
    assert done.returncode == 0
