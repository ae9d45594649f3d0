"""Benchmark ``memoryui.importer.import_workspace`` on a large synthetic memory tree.

One run: generate the tree (``bench/generate_tree.py``, 10,000 rollouts by default) or
reuse one, then time

- the baseline: plain Python reading every file, hashing it with sha256 and parsing it
  (``json.loads`` per JSONL line, header lines of markdown files, JSON for the
  selection), no database;
- a full import into a fresh database;
- a re-import of the unchanged tree;

in interleaved rounds (three by default, medians reported), and print the times with
the ratios import/baseline (target <= 3x) and re-import/baseline (target <= 0.3x).

    .venv/bin/python bench/bench_import.py                       # SQLite in a temp dir
    .venv/bin/python bench/bench_import.py --tree /tmp/bench-10k  # generate once, reuse
    .venv/bin/python bench/bench_import.py \\
        --database-url postgres://postgres@127.0.0.1:5432/memoryui_bench
    .venv/bin/python bench/bench_import.py --breakdown --profile --json

Django is configured here, before ``django.setup()``: ``DJANGO_SETTINGS_MODULE``,
``DATABASE_URL`` (a temporary SQLite file unless ``--database-url``) and
``MEMORYUI_VAR_DIR`` (a temporary directory). A Postgres database named in
``--database-url`` is dropped and created for every import, so its name must contain
``bench``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import generate_tree  # noqa: E402  (needs the path set above)

IMPORT_TARGET = 3.0
# What "time" means: this process's CPU time (the default: on a shared machine it moves
# far less with other people's load than wall time), or wall time (``--clock wall``; with
# PostgreSQL it also counts the server's work).
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
clock = time.process_time
REIMPORT_TARGET = 0.3
# Finding and recording the agents' memory reads adds at most this share to an import.
USAGE_SHARE_TARGET = 0.15
WORKSPACE_NAME = "bench"


# --- baseline -------------------------------------------------------------------------


@dataclass
class BaselineCounts:
    files: int = 0
    bytes: int = 0
    json_lines: int = 0
    header_lines: int = 0


def _header_lines(text: str) -> int:
    """Split the ``key: value`` lines at the top of a markdown file, as a reader of raw
    memories and rollout summaries must; the body is left as it is."""
    count = 0
    for line in text.splitlines():
        key, sep, _value = line.partition(":")
        if not sep or not key or " " in key:
            break
        count += 1
    return count


def baseline(root: Path) -> BaselineCounts:
    """The least any importer has to do: read, hash and parse every file once."""
    counts = BaselineCounts()
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                    continue
                with open(entry.path, "rb") as fh:
                    data = fh.read()
                counts.files += 1
                counts.bytes += len(data)
                hashlib.sha256(data).hexdigest()
                name = entry.name
                if name.endswith(".jsonl"):
                    for line in data.split(b"\n"):
                        if line.strip():
                            json.loads(line)
                            counts.json_lines += 1
                elif name.endswith(".json"):
                    json.loads(data)
                elif name.endswith(".md"):
                    counts.header_lines += _header_lines(data.decode("utf-8"))
    return counts


# --- database -------------------------------------------------------------------------


@dataclass(frozen=True)
class Database:
    url: str
    vendor: str  # "sqlite" or "postgresql"
    sqlite_path: Path | None


def configure_django(url: str | None, workdir: Path) -> Database:
    """Point the settings at a scratch database and var dir, then set Django up.

    ``memoryui.settings`` reads the environment at import time, so all of this must
    happen before ``django.setup()``."""
    sqlite_path = None
    if url is None:
        sqlite_path = workdir / "bench.sqlite3"
        url = f"sqlite:///{sqlite_path}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "memoryui.settings"
    os.environ.setdefault("DEBUG", "1")  # development settings, as bin/start runs them
    os.environ["DATABASE_URL"] = url
    os.environ["MEMORYUI_VAR_DIR"] = str(workdir / "var")
    os.environ.setdefault("LOG_LEVEL", "WARNING")

    import django

    django.setup()
    from django.db import connection

    if connection.vendor == "postgresql":
        name = connection.settings_dict["NAME"]
        if "bench" not in name:
            raise SystemExit(
                f"refusing to drop and recreate Postgres database {name!r}: "
                "give one whose name contains 'bench', e.g. memoryui_bench"
            )
    elif connection.vendor != "sqlite":
        raise SystemExit(f"unsupported database vendor {connection.vendor!r}")
    return Database(url, connection.vendor, sqlite_path)


def _postgres_admin(callback: Callable[[Any, str], None]) -> None:
    """Run ``callback(cursor, dbname)`` on the server's ``postgres`` database."""
    import psycopg
    from django.db import connection

    params = connection.settings_dict
    with (
        psycopg.connect(
            host=params["HOST"] or None,
            port=params["PORT"] or None,
            user=params["USER"] or None,
            password=params["PASSWORD"] or None,
            dbname="postgres",
            autocommit=True,
        ) as admin,
        admin.cursor() as cursor,
    ):
        callback(cursor, params["NAME"])


