"""The remote snapshot store under many sandboxes, deployed as compose.yaml deploys it:
gunicorn (compose's command line, 3 workers), two Celery workers on the default queue and
beat, PostgreSQL, a Redis server of the benchmark's own, and S3-compatible object storage
(moto's server) for the uploads.

    .venv/bin/python bench/bench_store.py                  # 50 sandboxes, 2 minutes
    .venv/bin/python bench/bench_store.py --faults         # ... and kill things meanwhile
    .venv/bin/python bench/bench_store.py --sandboxes 5 --seconds 20 --rollouts 200

One workspace of ``--rollouts`` rollouts (bench/generate_tree.py) is imported, then every
sandbox loops on its own snapshot id through ``memoryui_client.SnapshotClient`` (what the
SDK's ``RemoteSnapshotSpec`` calls): restore, change 1-5 files (a new rollout with its raw
memory and rollout summary as phase one writes them, an edited note, now and then an
agent's edit of ``MEMORY.md``), persist. Each restore is checked byte for byte:

- the files outside the memory folders are exactly what that sandbox last persisted;
- ``MEMORY.md`` and ``memory_summary.md`` are the approved versions (nobody approves
  anything during the loop, so an agent's edit must never come back);
- every other memory file holds bytes some sandbox persisted for that path (or the
  imported tree's): no mixed or torn file.

When the loop stops, the merge jobs must drain; then every persist answered 202 must have
been merged exactly once, and a last restore of each sandbox must hold every raw memory
any sandbox wrote. ``--faults`` kills one Celery worker (``kill -9``; a new one starts),
one gunicorn worker, and restarts the Redis server once, at a third, a half and two thirds
of the loop, and prints when. The exit status is 0 only when every check held.

Only 127.0.0.1 is contacted. The database is created for the run and dropped after it
(its name must contain ``bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import bench_load  # noqa: E402
import generate_tree  # noqa: E402

HOST = bench_load.HOST
WORKSPACE = "store"
BUCKET = "memoryui-bench"
DOCUMENTS = ("MEMORY.md", "memory_summary.md")
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "memoryui-bench",
    "AWS_SECRET_ACCESS_KEY": "memoryui-bench-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
PYTHON = sys.executable
# The three settled sizes of a day-long sandbox loop, shortened: beat sends again what a
# dead worker held once its lease has run out.
FAST_RECOVERY = {
    "MEMORYUI_RECOVERY_SECONDS": "5",
    "MEMORYUI_JOB_LEASE_SECONDS": "15",
    "MEMORYUI_LEASE_RENEW_SECONDS": "3",
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def compose_web_command() -> list[str]:
    """compose.yaml's gunicorn command line (bound to loopback by the caller)."""
    import yaml

    compose = yaml.safe_load((PROJECT_DIR / "compose.yaml").read_text())
    return [str(part) for part in compose["services"]["web"]["command"]]


