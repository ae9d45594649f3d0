"""Peak memory of importing an SDK snapshot ``.tar`` of the 10,000-rollout tree.

    .venv/bin/python bench/bench_tar_memory.py --tree /tmp/bench-10k
    .venv/bin/python bench/bench_tar_memory.py --tree /tmp/bench-10k --gzip

Writes the tree as a tar (as the SDK's snapshots are: one member per file and directory)
into a temp dir, then imports it in a fresh Python process into a fresh SQLite database
or, with ``--database-url``, PostgreSQL (migrated by another process before, as a
deployment's release step does) and prints
that process's peak resident memory (``VmHWM``) before and after the import, and the
CPU time of the import against the same import of the directory.
Goal: peak at most 150 MB for 10,000 rollouts, 200 MB for 100,000 (``--goal-mb``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import generate_tree  # noqa: E402

GOAL_MB = 150.0

# The peak is the process's own high-water mark (VmHWM): ``ru_maxrss`` would carry
# over the RSS of the process that started it (Linux keeps it across exec).
CHILD = """
import json, os, resource, sys, time
import django
def high_water():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
django.setup()
# The trace keeps its samples in arrays, each stack once: objects a sampler kept would
# be allocated among the import's freed ones and hold their pages (the RSS it traces).
from array import array
trace_rss, trace_at, stacks = array("d"), array("i"), {}
if os.environ.get("BENCH_TRACE"):
    import threading
    main_id = threading.main_thread().ident
    def resident():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    def where():
        frame, names = sys._current_frames().get(main_id), []
        while frame is not None:
            code = frame.f_code
            if "/memoryui/" in code.co_filename or "/generation/" in code.co_filename:
                names.append(code.co_name)
            frame = frame.f_back
        return " > ".join(reversed(names))
    trace_rss.extend([0.0] * 100_000)
    trace_at.extend([0] * 100_000)
    def sample():
        for i in range(len(trace_rss)):
            trace_rss[i] = resident()
            stack = where()
            trace_at[i] = stacks.setdefault(stack, len(stacks))
            time.sleep(0.05)
    threading.Thread(target=sample, daemon=True).start()
if sys.argv[1] == "--migrate":
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    raise SystemExit
from memoryui.importer import import_workspace
before = high_water()
cpu = time.process_time()
result = import_workspace(__import__("pathlib").Path(sys.argv[1]), "bench")
cpu = time.process_time() - cpu
peak = high_water()
by_number = {number: stack for stack, number in stacks.items()}
trace = [(rss, by_number[at]) for rss, at in zip(trace_rss, trace_at) if rss]
phases = {}
for rss, stack in trace:
    names = stack.split(" > ")
    below = names[names.index("import_workspace") + 1:] if "import_workspace" in names else names
    phase = " > ".join(below[:4])
    low, high = phases.get(phase, (rss, rss))
    phases[phase] = (min(low, rss), max(high, rss))
top = sorted(trace, reverse=True)[:5]
print(json.dumps({"before_mb": before, "peak_mb": peak, "cpu_s": cpu,
                  "files": result.files, "errors": len(result.errors),
                  "phases": phases, "top": top}))
"""


def recreate_postgres(url: str) -> None:
    """The database of ``url`` dropped and created again, empty."""
    import psycopg
    from psycopg import sql

    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    admin = psycopg.conninfo.make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as connection, connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def child(
    source: Path, workdir: Path, label: str, trace: bool = False, database_url: str = ""
) -> dict[str, Any]:
    (workdir / label).mkdir()
    if database_url:
        recreate_postgres(database_url)
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="memoryui.settings",
        DEBUG=os.environ.get("DEBUG", "1"),  # development settings, as bin/start runs them
        DATABASE_URL=database_url or f"sqlite:///{workdir / label / 'db.sqlite3'}",
        MEMORYUI_VAR_DIR=str(workdir / label / "var"),
        LOG_LEVEL="WARNING",
    )
    # The database is migrated by a process of its own first, as a deployment does
    # (``migrate`` at release; the worker that imports never runs it): migrating a new
    # database from scratch reaches ~110 MB, which would stand in the import's peak.
    subprocess.run([sys.executable, "-c", CHILD, "--migrate"], cwd=PROJECT_DIR, env=env, check=True)
    if trace:
        env["BENCH_TRACE"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(source)],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="reuse (or generate) the tree here")
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--gzip", action="store_true", help="a .tar.gz instead of a .tar")
    parser.add_argument("--goal-mb", type=float, default=GOAL_MB)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="sample the import's RSS every 50 ms and print the peak of each phase",
    )
    parser.add_argument("--tar-only", action="store_true", help="skip the directory import")
    parser.add_argument(
        "--database-url",
        default="",
        help="a PostgreSQL database to import into (dropped and created again for each "
        "import), e.g. postgres://postgres@127.0.0.1:5432/mui_bench_tar; default: SQLite",
    )
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="memoryui-tar-"))
    try:
        tree = args.tree or workdir / "tree"
        if not (tree / "README.md").exists():
            generate_tree.main([str(tree), "--rollouts", str(args.rollouts)])
        archive = workdir / ("workspace.tar.gz" if args.gzip else "workspace.tar")
        with tarfile.open(archive, "w:gz" if args.gzip else "w") as tar:
            for entry in sorted(tree.iterdir()):
                tar.add(entry, arcname=entry.name)
        print(f"{archive.name}: {archive.stat().st_size / 1e6:.1f} MB", file=sys.stderr)
        directory = (
            None
            if args.tar_only
            else child(tree, workdir, "directory", args.trace, args.database_url)
        )
        snapshot = child(archive, workdir, "tar", args.trace, args.database_url)
        print(f"{'import of':<12} {'files':>6} {'CPU s':>7} {'RSS before':>11} {'peak MB':>8}")
        for label, row in (("directory", directory), (archive.name, snapshot)):
            if row is None:
                continue
            print(
                f"{label:<12} {row['files']:6d} {row['cpu_s']:7.2f} {row['before_mb']:11.0f} "
                f"{row['peak_mb']:8.0f}"
            )
        ok = "ok" if snapshot["peak_mb"] <= args.goal_mb else "OVER"
        print(f"tar peak {snapshot['peak_mb']:.0f} MB (goal <= {args.goal_mb:.0f} MB: {ok})")
        if directory is not None:
            print(f"tar CPU {snapshot['cpu_s'] / directory['cpu_s']:.2f}x the directory's")
        if args.trace:
            print(f"{archive.name}: the lowest and highest RSS sampled in each phase (MB)")
            for phase, (low, high) in snapshot["phases"].items():
                print(f"  {low:6.0f} {high:6.0f}  {phase}")
            print("  the five highest samples:")
            for rss, stack in snapshot["top"]:
                print(f"  {rss:6.0f}  {stack}")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