def _drop_postgres(cursor: Any, name: str) -> None:
    from psycopg import sql

    cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _create_postgres(cursor: Any, name: str) -> None:
    from psycopg import sql

    _drop_postgres(cursor, name)
    cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def reset_database(db: Database) -> None:
    """An empty, migrated database (migration time is not measured)."""
    from django.core.management import call_command
    from django.db import connections

    connections.close_all()
    if db.vendor == "postgresql":
        _postgres_admin(_create_postgres)
    else:
        assert db.sqlite_path is not None
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db.sqlite_path}{suffix}").unlink(missing_ok=True)
    call_command("migrate", verbosity=0)


def drop_database(db: Database) -> None:
    from django.db import connections

    connections.close_all()
    if db.vendor == "postgresql":
        _postgres_admin(_drop_postgres)


def describe_database(db: Database) -> str:
    from django.db import connection

    if db.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            return f"PostgreSQL {cursor.fetchone()[0]}"
    import sqlite3

    return f"SQLite {sqlite3.sqlite_version}"


def database_bytes(db: Database) -> int | None:
    from django.db import connection

    if db.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            return int(cursor.fetchone()[0])
    assert db.sqlite_path is not None
    return sum(
        p.stat().st_size for p in (Path(f"{db.sqlite_path}{s}") for s in ("", "-wal")) if p.exists()
    )


# --- measuring ------------------------------------------------------------------------


@dataclass
class ImportNumbers:
    seconds: float
    files: int
    added: int
    changed: int
    unchanged: int
    errors: int
    # PostgreSQL on this machine: the CPU its server process spent for the import (read
    # from /proc), the work that this process's own CPU time leaves out.
    server_cpu_seconds: float | None = None


def server_cpu() -> float | None:
    """CPU seconds (user + system) of the PostgreSQL backend serving this connection, when
    the server runs on this machine and /proc shows it; None otherwise (SQLite runs in
    this process, so its work is in this process's own CPU time)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def run_import(root: Path, *, gc_off: bool = False) -> ImportNumbers:
    from memoryui.importer import import_workspace

    forget_parses()
    gc.collect()  # start every import with the same heap, not a debt from the last one
    if gc_off:
        gc.disable()
    try:
        server_before = server_cpu()
        started = clock()
        result = import_workspace(root, WORKSPACE_NAME)
        seconds = clock() - started
        server_after = server_cpu()
    finally:
        gc.enable()
    return ImportNumbers(
        seconds,
        result.files,
        result.added,
        result.changed,
        result.unchanged,
        len(result.errors),
        None if server_before is None or server_after is None else server_after - server_before,
    )


def forget_parses() -> None:
    """Empty this process's caches of parsed texts (the memory documents' entries,
    kept per text): every round imports as a worker that has not seen these texts
    does, not only the first (at 10,000 rollouts, a MEMORY.md parsed in an earlier
    round was not parsed again; at 100,000 it is too large to keep)."""
    from generation.review import comparison, document, repeated
    from memoryui import documents

    for module in (document, comparison, repeated, documents):
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def run_search_index() -> tuple[float, float | None]:
    """The search vectors of what the import wrote, as the worker's task computes them
    once the import has committed (PostgreSQL; nothing to do elsewhere): its time on
    this benchmark's clock and the server's CPU, outside the import's own figures."""
    from memoryui import search

    server_before = server_cpu()
    started = clock()
    search.index_pending()
    seconds = clock() - started
    server_after = server_cpu()
    server = None if server_before is None or server_after is None else server_after - server_before
    return seconds, server