@dataclass
class Deployment:
    env: dict[str, str]
    workdir: Path
    port: int
    redis_port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    redis: subprocess.Popen[bytes] | None = None
    faults: list[str] = field(default_factory=list)

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            ["redis-server", "--bind", HOST, "--port", str(self.redis_port), "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ping = subprocess.run(
                ["redis-cli", "-p", str(self.redis_port), "ping"], capture_output=True, text=True
            )
            if ping.stdout.strip() == "PONG":
                return
            time.sleep(0.2)
        raise SystemExit("redis-server did not start")

    def start(self, name: str, command: list[str]) -> None:
        out = (self.workdir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            command,
            cwd=PROJECT_DIR,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_worker(self, name: str) -> None:
        self.start(
            name,
            [PYTHON, "-m", "celery", "-A", "memoryui", "worker", "-Q", "celery",
             "--concurrency", "2", "--hostname", f"{name}@%h", "--loglevel", "INFO"],
        )  # fmt: skip

    def start_all(self) -> None:
        web = compose_web_command()
        web = [PYTHON, "-m", "gunicorn", *web[1:]]
        web[web.index("--bind") + 1] = f"{HOST}:{self.port}"
        self.start("web", web)
        self.start_worker("worker1")
        self.start_worker("worker2")
        schedule = self.workdir / "beat-schedule"
        self.start(
            "beat",
            [PYTHON, "-m", "celery", "-A", "memoryui", "beat", "-s", str(schedule),
             "--loglevel", "INFO"],
        )  # fmt: skip
        bench_load.wait_until_up(self.port, self.processes["web"], "/healthz")

    def note(self, what: str) -> None:
        self.faults.append(f"{time.strftime('%H:%M:%S')} {what}")
        log(what)

    def kill_worker(self) -> None:
        victim = self.processes["worker1"]
        os.killpg(victim.pid, signal.SIGKILL)  # the worker and its pool processes
        victim.wait()
        self.note("kill -9 of Celery worker1 and its pool")
        time.sleep(2)
        self.start_worker("worker1b")
        self.note("Celery worker1b started in its place")

    def kill_web_worker(self) -> None:
        children = subprocess.run(
            ["pgrep", "-P", str(self.processes["web"].pid)], capture_output=True, text=True
        ).stdout.split()
        if children:
            os.kill(int(children[0]), signal.SIGKILL)
            self.note(f"kill -9 of gunicorn worker {children[0]} (its master starts another)")

    def restart_redis(self) -> None:
        assert self.redis is not None
        self.redis.kill()
        self.redis.wait()
        self.note("Redis killed (what it held is lost: it keeps nothing on disk)")
        time.sleep(2)
        self.start_redis()
        self.note("Redis started again")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        if self.redis is not None and self.redis.poll() is None:
            self.redis.kill()
            self.redis.wait()


def prepare(tree: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """Migrate, import the tree, create an admin's token (in this process, on the same
    database); the token and the layouts' memories folders."""
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from memoryui import tokens
    from memoryui.importer import import_workspace
    from memoryui.models import Layout
    from tests.factories import make_user

    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    started = time.perf_counter()
    import_workspace(tree, WORKSPACE)
    log(f"imported the tree in {time.perf_counter() - started:.1f} s")
    user = make_user("store-bench", staff=True)
    secret = tokens.create_token(user, "store bench", [WORKSPACE]).secret
    folders = list(
        Layout.objects.filter(workspace__name=WORKSPACE).values_list("memories_dir", flat=True)
    )
    connections.close_all()
    return secret, sorted(folders)


def inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def read_tar(fileobj: Any) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=fileobj, mode="r:") as archive:
        for member in archive:
            if member.isfile():
                extracted = archive.extractfile(member)
                assert extracted is not None
                files[member.name.removeprefix("./")] = extracted.read()
    return files


def write_tar(files: dict[str, bytes]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"./{path}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            archive.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


class Shared:
    """What every sandbox has persisted: the bytes each memory path may hold."""

    def __init__(self, tree: Path, folders: list[str]) -> None:
        self.lock = threading.Lock()
        self.allowed: dict[str, set[bytes]] = {}
        self.raw_memories: dict[str, bytes] = {}  # written by a sandbox: path -> bytes
        for path in tree.rglob("*"):
            name = path.relative_to(tree).as_posix()
            if path.is_file() and inside(name, folders):
                self.allowed.setdefault(name, set()).add(path.read_bytes())
        self.documents: dict[str, bytes] = {}

    def allow(self, files: dict[str, bytes], folders: list[str]) -> None:
        with self.lock:
            for path, data in files.items():
                if inside(path, folders):
                    self.allowed.setdefault(path, set()).add(data)


@dataclass
class Results:
    restores: list[float] = field(default_factory=list)
    persists: list[float] = field(default_factory=list)
    jobs: dict[int, int] = field(default_factory=dict)  # import job -> files changed
    errors: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    # With --faults: requests whose connection a killed web worker cut (no answer came,
    # or a download's body stopped short as it was killed; the sandbox tries again),
    # counted apart from errors.
    cut: list[str] = field(default_factory=list)
    faults: bool = False
    web_worker_killed_at: float | None = None  # time.monotonic()
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, message: str) -> None:
        with self.lock:
            (self.mismatches if kind == "mismatch" else self.errors).append(message)

    def failed(self, what: str, exc: Exception) -> None:
        no_answer = getattr(exc, "status", "") is None
        killed = self.web_worker_killed_at
        # A download whose body the client found cut, within seconds of the kill.
        body_cut = (
            killed is not None
            and time.monotonic() - killed < 5
            and ("was cut short" in str(exc) or "download broke" in str(exc))
        )
        if self.faults and (no_answer or body_cut):
            with self.lock:
                self.cut.append(f"{what}: {exc}")
        else:
            self.add("error", f"{what}: {exc}")


def check_restore(
    sandbox: str, got: dict[str, bytes], owns: list[dict[str, bytes]], shared: Shared,
    folders: list[str], results: Results,
) -> dict[str, bytes]:  # fmt: skip
    """Check a restore; which of ``owns`` (what the sandbox may have persisted last: one
    state, or two after a persist whose answer was lost) its own files are."""
    outside = {p: d for p, d in got.items() if not inside(p, folders)}
    own = owns[-1]
    if outside not in owns:
        extra = sorted(set(outside) - set(own))[:3]
        missing = sorted(set(own) - set(outside))[:3]
        torn = sorted(p for p in set(own) & set(outside) if own[p] != outside[p])[:3]
        results.add(
            "mismatch",
            f"{sandbox}: its own files differ (extra {extra}, missing {missing}, changed {torn})",
        )
    for path, data in got.items():
        if not inside(path, folders):
            continue
        if path.rpartition("/")[2] in DOCUMENTS and path in shared.documents:
            if data != shared.documents[path]:
                results.add("mismatch", f"{sandbox}: {path} is not the approved version")
        elif data not in shared.allowed.get(path, ()):
            results.add("mismatch", f"{sandbox}: {path} holds bytes nobody persisted")
    return outside if outside in owns else own


def sandbox_loop(
    index: int, client: Any, deadline: float, shared: Shared, folders: list[str],
    sessions: list[str], results: Results, seed: int,
) -> list[dict[str, bytes]]:  # fmt: skip
    """One sandbox's loop; what it persisted last outside the memory folders (two states
    when the answer to its last persist was lost)."""
    rng = random.Random(seed * 1000 + index)
    sandbox = f"sandbox-{index:02d}"
    owns: list[dict[str, bytes]] = [{}]
    runs = 0
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            body = asyncio.run(client.download(sandbox))
        except Exception as exc:  # noqa: BLE001 (every failure is counted and shown)
            results.failed(f"{sandbox} restore", exc)
            time.sleep(1)
            continue
        with results.lock:
            results.restores.append(time.perf_counter() - started)
        got = read_tar(body)
        owns = [check_restore(sandbox, got, owns, shared, folders, results)]

        files = dict(got)
        runs += 1
        layout = rng.randrange(len(folders))
        memories, sessions_dir = folders[layout], sessions[layout]
        rid = f"{sandbox}-run-{runs:04d}"
        changed = {
            f"{sessions_dir}/{rid}.jsonl": rollout_line(rid, rng),
            f"{memories}/raw_memories/{rid}.md": raw_memory(rid, sessions_dir),
            f"{memories}/rollout_summaries/{rid}_work.md": f"# {rid}\n\nWorked.\n".encode(),
        }
        if rng.random() < 0.5:
            changed[f"notes/{sandbox}.md"] = f"note {runs} of {sandbox}\n".encode()
        if rng.random() < 0.2:  # the agent edits its memory; nobody approves it here
            path = f"{memories}/MEMORY.md"
            changed[path] = files.get(path, b"") + f"\n<!-- {rid} -->\n".encode()
        files.update(changed)
        shared.allow(changed, folders)
        new_own = {p: d for p, d in files.items() if not inside(p, folders)}
        started = time.perf_counter()
        try:
            answer = asyncio.run(client.upload(sandbox, write_tar(files)))
        except Exception as exc:  # noqa: BLE001
            results.failed(f"{sandbox} persist", exc)
            owns = [*owns, new_own]  # stored or not: the answer was lost
            continue
        with results.lock:
            results.persists.append(time.perf_counter() - started)
            results.jobs[int(answer["import_job"])] = len(changed)
        with shared.lock:  # answered 202: its raw memory must reach every sandbox
            for path, data in changed.items():
                if "/raw_memories/" in path:
                    shared.raw_memories[path] = data
        owns = [new_own]
    return owns


def rollout_line(rid: str, rng: random.Random) -> bytes:
    text = f"run {rid}: {rng.choice(['deploy', 'fix a test', 'write docs', 'triage'])}"
    item = {
        "updated_at": "2026-12-04T10:00:00+00:00",
        "rollout_id": rid,
        "input": [{"content": text, "role": "user"}],
        "generated_items": [],
        "terminal_metadata": {"terminal_state": "completed"},
        "final_output": "done",
    }
    return (json.dumps(item) + "\n").encode()


def raw_memory(rid: str, sessions_dir: str) -> bytes:
    return (
        f"rollout_id: {rid}\nupdated_at: 2026-12-04T10:00:00+00:00\n"
        f"rollout_path: {sessions_dir}/{rid}.jsonl\n"
        f"rollout_summary_file: rollout_summaries/{rid}_work.md\n"
        f"terminal_state: completed\n\n---\ndescription: {rid}\ntask: {rid}\n---\nDid {rid}.\n"
    ).encode()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drain(jobs: set[int], timeout: float) -> tuple[float, dict[str, int]]:
    """Seconds until no import job of the run is queued or running; their statuses."""
    from django.db import close_old_connections

    from memoryui.models import ImportJob

    started = time.monotonic()
    while True:
        close_old_connections()
        statuses = dict(
            ImportJob.objects.filter(pk__in=jobs).values_list("pk", "status").iterator()
        )
        active = [pk for pk, s in statuses.items() if s in ("queued", "running")]
        if not active or time.monotonic() - started > timeout:
            counts: dict[str, int] = {}
            for status in statuses.values():
                counts[status] = counts.get(status, 0) + 1
            return time.monotonic() - started, counts
        time.sleep(0.5)


def merge_times(jobs: dict[int, int]) -> dict[int, list[float]]:
    from memoryui.models import ImportJob

    by_changed: dict[int, list[float]] = {}
    for pk, started, finished in ImportJob.objects.filter(pk__in=list(jobs)).values_list(
        "pk", "started_at", "finished_at"
    ):
        if started and finished:
            by_changed.setdefault(jobs[pk], []).append((finished - started).total_seconds())
    return by_changed


def show_logs(workdir: Path) -> None:
    """The errors in the deployment's logs, for a run that went wrong."""
    for path in sorted(workdir.glob("*.log")):
        lines = path.read_text(errors="replace").splitlines()
        shown = [i for i, line in enumerate(lines) if "Traceback" in line or "ERROR" in line]
        for first in shown[:3]:
            log(f"--- {path.name}, line {first + 1}:\n" + "\n".join(lines[first : first + 40]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--tree", type=Path, help="reuse (or generate) the tree here")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--faults", action="store_true", help="kill things during the loop")
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/memoryui_store_bench"
    )
    parser.add_argument("--drain-timeout", type=float, default=120)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument(
        "--keep-logs", type=Path, help="copy the deployment's logs (web, workers, beat) here"
    )
    args = parser.parse_args(argv)

    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request

    workdir = Path(tempfile.mkdtemp(prefix="memoryui-store-bench-"))
    deployment: Deployment | None = None
    moto: ThreadedMotoServer | None = None
    try:
        tree = args.tree or workdir / "tree"
        if not tree.exists():
            generate_tree.generate(tree, args.rollouts, args.seed)
        bench_load.reset_database(args.database_url)
        redis_port, s3_port = bench_load.free_port(), bench_load.free_port()
        moto = ThreadedMotoServer(ip_address=HOST, port=s3_port, verbose=False)
        moto.start()
        os.environ.update(S3_CREDENTIALS)
        import boto3

        s3_url = f"http://{HOST}:{s3_port}"
        boto3.client("s3", endpoint_url=s3_url).create_bucket(Bucket=BUCKET)
        env = bench_load.environment(args.database_url, f"redis://{HOST}:{redis_port}/0", workdir)
        env.update(S3_CREDENTIALS)
        env.update(FAST_RECOVERY)
        env.update(
            MEMORYUI_STORAGE="s3",
            MEMORYUI_S3_ENDPOINT_URL=s3_url,
            MEMORYUI_S3_BUCKET=BUCKET,
            MEMORYUI_S3_REGION="us-east-1",
            WEB_CONCURRENCY="3",
            PYTHONPATH=str(PROJECT_DIR),
        )
        deployment = Deployment(env, workdir, bench_load.free_port(), redis_port)
        deployment.start_redis()
        secret, folders = prepare(tree, env)
        from memoryui.models import Layout

        sessions = [
            Layout.objects.get(workspace__name=WORKSPACE, memories_dir=f).sessions_dir
            for f in folders
        ]
        deployment.start_all()
        from memoryui_client import SnapshotClient

        client = SnapshotClient(f"http://{HOST}:{deployment.port}", secret, workspace=WORKSPACE)
        shared = Shared(tree, folders)
        probe = read_tar(asyncio.run(client.download("probe")))
        shared.documents = {
            p: d
            for p, d in probe.items()
            if inside(p, folders) and p.rpartition("/")[2] in DOCUMENTS
        }

        # One sandbox alone on the idle deployment: restore after a persist, three times.
        idle: list[float] = []
        for round_ in range(3):
            files = dict(probe)
            files[f"notes/probe-{round_}.md"] = b"probe\n"
            asyncio.run(client.upload("probe", write_tar(files)))
            started = time.perf_counter()
            read_tar(asyncio.run(client.download("probe")))
            idle.append(time.perf_counter() - started)
        idle_restore = statistics.median(idle)
        log(f"a single restore on the idle deployment: {idle_restore * 1000:.0f} ms")

        results = Results(faults=args.faults)
        deadline = time.monotonic() + args.seconds
        last: dict[int, list[dict[str, bytes]]] = {}

        def run(index: int) -> None:
            last[index] = sandbox_loop(
                index, client, deadline, shared, folders, sessions, results, args.seed
            )

        threads = [threading.Thread(target=run, args=(i,)) for i in range(args.sandboxes)]
        loop_started = time.monotonic()
        for thread in threads:
            thread.start()
        if args.faults:
            for share, fault in (
                (1 / 3, deployment.kill_worker),
                (1 / 2, deployment.kill_web_worker),
                (2 / 3, deployment.restart_redis),
            ):
                time.sleep(max(0.0, loop_started + share * args.seconds - time.monotonic()))
                if fault == deployment.kill_web_worker:
                    results.web_worker_killed_at = time.monotonic()
                fault()
        for thread in threads:
            thread.join()
        log(f"loop done: {len(results.restores)} restores, {len(results.persists)} persists")

        from memoryui.models import ImportJob, ImportRun

        every_job = ImportJob.objects.filter(workspace__name=WORKSPACE, kind=ImportJob.Kind.SANDBOX)
        drained, statuses = drain(
            set(results.jobs) | set(every_job.values_list("pk", flat=True)), args.drain_timeout
        )
        log(f"merge jobs drained {drained:.1f} s after the loop: {statuses}")

        unmerged = {
            pk: f"{status}: {error}"
            for pk, status, error in ImportJob.objects.filter(
                pk__in=list(results.jobs)
            ).values_list("pk", "status", "error")
            if status != "done"
        }
        # A persist whose answer a killed web worker cut may have been stored and queued
        # already (its sandbox, not knowing, persists again): a job the loop never
        # heard of, merged like the others. Each job is merged once: one run each.
        all_jobs = list(every_job.values_list("pk", "status", "error"))
        unheard = [pk for pk, _, _ in all_jobs if pk not in results.jobs]
        cut_persists = sum(" persist: " in cut for cut in results.cut)
        if len(unheard) - 3 > cut_persists:  # the probe's three are unheard too
            results.add("mismatch", f"{len(unheard) - 3} merge jobs nobody asked for")
        unmerged.update(
            {pk: f"{status}: {error}" for pk, status, error in all_jobs if status != "done"}
        )
        runs = ImportRun.objects.filter(workspace__name=WORKSPACE).count()
        expected_runs = len(all_jobs) + 1  # every job's, and the first import's
        if runs != expected_runs:
            results.add("mismatch", f"{runs} import runs for {expected_runs} imports")
        log(
            f"{len(all_jobs)} merge jobs, {len(unheard) - 3} of them from persists whose "
            f"answer was cut ({cut_persists} cut), {runs - 1} merges recorded"
        )

        # Last restores: each sandbox's own files, every raw memory anyone wrote.
        for index in range(args.sandboxes):
            sandbox = f"sandbox-{index:02d}"
            got = read_tar(asyncio.run(client.download(sandbox)))
            check_restore(sandbox, got, last.get(index, [{}]), shared, folders, results)
            lost = [p for p, d in shared.raw_memories.items() if got.get(p) != d]
            if lost:
                how = "absent" if lost[0] not in got else "other bytes"
                results.add(
                    "mismatch", f"{sandbox}: {len(lost)} raw memories lost, e.g. {lost[0]} ({how})"
                )

        by_changed = merge_times(results.jobs)
        summary = {
            "sandboxes": args.sandboxes,
            "seconds": args.seconds,
            "rollouts": args.rollouts,
            "faults": deployment.faults,
            "restores": len(results.restores),
            "persists": len(results.persists),
            "idle_restore_ms": round(idle_restore * 1000, 1),
            "restore_p50_ms": round(percentile(results.restores, 0.5) * 1000, 1),
            "restore_p95_ms": round(percentile(results.restores, 0.95) * 1000, 1),
            "restore_p95_x_idle": round(percentile(results.restores, 0.95) / idle_restore, 2),
            "persist_p95_ms": round(percentile(results.persists, 0.95) * 1000, 1),
            "merge_median_s_by_files_changed": {
                k: round(statistics.median(v), 3) for k, v in sorted(by_changed.items())
            },
            "drain_seconds": round(drained, 1),
            "job_statuses": statuses,
            "unmerged_jobs": unmerged,
            "errors": results.errors[:20],
            "error_count": len(results.errors),
            "mismatches": results.mismatches[:20],
            "mismatch_count": len(results.mismatches),
            "cut_by_a_killed_web_worker": results.cut,
            "loadavg": os.getloadavg(),
        }
        ok = not results.errors and not results.mismatches and not unmerged
        summary["ok"] = ok
        if not ok:
            show_logs(workdir)
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            for key, value in summary.items():
                print(f"{key}: {value}")
        return 0 if ok else 1
    except BaseException:
        show_logs(workdir)
        raise
    finally:
        if deployment is not None:
            deployment.stop()
        if moto is not None:
            moto.stop()
        bench_load.reset_database(args.database_url, drop_only=True)
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for path in workdir.glob("*.log"):
                shutil.copy(path, args.keep_logs / path.name)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
