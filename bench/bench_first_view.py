"""The first view of a proposal's review in a web process started anew (a deploy, a
restart, a new gunicorn worker), with the cache shared as in production (Redis).

It runs on the database ``bench_pages.py --keep-database`` leaves (its proposal over
the layout's ``MEMORY.md``; 27 MB at 100,000 rollouts). Each figure is a new Python
process that signs in and asks for the review twice, timing each answer (wall time,
the database's work included):

- ``cold``: the shared cache emptied first; this process computes everything;
- ``after the worker``: the cache emptied, then a process runs what workers run ahead:
  the comparison of the proposal's base version with the version before it, as when
  that version was saved (``memoryui.tasks.compare_version``), the check of the
  proposal's entries, as the pipeline's worker does when it makes a proposal
  (``entry_checks.ensure``: comparing its texts), the proposal's lint and duplicates
  (``memoryui.tasks.lint_proposal``), and usage's figures, as after a backlog of
  imports (``forgetting.keep_ahead``); then a new process views it;
- ``new process``: any process after those;
- ``not shared``: the same, with the review's results kept per process only (the code
  before ``generation.shared_results``); usage's figures still come from the cache.

``--page`` names another page of ``bench_pages.py`` by its label (repeatable).

Usage (from the repository's root; the database named as for ``bench_pages.py``)::

    .venv/bin/python bench/bench_first_view.py \\
        --database-url postgres://postgres@127.0.0.1:5432/mui_bench_pages100k \\
        --cache-url redis://127.0.0.1:6379/13
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


def child(
    mode: str, page: str, database_url: str, cache_url: str, workdir: Path
) -> dict[str, float]:
    os.environ["CACHE_URL"] = cache_url
    import bench_pages

    bench_pages.setup(database_url, workdir)
    from django.contrib.auth import get_user_model
    from django.test import Client

    from generation import shared_results
    from memoryui import entry_checks, forgetting, tasks
    from memoryui.models import Layout, Proposal

    if mode == "not shared":
        shared_results.keep_in(None)
    layout = Layout.objects.select_related("workspace").order_by("memories_dir").first()
    proposal = Proposal.objects.filter(layout=layout).first()
    if layout is None or proposal is None:
        raise SystemExit("run bench_pages.py --keep-database on this database first")
    if mode == "worker":
        started = time.perf_counter()
        tasks.compare_version(proposal.base_memory_md_id)  # as when the version was saved
        entry_checks.ensure(proposal)  # as the pipeline's worker makes a proposal
        tasks.lint_proposal(proposal.pk)  # once it is saved
        forgetting.keep_ahead(layout.workspace)  # after a backlog of imports
        return {"worker": time.perf_counter() - started}
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    url = dict(bench_pages.pages())[page]
    times = {}
    for name in ("first", "second"):
        started = time.perf_counter()
        answer = client.get(url)
        times[name] = time.perf_counter() - started
        if answer.status_code != 200:
            raise SystemExit(f"{page} answered {answer.status_code}")
    return times


def in_a_new_process(mode: str, page: str, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", mode, "--page", page]
    command += ["--database-url", args.database_url, "--cache-url", args.cache_url]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def empty_cache(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--cache-url", required=True, help="a Redis database this may empty")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--page",
        action="append",
        help="a page of bench_pages.py by its label (default: proposal review)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        with tempfile.TemporaryDirectory(prefix="memoryui-first-view-") as workdir:
            page = args.page[0] if args.page else "proposal review"
            found = child(args.child, page, args.database_url, args.cache_url, Path(workdir))
            print(json.dumps(found))
        return 0

    for page in args.page or ["proposal review"]:
        print(f"{page + ': first view in':<40} {'first s':>8} {'second s':>9}")
        for _ in range(args.rounds):
            empty_cache(args.cache_url)
            rows = [("cold", in_a_new_process("view", page, args))]
            rows.append(("new process", in_a_new_process("view", page, args)))
            rows.append(("not shared", in_a_new_process("not shared", page, args)))
            empty_cache(args.cache_url)
            worker = in_a_new_process("worker", page, args)["worker"]
            after = in_a_new_process("view", page, args)
            rows.append((f"after the worker ({worker:.1f} s)", after))
            for label, times in rows:
                print(f"{label:<40} {times['first']:>8.2f} {times['second']:>9.3f}")
    load = os.getloadavg()[0]
    cpus = os.cpu_count()
    print(f"\nwall time, the database's work included; load average {load:.1f} on {cpus} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
