"""Benchmark the snapshot export of a large workspace against plain ``tar``.

One run: generate (``generate_tree.py``, 10,000 rollouts by default) or reuse a tree,
import it into a fresh database, curate its ``memory_summary.md`` as a person would,
then time in interleaved rounds (three by default, medians reported):

- ``tar``: GNU tar archiving the same tree, ``tar -cf OUT -C TREE .``;
- ``export``: ``memoryui.snapshots.export_snapshot`` of the imported workspace into a
  snapshot directory, everything included: the plan of every layout and its lint (kept
  by content after the first export, which is timed on its own, before the rounds),
  reading every blob from the database, writing the archive, fsync, and the audit
  record.

Target: export within 1.5x of tar.

    .venv/bin/python bench/bench_export.py --tree /tmp/bench-10k
    .venv/bin/python bench/bench_export.py --tree /tmp/bench-10k \\
        --database-url postgres://postgres@127.0.0.1:5432/memoryui_bench
    .venv/bin/python bench/bench_export.py --json > result.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import platform
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

TARGET = 1.5
WORKSPACE_NAME = "bench"
CURATED = "## General Tips\n- Curated in memoryui before the export.\n"


def time_tar(tree: Path, out: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["tar", "-cf", str(out), "-C", str(tree), "."], check=True)
    seconds = time.perf_counter() - started
    out.unlink()
    return seconds


def time_export(snapshot_id: str, out: Path) -> tuple[float, int]:
    from memoryui.models import Workspace
    from memoryui.snapshots import export_snapshot

    gc.collect()
    workspace = Workspace.objects.get(name=WORKSPACE_NAME)
    started = time.perf_counter()
    result = export_snapshot(workspace, snapshot_id=snapshot_id, base_path=out)
    seconds = time.perf_counter() - started
    assert result.snapshot.path is not None
    size = result.snapshot.size
    result.snapshot.path.unlink()
    return seconds, size


def curate() -> None:
    from memoryui.models import Blob, Layout, MemoryVersion

    layout = Layout.objects.get(workspace__name=WORKSPACE_NAME, memories_dir="memories")
    data = CURATED.encode()
    digest = hashlib.sha256(data).hexdigest()
    Blob.objects.get_or_create(sha256=digest, defaults={"size": len(data), "data": data})
    latest = MemoryVersion.objects.filter(layout=layout, document="memory_summary").order_by(
        "-number"
    )[0]
    MemoryVersion.objects.create(
        layout=layout,
        document="memory_summary",
        number=latest.number + 1,
        blob_id=digest,
        author_kind=MemoryVersion.Author.PERSON,
    )


def clear_lint_caches() -> None:
    from generation import lint
    from memoryui.models import LintResult

    lint._LINT_CACHE.clear()
    LintResult.objects.all().delete()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time export_snapshot against plain tar.")
    parser.add_argument("--tree", type=Path, help="reuse (or generate and keep) the tree here")
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database-url", help="default: SQLite in a temp dir")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--profile", action="store_true", help="cProfile one more export")
    args = parser.parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="bench-export-"))
    try:
        tree = bench_import.prepare_tree(args, workdir, log)
        db = bench_import.configure_django(args.database_url, workdir)
        bench_import.reset_database(db)
        from memoryui.importer import import_workspace

        started = time.perf_counter()
        imported = import_workspace(tree, WORKSPACE_NAME)
        log(f"imported {imported.files} files in {time.perf_counter() - started:.1f}s")
        curate()
        out = workdir / "snapshots"
        out.mkdir()
        clear_lint_caches()
        first, _ = time_export("first", out)
        tar_times, export_times, size = [], [], 0
        time_tar(tree, workdir / "warmup.tar")
        for round_ in range(args.repeat):
            tar_times.append(time_tar(tree, workdir / "plain.tar"))
            seconds, size = time_export(f"round-{round_}", out)
            export_times.append(seconds)
            log(f"round {round_ + 1}: tar {tar_times[-1]:.3f}s, export {seconds:.3f}s")
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(time_export, "profiled", out)
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("cumulative").print_stats(30)
            stats.sort_stats("tottime").print_stats(20)
        tar_s, export_s = statistics.median(tar_times), statistics.median(export_times)
        result = {
            "rollouts": bench_import.count_rollouts(tree),
            "files": imported.files,
            "database": bench_import.describe_database(db),
            "python": platform.python_version(),
            "tar_seconds": round(tar_s, 3),
            "export_seconds": round(export_s, 3),
            "ratio": round(export_s / tar_s, 2),
            "target": TARGET,
            "first_export_seconds": round(first, 3),
            "archive_bytes": size,
        }
        if args.json:
            print(json.dumps(result))
        else:
            log(
                f"\n{result['files']:,} files, {result['database']}: tar {tar_s:.3f}s, "
                f"export {export_s:.3f}s = {result['ratio']}x (target <= {TARGET}x); "
                f"first export, lint not cached yet: {first:.3f}s; archive {size:,} bytes"
            )
        bench_import.drop_database(db)
        return 0 if export_s / tar_s <= TARGET else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
