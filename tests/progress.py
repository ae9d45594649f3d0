"""Signs of life for bin/test's two runs.

``pytest -p tests.progress`` with ``MEMORYUI_TEST_PROGRESS=<file>`` keeps that file (JSON,
replaced whole after each test starts and ends) saying how many tests ran of how many,
how many failed, which one runs now and since when. ``python -m tests.progress NAME=FILE
...`` (bin/test starts it beside the runs) reads those files and prints, on stderr:

- every minute, for each run named with ``--count``: its tests so far (the PostgreSQL run,
  whose output bin/test shows only once it ends);
- when a run has finished no test for a minute: the test that has been running since, and
  for how long (a browser test waiting on Chromium, a worker that does not answer), again
  every further minute it stays quiet.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ENV = "MEMORYUI_TEST_PROGRESS"


class _Progress:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.state: dict[str, Any] = {
            "total": 0,
            "done": 0,
            "failed": 0,
            "running": None,
            "since": None,
            "last_done": time.time(),
        }
        self._failed: set[str] = set()

    def write(self) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(self.state))
        os.replace(temporary, self.path)

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.state["total"] = len(session.items)
        self.write()

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.state.update(running=nodeid, since=time.time())
        self.write()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and report.nodeid not in self._failed:
            self._failed.add(report.nodeid)
            self.state["failed"] += 1

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.state.update(running=None, since=None, finished=True)
        self.write()

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        now = time.time()
        self.state.update(running=None, since=None, last_done=now)
        self.state["done"] += 1
        self.write()


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if path:
        config.pluginmanager.register(_Progress(Path(path)), "memoryui-progress")


# --- the watcher ---------------------------------------------------------------------------


def _read(path: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state


def _minutes(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def watch(
    runs: dict[str, Path],
    counted: set[str],
    *,
    every: float = 60.0,
    quiet_after: float = 60.0,
    poll: float = 1.0,
    out: Any = None,
    stop: Any = None,
) -> None:
    """Print the runs' signs of life until ``stop()`` says so (forever by default)."""
    out = out or sys.stderr
    started = time.time()
    next_count = started + every
    told: dict[str, float] = {}  # run -> when its quiet was last told
    ended: set[str] = set()  # finished runs, told once
    while not (stop and stop()):
        time.sleep(poll)
        now = time.time()
        states = {name: _read(path) for name, path in runs.items()}
        if now >= next_count:
            next_count += every
            for name in counted - ended:
                state = states.get(name)
                if state:
                    failed = f", {state['failed']} failed" if state["failed"] else ""
                    done = ", finished" if state.get("finished") else ""
                    print(
                        f"bin/test: {name} run: {state['done']} of {state['total']} tests"
                        f"{failed}{done} ({_minutes(now - started)})",
                        file=out,
                        flush=True,
                    )
                    if state.get("finished"):
                        ended.add(name)
        for name, state in states.items():
            if not state or not state.get("running") or state.get("since") is None:
                continue
            quiet = now - state["last_done"]  # since a test last finished
            last = told.get(name, 0.0)
            if quiet >= quiet_after and now - max(last, state["last_done"]) >= quiet_after:
                told[name] = now
                print(
                    f"bin/test: {name} run quiet for {_minutes(quiet)}: {state['running']} "
                    f"has been running for {_minutes(now - state['since'])}",
                    file=out,
                    flush=True,
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="NAME=PROGRESS_FILE")
    parser.add_argument("--count", action="append", default=[], help="a run to count aloud")
    parser.add_argument("--every", type=float, default=60.0)
    parser.add_argument("--quiet-after", type=float, default=60.0)
    args = parser.parse_args(argv)
    runs = {}
    for run in args.runs:
        name, _, path = run.partition("=")
        runs[name] = Path(path)
    try:
        watch(runs, set(args.count), every=args.every, quiet_after=args.quiet_after)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
