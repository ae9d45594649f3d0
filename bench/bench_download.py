"""The snapshot download a sandbox waits on when it restores (the SDK's ``restore``
through ``memoryui_client``: ``GET /api/workspaces/<name>/snapshots/<id>``), served as in
production: gunicorn (3 workers, DEBUG=0), PostgreSQL, Redis, over loopback HTTP.

    .venv/bin/python bench/bench_download.py --tree /tmp/bench-10k \\
        --database-url postgres://postgres@127.0.0.1:5432/memoryui_download_bench \\
        --redis-url redis://127.0.0.1:6379/7

One run: import the 10,000-rollout tree, archive it with ``tar -cf`` (the baseline: its
CPU, the median of three runs and one before each download), upload that archive as a
sandbox would (``persist``), then download it ``--downloads`` times with the sandbox's
token. Each download is an
archive of the upload's files outside the memory layouts and each layout's memory as
the workspace serves it (the latest approved versions that pass lint). The CPU of each
download is the growth of the gunicorn processes' user + system time (``/proc``); the
body is checked against its ``Content-Length`` and ``X-Memoryui-Sha256``.

The first download lints the served memory (two 2.35 MB ``MEMORY.md`` never linted);
lint results are kept in the database, so every later one, in any worker, scans nothing.
A download of a state already sent is the archive kept then (``download_cache``); so
``--changed`` more downloads follow, each after a change to the workspace (a raw
memory's modification time, as a re-import that saw it touched records it), which
builds the archive again. Goal: every download after the first <= 1.5x tar's CPU. Only
127.0.0.1 is contacted; the database is created for the run and dropped after it (its
name must contain ``bench``).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import resource
import shutil
import signal
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

import bench_load  # noqa: E402
import generate_tree  # noqa: E402

GOAL = 1.5
HOST = bench_load.HOST
WORKSPACE = "bench"
SNAPSHOT_ID = "sandbox-1"
TICKS = os.sysconf("SC_CLK_TCK")


def prepare(tree: Path, env: dict[str, str]) -> str:
    """Migrate, import the tree, and make an admin's API token (what a sandbox holds)."""
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections

    from memoryui import tokens
    from memoryui.importer import import_workspace
    from memoryui.models import Membership, Role, Workspace

    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    import_workspace(tree, WORKSPACE)
    user = get_user_model().objects.create_user("sandbox", password=None)
    workspace = Workspace.objects.get(name=WORKSPACE)
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    secret = tokens.create_token(user, "download bench", [WORKSPACE]).secret
    connections.close_all()
    return secret


def change_workspace(round_: int) -> None:
    """What a re-import that found a raw memory touched records: its new mtime."""
    from django.db import connections

    from memoryui.models import WorkspaceFile

    raw = WorkspaceFile.objects.filter(
        workspace__name=WORKSPACE, kind=WorkspaceFile.Kind.RAW_MEMORY
    ).order_by("path")[:1]
    WorkspaceFile.objects.filter(pk__in=raw).update(mtime_ns=1_800_000_000 * 10**9 + round_)
    connections.close_all()


