"""Benchmark the commands people wait on after curating: ``manage.py writeback`` of one
changed 40 KB MEMORY.md and ``manage.py export_snapshot`` of the whole workspace, each
as its own process (start-up, plan, lint, write, the re-sync and the printed link
included), against GNU tar archiving the same tree (``tar -cf OUT -C TREE .``).

One run: generate (``generate_tree.py``, 10,000 rollouts by default) or reuse a tree,
copy it (write-back writes into it), import the copy into a fresh database, then in
interleaved rounds (three by default, medians reported) time the CPU (user + system)
of ``tar``, of a write-back of a MEMORY.md curated anew for the round, and of an
export. Lint results are kept in the database: a saved version is linted by a worker
once it is saved (this process plays the dashboard and its worker, untimed), so the
write-back finds its one new content scanned, and the export nothing to scan.

Goals: write-back of one changed file <= 2x tar's CPU; export <= 1.5x. Each round
also times the same two operations in this process, warm, as the dashboard's worker and
web processes run them (the pages' write-back button, the API's and the page's export):
the difference is the command's own start (Python, Django, the models).

    .venv/bin/python bench/bench_writeback.py --tree /tmp/bench-10k
    .venv/bin/python bench/bench_writeback.py --rollouts 2000 --repeat 2
    .venv/bin/python bench/bench_writeback.py --database-url \\
        postgres://postgres@127.0.0.1:5432/memoryui_bench
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import statistics
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

import bench_import  # noqa: E402  (needs the path set above)
import generate_tree  # noqa: E402

WRITEBACK_GOAL = 2.0
EXPORT_GOAL = 1.5
WORKSPACE_NAME = "bench"
ENTRY_BYTES = 40 * 1024


def child_cpu(command: list[str], **kwargs: object) -> float:
    """User + system CPU seconds of ``command`` (run to completion, must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} failed:\n{done.stdout}\n{done.stderr}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def format_load() -> str:
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


def curate(round_: int) -> str:
    """A new current MEMORY.md of the first layout, 40 KB, different in every round."""
    from memoryui import curation
    from memoryui.models import Layout, MemoryVersion

    memories_dir = generate_tree.LAYOUTS[0].memories_dir
    layout = Layout.objects.get(workspace__name=WORKSPACE_NAME, memories_dir=memories_dir)
    document = MemoryVersion.Document.MEMORY_MD
    current = curation.latest(layout, document)
    line = f"- curated in round {round_}: keep the deploy checklist next to the runbook\n"
    text = f"# Task Group: curated {round_}\n\nscope: benchmark\n\n" + line * (
        ENTRY_BYTES // len(line)
    )
    curation.save_document(
        layout,
        document,
        text,
        user=None,
        reason="benchmark",
        based_on=current.number if current else None,
    )
    return memories_dir


def in_process_writeback(round_: int) -> float:
    """CPU seconds of ``write_back`` here, of a MEMORY.md curated anew (untimed)."""
    from memoryui.models import Layout
    from memoryui.writeback import write_back

    memories_dir = curate(round_)
    layout = Layout.objects.get(workspace__name=WORKSPACE_NAME, memories_dir=memories_dir)
    gc.collect()
    start = time.process_time()
    write_back(layout)
    return time.process_time() - start


def in_process_export(base_path: Path, snapshot_id: str) -> float:
    """CPU seconds of ``export_snapshot`` here (the archive is removed afterwards)."""
    from memoryui.models import Workspace
    from memoryui.snapshots import export_snapshot

    workspace = Workspace.objects.get(name=WORKSPACE_NAME)
    gc.collect()
    start = time.process_time()
    export_snapshot(workspace, snapshot_id=snapshot_id, base_path=base_path)
    spent = time.process_time() - start
    (base_path / f"{snapshot_id}.tar").unlink()
    return spent


