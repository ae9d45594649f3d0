"""CPU a live review poll costs the web process, through Django's test client (the
middleware, the view, the queries; no network, no gunicorn): an unchanged poll answered
early from the proposal's stamp in the cache, the same poll answered by the view (the
quick answer off), and the login page for scale.

    .venv/bin/python bench/bench_live_poll.py \\
        --database-url postgres://postgres@127.0.0.1:5432/memoryui_live_poll_bench \\
        --cache-url redis://127.0.0.1:6379/11

Each kind is requested ``--requests`` times (default 400) after a warm-up; the table
shows this process's CPU time per request (p50 and p95) and the queries of one request.
The database is created for the run and dropped after it (its name must contain
``bench``); without ``--database-url``, a SQLite file in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import bench_pages  # noqa: E402
import generate_tree  # noqa: E402


def setup(database_url: str, cache_url: str, workdir: Path) -> None:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="memoryui.settings",
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(48),
        ALLOWED_HOSTS="testserver",
        DATABASE_URL=database_url or f"sqlite:///{workdir / 'poll.sqlite3'}",
        CACHE_URL=cache_url,
        MEMORYUI_VAR_DIR=str(workdir / "var"),
        STATIC_ROOT=str(workdir / "static"),
        SECURE_SSL_REDIRECT="0",
        SESSION_COOKIE_SECURE="0",
        CSRF_COOKIE_SECURE="0",
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()


def measure(client, url: str, query: dict, headers: dict, n: int, status: int) -> list[float]:  # type: ignore[no-untyped-def]
    """CPU milliseconds of each of ``n`` requests (after five to warm up)."""
    times = []
    for i in range(n + 5):
        started = time.process_time()
        answer = client.get(url, query, headers=headers)
        elapsed = (time.process_time() - started) * 1000
        if answer.status_code != status:
            raise SystemExit(f"{url}: HTTP {answer.status_code}, expected {status}")
        if i >= 5:
            times.append(elapsed)
    return times


def queries_of(client, url: str, query: dict, headers: dict) -> int:  # type: ignore[no-untyped-def]
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(url, query, headers=headers)
    return len(captured)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="")
    parser.add_argument("--cache-url", default="", help="Redis for Django's cache (CACHE_URL)")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rollouts", type=int, default=200)
    args = parser.parse_args(argv)
    if args.database_url and "bench" not in args.database_url.rsplit("/", 1)[-1]:
        raise SystemExit("the database's name must contain 'bench' (it is dropped after)")

    workdir = Path(tempfile.mkdtemp(prefix="memoryui-live-poll-"))
    try:
        generate_tree.main([str(workdir / "tree"), "--rollouts", str(args.rollouts)])
        setup(args.database_url, args.cache_url, workdir)
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client
        from django.test.utils import setup_test_environment
        from django.urls import reverse

        from memoryui import live_polls
        from memoryui.importer import import_workspace
        from memoryui.models import Layout, Membership, Role, Workspace

        setup_test_environment()
        from django.db import connection

        connection.creation.create_test_db(verbosity=0, autoclobber=True)
        call_command("collectstatic", interactive=False, verbosity=0)  # DEBUG=0's pages
        import_workspace(workdir / "tree", "bench")
        layout = Layout.objects.order_by("memories_dir").first()
        assert layout is not None
        proposal = bench_pages.proposal_pk(layout)
        user = get_user_model().objects.create_user("poller", password="poll-bench-pass-123")
        Membership.objects.create(
            workspace=Workspace.objects.get(name="bench"), user=user, role=Role.REVIEWER
        )
        client = Client()
        client.force_login(user)
        url = reverse("memoryui:proposal_live", args=["bench", layout.pk, proposal])
        first = client.get(url, {"drawn": 0, "at": ""})
        cursor = first.json()["cursor"]
        query = {"since": cursor, "at": ""}
        settled = client.get(url, query, headers={"If-None-Match": first["ETag"]})
        headers = {
            "If-None-Match": settled["ETag"],
            live_polls.TOKEN_HEADER: settled.get(live_polls.TOKEN_HEADER, ""),
        }

        rows = []
        settings.MEMORYUI_LIVE_FAST_POLLS = False
        rows.append(
            (
                "unchanged poll, by the view",
                measure(client, url, query, headers, args.requests, 304),
                queries_of(client, url, query, headers),
            )
        )
        settings.MEMORYUI_LIVE_FAST_POLLS = True
        # A token lives TOKEN_SECONDS: take a fresh one now and then, as a page does.
        early: list[float] = []
        while len(early) < args.requests:
            fresh = client.get(url, query, headers={"If-None-Match": headers["If-None-Match"]})
            headers[live_polls.TOKEN_HEADER] = fresh[live_polls.TOKEN_HEADER]
            early += measure(client, url, query, headers, 100, 304)
        rows.append(
            (
                "unchanged poll, early",
                early[: args.requests],
                queries_of(client, url, query, headers),
            )
        )
        login = Client()
        rows.append(
            (
                "login page",
                measure(login, reverse("login"), {}, {}, args.requests, 200),
                queries_of(login, reverse("login"), {}, {}),
            )
        )
        cache = "Redis" if args.cache_url else "memory"
        print(f"{connection.vendor}, cache: {cache}, {args.requests} requests each")
        print(f"{'request':<30} {'CPU p50 ms':>10} {'CPU p95 ms':>10} {'queries':>8}")
        for label, times, queries in rows:
            p95 = sorted(times)[max(0, round(0.95 * len(times)) - 1)]
            print(f"{label:<30} {statistics.median(times):10.2f} {p95:10.2f} {queries:8d}")
        connection.creation.destroy_test_db(connection.settings_dict["NAME"], verbosity=0)
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