def group_cpu(pgid: int) -> float:
    """User + system CPU seconds of every live process in the process group."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


def tar_cpu(tree: Path, out: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["tar", "-cf", str(out), "-C", str(tree), "."], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def upload(port: int, secret: str, archive: Path) -> None:
    conn = http.client.HTTPConnection(HOST, port, timeout=600)
    try:
        with archive.open("rb") as body:
            conn.request(
                "PUT",
                f"/api/workspaces/{WORKSPACE}/snapshots/{SNAPSHOT_ID}",
                body=body,
                headers={
                    "Authorization": f"Bearer {secret}",
                    "Content-Type": "application/x-tar",
                    "Content-Length": str(archive.stat().st_size),
                },
            )
            answer = conn.getresponse()
            text = answer.read()
    finally:
        conn.close()
    if answer.status != 202:
        raise SystemExit(f"upload answered HTTP {answer.status}: {text[:500]!r}")


def download(port: int, secret: str) -> tuple[int, int]:
    """Download the snapshot; check its length and hash. Returns (members, bytes)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=600)
    try:
        conn.request(
            "GET",
            f"/api/workspaces/{WORKSPACE}/snapshots/{SNAPSHOT_ID}",
            headers={"Authorization": f"Bearer {secret}"},
        )
        answer = conn.getresponse()
        digest = hashlib.sha256()
        size = 0
        while chunk := answer.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    finally:
        conn.close()
    if answer.status != 200:
        raise SystemExit(f"download answered HTTP {answer.status}")
    if int(answer.getheader("Content-Length", "-1")) != size:
        raise SystemExit("the body's length is not its Content-Length")
    if answer.getheader("X-Memoryui-Sha256") != digest.hexdigest():
        raise SystemExit("the body's sha256 is not its X-Memoryui-Sha256")
    return size, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="reuse (or generate) the tree here")
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/memoryui_download_bench"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/7")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (compose: 3)")
    parser.add_argument("--downloads", type=int, default=7)
    parser.add_argument(
        "--changed", type=int, default=3, help="downloads after a change to the workspace"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database and temp dir")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="memoryui-download-"))
    tree = args.tree or workdir / "tree"
    if not (tree / "README.md").exists():
        bench_load.log(f"generating {args.rollouts:,} rollouts in {tree} ...")
        generate_tree.main([str(tree), "--rollouts", str(args.rollouts)])
    bench_load.reset_database(args.database_url)
    env = bench_load.environment(args.database_url, args.redis_url, workdir)
    # Warm bytecode kept in the scratch directory, as a running deployment has it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    server = None
    try:
        secret = prepare(tree, env)
        archive = workdir / "tree.tar"
        tar_times = [tar_cpu(tree, archive) for _ in range(3)]
        port = bench_load.free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "memoryui.wsgi:application"]
            + ["--bind", f"{HOST}:{port}", "--workers", str(args.workers), "--timeout", "600"],
            cwd=PROJECT_DIR,
            env=env,
            stdout=(workdir / "gunicorn.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        bench_load.wait_until_up(port, server, "/accounts/login/")
        upload(port, secret, archive)
        bench_load.log(f"load average at the start: {os.getloadavg()[0]:.2f}")
        cpu: list[float] = []
        rounds = args.downloads + args.changed
        for number in range(1, rounds + 1):
            changed = number > args.downloads
            if changed:
                change_workspace(number)
            # tar again each round: its CPU moves by a fifth from run to run here.
            tar_times.append(tar_cpu(tree, workdir / "again.tar"))
            before = group_cpu(server.pid)
            started = time.perf_counter()
            size, _ = download(port, secret)
            wall = time.perf_counter() - started
            time.sleep(0.2)  # let the worker finish its bookkeeping after the last byte
            cpu.append(group_cpu(server.pid) - before)
            tar_cpu_ = statistics.median(tar_times)
            print(
                f"download {number}{' (after a change)' if changed else ''}: {size:,} bytes,"
                f" {wall:.2f} s, {cpu[-1]:.2f} s CPU = {cpu[-1] / tar_cpu_:.1f}x tar"
            )
        tar = statistics.median(tar_times)
        print(f"tar -cf of the tree: {tar:.2f} s CPU (median of {len(tar_times)} runs)")
        print(f"first download (lint cold): {cpu[0]:.2f} s CPU = {cpu[0] / tar:.1f}x tar")
        verdicts = []
        for label, group in (
            ("later downloads, nothing changed", cpu[1 : args.downloads]),
            ("downloads after a change (built again)", cpu[args.downloads :]),
        ):
            if not group:
                continue
            worst = max(group)
            verdicts.append(worst / tar <= GOAL)
            print(
                f"{label}: median {statistics.median(group):.2f} s ="
                f" {statistics.median(group) / tar:.2f}x, worst {worst:.2f} s"
                f" = {worst / tar:.2f}x tar (goal <= {GOAL}x each:"
                f" {'ok' if verdicts[-1] else 'over'})"
            )
        verdict = "ok" if all(verdicts) else "over"
        bench_load.log(f"load average at the end: {os.getloadavg()[0]:.2f}")
        return 0 if verdict == "ok" else 1
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        if not args.keep:
            bench_load.reset_database(args.database_url, drop_only=True)
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