def profile_commands(
    out: Path, manage: list[str], env: dict[str, str], snapshots: Path, round_: int
) -> None:
    """One more write-back and export, each under cProfile (untimed)."""
    import pstats

    out.mkdir(parents=True, exist_ok=True)
    memories_dir = curate(round_)
    commands = {
        "writeback": ["writeback", WORKSPACE_NAME, "--layout", memories_dir],
        "export": ["export_snapshot", WORKSPACE_NAME, "--base-path", str(snapshots)]
        + ["--snapshot-id", "profiled"],
    }
    for name, command in commands.items():
        prof = out / f"{name}.prof"
        child_cpu(
            [sys.executable, "-m", "cProfile", "-o", str(prof), *manage[1:], *command], env=env
        )
        print(f"=== {name}: top 30 by cumulative time ({prof})")
        pstats.Stats(str(prof)).strip_dirs().sort_stats("cumulative").print_stats(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time write-back and export against tar.")
    parser.add_argument("--tree", type=Path, help="reuse (or generate and keep) the tree here")
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database-url", help="default: SQLite in a temp dir")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after the timed rounds, run each command once more under cProfile, save "
        "writeback.prof and export.prof in DIR and print their top entries",
    )
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="bench-writeback-"))
    try:
        source = bench_import.prepare_tree(args, workdir, print)
        tree = workdir / "copy"
        shutil.copytree(source, tree, symlinks=True)
        db = bench_import.configure_django(args.database_url, workdir)
        bench_import.reset_database(db)
        from memoryui.celery import app
        from memoryui.importer import import_workspace

        # The worker's part: the lint queued when curate() saves a version runs here.
        app.conf.task_always_eager = True

        imported = import_workspace(tree, WORKSPACE_NAME)
        print(f"imported {imported.files} files ({bench_import.describe_database(db)})")
        env = {**os.environ, "MEMORYUI_BASE_URL": "http://127.0.0.1:8000"}
        # Warm bytecode, as a person's second command has: with PYTHONDONTWRITEBYTECODE
        # (set in some shells and containers) every command would compile ~0.4 s of
        # source. Kept in the scratch directory, so neither the checkout nor .venv change.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
        manage = [sys.executable, str(PROJECT_DIR / "manage.py")]
        for command in ("writeback", "export_snapshot"):
            child_cpu([*manage, command, "--help"], env=env)  # untimed: compiles once
        print(f"load average at the start: {format_load()}")
        tar_cpu, writeback_cpu, export_cpu = [], [], []
        warm_writeback: list[float] = []
        warm_export: list[float] = []
        in_process_export(workdir / "snapshots", "warm-up")  # loads what an export loads
        for round_ in range(args.repeat):
            out = workdir / "plain.tar"
            tar_cpu.append(child_cpu(["tar", "-cf", str(out), "-C", str(tree), "."]))
            out.unlink()
            memories_dir = curate(round_)
            writeback_cpu.append(
                child_cpu([*manage, "writeback", WORKSPACE_NAME, "--layout", memories_dir], env=env)
            )
            snapshots = workdir / "snapshots"
            export_cpu.append(
                child_cpu(
                    [*manage, "export_snapshot", WORKSPACE_NAME, "--base-path", str(snapshots)]
                    + ["--snapshot-id", f"round-{round_}"],
                    env=env,
                )
            )
            (snapshots / f"round-{round_}.tar").unlink()
            warm_writeback.append(in_process_writeback(args.repeat + round_))
            warm_export.append(in_process_export(snapshots, f"warm-{round_}"))
            print(
                f"round {round_ + 1}: tar {tar_cpu[-1]:.2f}s, write-back {writeback_cpu[-1]:.2f}s,"
                f" export {export_cpu[-1]:.2f}s; in a warm process {warm_writeback[-1]:.2f}s"
                f" and {warm_export[-1]:.2f}s (CPU)"
            )
        if args.profile:
            profile_commands(args.profile, manage, env, workdir / "snapshots", args.repeat)
        print(f"load average at the end: {format_load()}")
        tar = statistics.median(tar_cpu)
        ok = True
        for what, times, goal in (
            ("write-back of one changed file", writeback_cpu, WRITEBACK_GOAL),
            ("export", export_cpu, EXPORT_GOAL),
            ("write-back in a warm process", warm_writeback, WRITEBACK_GOAL),
            ("export in a warm process", warm_export, EXPORT_GOAL),
        ):
            ratio = statistics.median(times) / tar
            ok &= ratio <= goal
            print(
                f"{what}: {statistics.median(times):.2f}s CPU = {ratio:.2f}x tar's "
                f"{tar:.2f}s (goal <= {goal}x: {'ok' if ratio <= goal else 'over'})"
            )
        return 0 if ok else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
