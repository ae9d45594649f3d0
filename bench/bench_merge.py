"""One sandbox persist's merge, in process: what each merge job of the snapshot store
costs, against reading the upload once.

    .venv/bin/python bench/bench_merge.py                       # 2,000 rollouts, SQLite
    .venv/bin/python bench/bench_merge.py --changed 5 --profile
    .venv/bin/python bench/bench_merge.py --database-url postgres://postgres@127.0.0.1:5432/memoryui_bench

A generated workspace (bench/generate_tree.py) is persisted once as a sandbox's plain
``.tar`` (``import_workspace(..., merge=<snapshot id>)`` with the member index the
upload's check makes, as the store's merge job calls it). Then, ``--rounds`` times, the
sandbox persists again with ``--changed`` files changed (one line appended to as many
rollouts, as a run that went on does; with ``--new``, as many new rollouts) and that
merge is timed. The baseline is reading
the upload once: the archive's members read and hashed, and the changed rollouts parsed.

Issue 36's goal: a merge costs at most the re-import of unchanged files (0.3x the
import baseline) plus work in proportion to the changed files; here, at most 0.3x
``bench_import.py``'s baseline of the same tree plus the changed files' parse. On
PostgreSQL the figures are wall time, the server's work included.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import pstats
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import bench_import  # noqa: E402
import bench_store  # noqa: E402
import generate_tree  # noqa: E402

WORKSPACE = "merge-bench"


# The files' time in the persists; --fresh-times gives each persist its own, as the
# SDK's restore leaves them (it writes every file anew, keeping modes but not times).
MTIME = 1_790_000_000


def write_tar(root: Path, target: Path, changed: dict[str, bytes], mtime: int = MTIME) -> None:
    """``root`` as a sandbox persists it (every file, sorted), with ``changed``: files
    of its own, in place of the tree's or added to it."""
    files = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files.keys() | changed.keys()):
            data = changed.get(name)
            if data is None:
                data = files[name].read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, mtime
            tar.addfile(info, io.BytesIO(data))


def phase_one_files(rollout: str) -> dict[str, bytes]:
    """What phase one writes for a new rollout of the generated tree's root layout
    (``sessions/`` with ``memories/``; an engineering rollout goes to its own), as the
    store benchmark's sandboxes write it."""
    sessions_dir, _, name = rollout.rpartition("/")
    rid = name.removesuffix(".jsonl")
    folder = "memories/engineering" if rollout.startswith("sessions/engineering/") else "memories"
    return {
        f"{folder}/raw_memories/{rid}.md": bench_store.raw_memory(rid, sessions_dir),
        f"{folder}/rollout_summaries/{rid}_work.md": f"# {rid}\n\nDid it.\n".encode(),
    }


def read_once(archive: Path, changed: dict[str, bytes]) -> float:
    """The baseline: every member read and hashed, the changed rollouts parsed."""
    from generation import tree

    started = time.perf_counter()
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                hashlib.sha256(handle.read()).hexdigest()
    for data in changed.values():
        tree.parse_rollout(data)
    return time.perf_counter() - started