@contextmanager
def reads_not_looked_for() -> Iterator[None]:
    """Imports inside find no memory reads (every rollout as if it read none)."""
    from memoryui import usage

    real = usage.find_reads
    usage.find_reads = lambda *args: ((), ())
    try:
        yield
    finally:
        usage.find_reads = real


def profile(label: str, func: Callable[[], object], out: Path, top: int) -> str:
    """Run ``func`` under cProfile, save the stats, and return the top entries."""
    profiler = cProfile.Profile()
    profiler.runcall(func)
    out.parent.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(out)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs()
    text.write(f"=== {label}: top {top} by internal time ({out})\n")
    stats.sort_stats("tottime").print_stats(top)
    text.write(f"=== {label}: top {top} by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(top)
    return text.getvalue()


class Breakdown:
    """Inclusive wall time and call counts of chosen functions during one import.

    Monkeypatches for the duration of a ``with`` block; anything the importer no longer
    has is skipped. Entries nest (``_copy_rows`` runs inside ``ParsedRows.write``), so
    they do not add up to the total. The wrappers cost about a microsecond a call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list[tuple[Any, str, Any]] = []

    def _record(self, label: str, started: float) -> None:
        self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - started
        self.calls[label] = self.calls.get(label, 0) + 1

    def wrap(self, owner: Any, name: str, label: Callable[..., str] | str) -> None:
        original = owner.__dict__.get(name)
        if original is None:
            return
        is_static = isinstance(original, staticmethod)
        is_class = isinstance(original, classmethod)
        func = original.__func__ if is_static or is_class else original
        labeller = label if callable(label) else (lambda *a, **k: label)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self._record(labeller(*args, **kwargs), started)

        wrapped = staticmethod(timed) if is_static else classmethod(timed) if is_class else timed
        setattr(owner, name, wrapped)
        self._undo.append((owner, name, original))

    def wrap_iterator(self, owner: Any, name: str, label: str) -> None:
        """Time the consumption of the iterator a function returns (file reading)."""
        original = owner.__dict__.get(name)
        if original is None:
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            iterator = iter(original(*args, **kwargs))
            while True:
                started = time.perf_counter()
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                finally:
                    self.seconds[label] = (
                        self.seconds.get(label, 0.0) + time.perf_counter() - started
                    )
                self.calls[label] = self.calls.get(label, 0) + 1
                yield item

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def __enter__(self) -> Breakdown:
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.db.models import Model, QuerySet

        from generation import memory_entries, memory_reads, tree
        from memoryui import bulk, usage
        from memoryui.importer import parsing, reading, syncing, versions

        self.wrap_iterator(tree, "read_source", "read files (tree.read_source)")
        for name in (
            "discover_layouts",
            "classify",
            "parse_rollout",
            "parse_raw_memory",
            "parse_rollout_summary",
            "parse_selection",
            "decode_text",
        ):
            self.wrap(tree, name, f"tree.{name}")
        for owner, names in (
            (reading.TreeReader, ("collect_directory", "collect_entries")),
            (syncing.WorkspaceSync, ("_sync_layouts", "_store", "_write_blobs", "_write_files")),
            (parsing.ParsedRows, ("build", "write")),
            (versions.VersionRecorder, ("record_documents", "record_skills", "propose")),
        ):
            for name in names:
                self.wrap(owner, name, f"{owner.__name__}.{name}")
        for name in ("_copy_rows", "_execute_rows", "insert_with_ids"):  # memoryui.bulk
            # Per table: which one's rows the server is slow to take.
            self.wrap(bulk, name, lambda m, *a, _n=name, **k: f"bulk.{_n} {m.__name__}")
        for name in ("find_reads", "record_reads", "_write_reads"):  # memory reads
            self.wrap(usage, name, f"usage.{name}")
        self.wrap_iterator(memory_reads, "segment_reads", "memory_reads.segment_reads")
        for name in ("entry_lines", "entry_hits"):
            self.wrap(memory_entries, name, f"memory_entries.{name}")
        self.wrap(QuerySet, "bulk_create", lambda qs, *a, **k: f"bulk_create {qs.model.__name__}")
        self.wrap(QuerySet, "bulk_update", lambda qs, *a, **k: f"bulk_update {qs.model.__name__}")
        self.wrap(Model, "__init__", lambda obj, *a, **k: f"{type(obj).__name__}.__init__")
        # The commit: where PostgreSQL checks the deferred foreign keys of every row added.
        self.wrap(BaseDatabaseWrapper, "commit", "commit (deferred constraint checks)")
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()

    def table(self, label: str, total: float) -> str:
        lines = [
            f"=== {label}: {total:.2f}s in all; inclusive times, nested entries overlap",
            f"{'function':<40} {'seconds':>8} {'calls':>8}",
        ]
        for name, seconds in sorted(self.seconds.items(), key=lambda kv: -kv[1]):
            if seconds >= 0.005:
                lines.append(f"{name:<40} {seconds:>8.2f} {self.calls[name]:>8}")
        return "\n".join(lines)


def breakdown(label: str, root: Path) -> tuple[str, dict[str, float]]:
    with Breakdown() as timer:
        started = time.perf_counter()
        run_import(root)
        total = time.perf_counter() - started
    return timer.table(label, total), {k: round(v, 3) for k, v in timer.seconds.items()}


@dataclass
class Report:
    date: str
    machine: dict[str, Any]
    tree: dict[str, Any]
    database: str
    gc_off: bool
    clock: str = "cpu"
    baseline_seconds: list[float] = field(default_factory=list)
    import_runs: list[ImportNumbers] = field(default_factory=list)
    reimport_runs: list[ImportNumbers] = field(default_factory=list)
    database_bytes: int | None = None
    breakdown: dict[str, dict[str, float]] = field(default_factory=dict)
    # PostgreSQL: the search vectors computed after each import's commit (wall, server CPU).
    index_runs: list[tuple[float, float | None]] = field(default_factory=list)
    # --usage-share: imports into an empty database with the memory reads not looked for.
    no_usage_runs: list[ImportNumbers] = field(default_factory=list)

    @property
    def usage_share(self) -> float | None:
        """What finding and recording the agents' memory reads adds to the import
        (issue 35's bound: 15 %), from the medians with and without it."""
        if not self.no_usage_runs:
            return None
        without = statistics.median(r.seconds for r in self.no_usage_runs)
        return self.import_seconds / without - 1

    @property
    def baseline(self) -> float:
        return statistics.median(self.baseline_seconds)

    @property
    def import_seconds(self) -> float:
        return statistics.median(r.seconds for r in self.import_runs)

    @property
    def reimport_seconds(self) -> float:
        return statistics.median(r.seconds for r in self.reimport_runs)

    def server_seconds(self, runs: list[ImportNumbers]) -> float | None:
        seconds = [r.server_cpu_seconds for r in runs if r.server_cpu_seconds is not None]
        return statistics.median(seconds) if seconds else None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = {
            "baseline_seconds": round(self.baseline, 3),
            "import_seconds": round(self.import_seconds, 3),
            "reimport_seconds": round(self.reimport_seconds, 3),
            "clock": self.clock,
            "import_server_cpu_seconds": self.server_seconds(self.import_runs),
            "reimport_server_cpu_seconds": self.server_seconds(self.reimport_runs),
            "import_ratio": round(self.import_seconds / self.baseline, 2),
            "reimport_ratio": round(self.reimport_seconds / self.baseline, 2),
            "import_target": IMPORT_TARGET,
            "reimport_target": REIMPORT_TARGET,
            "import_ok": self.import_seconds / self.baseline <= IMPORT_TARGET,
            "reimport_ok": self.reimport_seconds / self.baseline <= REIMPORT_TARGET,
        }
        if self.index_runs:
            data["summary"]["search_index_seconds"] = round(
                statistics.median(seconds for seconds, _ in self.index_runs), 3
            )
        if self.usage_share is not None:
            data["summary"]["usage_share"] = round(self.usage_share, 3)
            data["summary"]["usage_share_ok"] = self.usage_share <= USAGE_SHARE_TARGET
        return data

    def table(self) -> str:
        base = self.baseline
        rows = [
            ("baseline: read + sha256 + parse", base, None),
            ("import into an empty database", self.import_seconds, IMPORT_TARGET),
            ("re-import, nothing changed", self.reimport_seconds, REIMPORT_TARGET),
        ]
        tree = self.tree
        lines = [
            f"{tree['rollouts_on_disk']:,} rollouts, {tree['files']:,} files, "
            f"{tree['bytes'] / 1e6:.1f} MB; {self.database}"
            f"{' (cyclic GC off during imports)' if self.gc_off else ''}; "
            f"{self.machine['cpus']} CPUs, Python {self.machine['python']}",
            f"{'step':<34} {self.clock + ' s':>8} {'x baseline':>11} {'target':>8}",
        ]
        for label, seconds, target in rows:
            ratio = seconds / base
            verdict = (
                ""
                if target is None
                else (f"<= {target:<4} " + ("ok" if ratio <= target else "OVER"))
            )
            lines.append(f"{label:<34} {seconds:>8.2f} {ratio:>11.3f} {verdict:>8}")
        server = self.server_seconds(self.import_runs)
        if server is not None:
            again = self.server_seconds(self.reimport_runs) or 0.0
            lines.append(
                f"PostgreSQL server CPU: import {server:.2f} s, re-import {again:.2f} s "
                f"(in the wall time above, not in this process's CPU)"
            )
        if self.index_runs and self.database.lower().startswith("postgresql"):
            wall = statistics.median(seconds for seconds, _ in self.index_runs)
            cpu = [c for _, c in self.index_runs if c is not None]
            on_server = f", server CPU {statistics.median(cpu):.2f} s" if cpu else ""
            lines.append(
                f"search vectors after the import's commit (a worker's task): "
                f"{self.clock} {wall:.2f} s{on_server} (not in the import's figures)"
            )
        if self.usage_share is not None:
            without = statistics.median(r.seconds for r in self.no_usage_runs)
            verdict = "ok" if self.usage_share <= USAGE_SHARE_TARGET else "OVER"
            lines.append(
                f"{'import, memory reads not looked for':<34} {without:>8.2f} "
                f"{without / base:>11.3f}"
            )
            lines.append(
                f"memory usage adds {self.usage_share:.1%} to the import "
                f"(<= {USAGE_SHARE_TARGET:.0%} {verdict})"
            )
        size = ""
        if self.database_bytes is not None:
            size = f"; database {self.database_bytes / 1e6:.0f} MB"
        load = self.machine.get("loadavg_1min", [])
        lines.append(
            f"(medians of {len(self.import_runs)} interleaved rounds{size}; "
            f"1-min load average {' -> '.join(f'{x:.2f}' for x in load)})"
        )
        return "\n".join(lines)


# --- main -----------------------------------------------------------------------------


def prepare_tree(args: argparse.Namespace, workdir: Path, log: Callable[[str], None]) -> Path:
    root: Path = args.tree or workdir / "workspace"
    if root.exists() and any(root.iterdir()) and not args.regenerate:
        log(f"reusing the tree at {root}")
        return root
    if root.exists() and any(root.iterdir()):
        if not generate_tree.is_generated_tree(root):
            raise SystemExit(f"{root} was not written by generate_tree.py; not deleting it")
        shutil.rmtree(root)
    started = time.perf_counter()
    stats = generate_tree.generate(root, args.rollouts, args.seed)
    log(
        f"generated {root} in {time.perf_counter() - started:.1f}s: {generate_tree.describe(stats)}"
    )
    return root


def count_rollouts(root: Path) -> int:
    return sum(
        1
        for layout in generate_tree.LAYOUTS
        if (root / layout.sessions_dir).is_dir()
        for name in os.listdir(root / layout.sessions_dir)
        if name.endswith(".jsonl")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time import_workspace against a plain read+hash+parse baseline."
    )
    parser.add_argument("--rollouts", type=int, default=generate_tree.DEFAULT_ROLLOUTS)
    parser.add_argument("--seed", type=int, default=generate_tree.DEFAULT_SEED)
    parser.add_argument(
        "--tree",
        type=Path,
        help="workspace to use: reused if it holds anything, else generated "
        "there and kept (default: generated in a temp dir)",
    )
    parser.add_argument(
        "--regenerate",
        action="store_true",
        help="generate the tree even if --tree already holds one",
    )
    parser.add_argument(
        "--database-url",
        help="e.g. postgres://postgres@127.0.0.1:5432/memoryui_bench "
        "(dropped and recreated; default: a temporary SQLite file)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds of baseline + import into a fresh database + re-import; "
        "medians are reported (default 3)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="afterwards, profile one import and one re-import with cProfile "
        "(the .prof files stay in the temp dir with --keep)",
    )
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="afterwards, time one import and one re-import per function "
        "(importer phases, parsers, bulk_create per model)",
    )
    parser.add_argument(
        "--usage-share",
        action="store_true",
        help="each round also imports into an empty database without looking for the "
        "agents' memory reads, and the table gives what usage adds (bound: 15 %%)",
    )
    parser.add_argument(
        "--gc-off",
        action="store_true",
        help="diagnostic: disable Python's cyclic garbage collector during "
        "the timed imports, to show what it costs the importer",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temp dir (tree, SQLite file, profiles) and the database",
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default=None,
        help="measure this process's CPU time or wall time (default: wall time on "
        "PostgreSQL, whose server does much of the work in its own process; CPU on SQLite)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    global clock
    if args.clock is None:
        args.clock = "wall" if args.database_url else "cpu"
    clock = CLOCKS[args.clock]
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    # With --json, stdout carries only the JSON; progress goes to stderr.
    def log(message: str) -> None:
        print(message, file=sys.stderr if args.json else sys.stdout, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="memoryui-bench-"))
    db: Database | None = None
    try:
        root = prepare_tree(args, workdir, log)
        db = configure_django(args.database_url, workdir)
        report = Report(
            date=datetime.now(UTC).isoformat(timespec="seconds"),
            machine={
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "loadavg_1min": [os.getloadavg()[0]],
            },
            tree={},
            database=db.vendor,
            gc_off=args.gc_off,
            clock=args.clock,
        )
        # An untimed pass first: the page cache then holds the tree for every step, and
        # the baseline does not pay for a cold cache that the imports would not see.
        counts = baseline(root)
        report.tree = {
            "path": str(root),
            "rollouts_on_disk": count_rollouts(root),
            **asdict(counts),
        }
        # Rounds interleave the three steps so that load from other processes (2 cores)
        # shifts all of them alike; medians are reported.
        for run in range(args.repeat):
            gc.collect()  # as before each import
            started = clock()
            baseline(root)
            report.baseline_seconds.append(clock() - started)
            log(f"baseline {run + 1}: {report.baseline_seconds[-1]:.2f}s")
            reset_database(db)
            first = run_import(root, gc_off=args.gc_off)
            log(
                f"import {run + 1}: {first.seconds:.2f}s ({first.added} added, "
                f"{first.errors} reported problems)"
            )
            report.index_runs.append(run_search_index())
            if db.vendor == "postgresql":
                log(f"search vectors {run + 1}: {report.index_runs[-1][0]:.2f}s")
            again = run_import(root, gc_off=args.gc_off)
            log(
                f"re-import {run + 1}: {again.seconds:.2f}s ({again.unchanged} unchanged, "
                f"{again.added} added, {again.changed} changed)"
            )
            if again.added or again.changed:
                log("warning: the re-import found changes in an unchanged tree")
            report.import_runs.append(first)
            report.reimport_runs.append(again)
            if args.usage_share:
                reset_database(db)
                with reads_not_looked_for():
                    bare = run_import(root, gc_off=args.gc_off)
                log(f"import without usage {run + 1}: {bare.seconds:.2f}s")
                report.no_usage_runs.append(bare)
        report.machine["loadavg_1min"].append(os.getloadavg()[0])
        report.database = describe_database(db)
        report.database_bytes = database_bytes(db)

        if args.breakdown:
            reset_database(db)
            for label in ("import", "re-import"):
                text, seconds = breakdown(label, root)
                report.breakdown[label] = seconds
                log(text)

        if args.profile:
            profiles = workdir / "profiles"
            reset_database(db)
            log(
                profile(
                    "import", lambda: run_import(root), profiles / "import.prof", args.profile_top
                )
            )
            log(
                profile(
                    "re-import",
                    lambda: run_import(root),
                    profiles / "reimport.prof",
                    args.profile_top,
                )
            )

        if args.json:
            print(json.dumps(report.as_json(), indent=2))
        else:
            print()
            print(report.table())
        return 0
    finally:
        if db is not None and not args.keep:
            drop_database(db)
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