def merge(
    archive: Path, sandbox: int, profiler: cProfile.Profile | None = None, fill: bool = False
) -> float:
    from generation import tree
    from memoryui.importer import import_workspace
    from memoryui.snapshot_store import _check_archive

    index = _check_archive(archive)  # at upload time, in the web process: not timed
    packed = tree.pack_index(index) if index.plain and index.verbatim else None
    rows = tree.unpack_index(packed) if packed is not None else None
    if profiler is not None:
        profiler.enable()
    started = time.perf_counter()
    result = import_workspace(
        archive, WORKSPACE, merge=f"sandbox-{sandbox}", index=rows, fill_only=fill
    )
    seconds = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
    assert result.imported_anything, "the merge imported nothing"
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--changed", type=int, default=1, help="rollouts changed a persist")
    parser.add_argument(
        "--new",
        action="store_true",
        help="each persist brings --changed new rollouts (a sandbox's new runs) instead",
    )
    parser.add_argument(
        "--served",
        action="store_true",
        help="with --new: each new rollout comes with its raw memory and rollout summary, "
        "and every persist carries those of every sandbox (as their restores serve them)",
    )
    parser.add_argument(
        "--fill",
        action="store_true",
        help="time the merge of a persist whose sandbox persisted again before it was merged, "
        "the later merged first (a backlog, merged newest first): with --served, the later "
        "persist lacks the round's raw memories and summaries (its restore did not have "
        "them yet), which the older one's merge adds",
    )
    parser.add_argument(
        "--fresh-times",
        action="store_true",
        help="every persist brings every file with a new mtime, as after the SDK's restore",
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--sandboxes",
        type=int,
        default=1,
        help="sandboxes persisting the workspace, each with its own files; the rounds "
        "go round them (each persisted the whole workspace first)",
    )
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    parser.add_argument("--profile", action="store_true", help="profile the last merge")
    parser.add_argument("--profile-top", type=int, default=40)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-merge-") as scratch:
        workdir = Path(scratch)
        root = workdir / "workspace"
        generate_tree.generate(root, rollouts=args.rollouts)
        db = bench_import.configure_django(args.database_url, workdir)
        bench_import.reset_database(db)
        first = workdir / "first.tar"
        write_tar(root, first, {})
        firsts = [merge(first, sandbox) for sandbox in range(1, args.sandboxes + 1)]
        print(
            f"first persist: {firsts[0]:.2f} s (the whole workspace)"
            + (f"; the last sandbox's: {firsts[-1]:.2f} s" if args.sandboxes > 1 else "")
        )
        rollouts = sorted(p.relative_to(root).as_posix() for p in root.glob("sessions/**/*.jsonl"))
        own: dict[int, dict[str, bytes]] = {n: {} for n in range(1, args.sandboxes + 1)}
        served: dict[str, bytes] = {}  # every sandbox's raw memories and summaries
        merges, baselines = [], []
        for round_ in range(args.rounds):
            sandbox = round_ % args.sandboxes + 1
            files = own[sandbox]
            picked = rollouts[round_ * args.changed : (round_ + 1) * args.changed]
            changed = {}
            for name in picked:
                data = files.get(name) or (root / name).read_bytes()
                if args.new:  # a new run: a rollout file of its own, next to the others
                    name = name.replace(".jsonl", f"-new{round_}.jsonl")
                    changed[name] = files[name] = data
                    if args.served:
                        served.update(phase_one_files(name))
                        changed.update(phase_one_files(name))
                else:
                    changed[name] = files[name] = data + data.splitlines(keepends=True)[-1]
            mtime = MTIME + 60 * (round_ + 1) if args.fresh_times else MTIME
            archive = workdir / f"persist-{round_}.tar"
            write_tar(root, archive, {**served, **files}, mtime)
            baselines.append(read_once(archive, changed))
            if args.fill:  # the sandbox's next persist, merged first
                later = workdir / f"persist-{round_}-later.tar"
                grown = {n: d + d.splitlines(keepends=True)[-1] for n, d in files.items()}
                fresh = {p for name in picked for p in phase_one_files(name)} if args.new else set()
                later_files = {p: d for p, d in served.items() if p not in fresh}
                write_tar(root, later, {**later_files, **grown}, mtime + 30)
                merge(later, sandbox)
                later.unlink()
            if args.profile and round_ == args.rounds - 1:
                profiler = cProfile.Profile()  # the merge only, not the upload's check
                merges.append(merge(archive, sandbox, profiler, fill=args.fill))
            else:
                merges.append(merge(archive, sandbox, fill=args.fill))
            archive.unlink()
        base, took = statistics.median(baselines), statistics.median(merges)
        print(
            f"{args.rollouts:,} rollouts, {args.sandboxes} sandbox"
            f"{'es' if args.sandboxes != 1 else ''}, {args.changed} changed a persist, "
            f"{db.vendor}: "
            f"merge {took * 1000:.0f} ms (median of {args.rounds}; "
            f"min {min(merges) * 1000:.0f}, max {max(merges) * 1000:.0f}), "
            f"reading the upload once {base * 1000:.0f} ms: {took / base:.2f}x"
        )
        if args.profile:
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text).strip_dirs()
            stats.sort_stats("cumulative").print_stats(args.profile_top)
            stats.sort_stats("tottime").print_stats(args.profile_top)
            print(text.getvalue())
        bench_import.drop_database(db)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
