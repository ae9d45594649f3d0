"""Server time per dashboard page on a large workspace (10,000 rollouts, a MEMORY.md of
~2,000 task groups), measured through Django's test client: the full request cycle
(middleware, view, queries, template) without a network or a browser.

    .venv/bin/python bench/bench_pages.py --tree /tmp/bench-10k          # SQLite
    .venv/bin/python bench/bench_pages.py --tree /tmp/bench-10k \\
        --database-url postgres://postgres@127.0.0.1:5432/memoryui_bench

Each page is requested once to warm caches, then ``--requests`` times (default 40);
the table shows p50, p95 and max milliseconds, the p95 of this process's CPU time per
request (what a busy shared machine changes least), the p95 as a multiple of the login
page's measured first in the same run, and the query count. Target: p95 under 50 ms for
every page.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import generate_tree  # noqa: E402

TARGET_P95_MS = 50.0
# Measured first, in the same run: the login page (no session, no workspace), for a
# ratio that says how much of a page's time is its own on a machine busy with other work.
LOGIN = "login page (baseline)"


def setup(url: str | None, workdir: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "memoryui.settings"
    os.environ["DATABASE_URL"] = url or f"sqlite:///{workdir / 'pages.sqlite3'}"
    os.environ["MEMORYUI_VAR_DIR"] = str(workdir / "var")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    # As bin/start runs it (no collectstatic, no HTTPS); bench_load.py measures DEBUG=0.
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from django.db import connection

    if connection.vendor == "postgresql" and "bench" not in connection.settings_dict["NAME"]:
        raise SystemExit("give a Postgres database whose name contains 'bench'")


def reset_postgres(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def pages() -> list[tuple[str, str]]:
    from django.urls import reverse

    from memoryui.models import Layout, RawMemory, Rollout

    layout = Layout.objects.select_related("workspace").order_by("memories_dir").first()
    assert layout is not None
    name = layout.workspace.name
    args = [name, layout.pk]
    rollout = Rollout.objects.filter(layout=layout).order_by("-segment_count").first()
    with_memory = RawMemory.objects.filter(layout=layout).values_list("rollout_id", flat=True)[0]
    assert rollout is not None
    history = history_url(layout)  # first: the proposal is based on the version it adds
    return [
        ("workspaces", reverse("memoryui:workspace_list")),
        ("workspace", reverse("memoryui:workspace_detail", args=[name])),
        ("layout overview", reverse("memoryui:layout_detail", args=args)),
        ("rollouts, page 1", reverse("memoryui:rollout_list", args=args)),
        ("rollouts, page 100", reverse("memoryui:rollout_list", args=args) + "?page=100"),
        ("rollouts, failed", reverse("memoryui:rollout_list", args=args) + "?state=failed"),
        ("rollouts, search", reverse("memoryui:rollout_list", args=args) + "?q=backoff"),
        (
            "rollout (most segments)",
            reverse("memoryui:rollout_detail", args=[*args, rollout.rollout_id]),
        ),
        ("rollout (with memory)", reverse("memoryui:rollout_detail", args=[*args, with_memory])),
        ("MEMORY.md", reverse("memoryui:memory_md", args=args)),
        ("MEMORY.md, page 50", reverse("memoryui:memory_md", args=args) + "?page=50"),
        ("MEMORY.md, find", reverse("memoryui:memory_md", args=args) + "?q=retry"),
        ("MEMORY.md, never read", reverse("memoryui:memory_md", args=args) + "?usage=never"),
        ("usage", reverse("memoryui:layout_usage", args=args)),
        ("memory_summary.md", reverse("memoryui:memory_summary", args=args)),
        ("proposal review", reverse("memoryui:proposal_review", args=[*args, proposal_pk(layout)])),
        (
            "proposal review, all",
            reverse("memoryui:proposal_review", args=[*args, proposal_pk(layout)])
            + "?all=1&page_memory_md=20",
        ),
        ("skills", reverse("memoryui:skill_list", args=args)),
        ("run, finished", reverse("memoryui:run_detail", args=[*args, finished_run_pk(layout)])),
        ("history, v1 -> v2 entries", history),
    ]


def finished_run_pk(layout) -> int:  # type: ignore[no-untyped-def]
    """The finished run of the benchmark's proposal (its page summarises ~2,000 entries)."""
    from memoryui.models import Proposal

    return Proposal.objects.get(pk=proposal_pk(layout)).run_id


def history_url(layout) -> str:  # type: ignore[no-untyped-def]
    """The history page, comparing entry by entry (by default) the imported MEMORY.md
    with a second version that renames one task group in forty and rewords one in
    twenty, as a consolidation would."""
    from django.urls import reverse

    from memoryui import curation
    from memoryui.models import MemoryVersion

    md = curation.latest(layout, MemoryVersion.Document.MEMORY_MD)
    if md.number == 1:
        lines = curation.text_of(md).split("\n")
        groups = 0
        out = []
        for i, line in enumerate(lines):
            if line.startswith("# Task Group: "):
                groups += 1
                if groups % 40 == 0:
                    line = line.replace("# Task Group: ", "# Task Group: Renamed: ", 1)
            elif line.startswith("scope:") and i % 20 == 0:
                line += " (reworded)"
            out.append(line)
        curation.save_document(
            layout,
            MemoryVersion.Document.MEMORY_MD,
            "\n".join(out),
            user=None,
            reason="bench: a consolidation",
            based_on=md.number,
        )
    return reverse(
        "memoryui:versions",
        args=[layout.workspace.name, layout.pk, MemoryVersion.Document.MEMORY_MD],
    )


def proposal_pk(layout) -> int:  # type: ignore[no-untyped-def]
    """A pending proposal that rewrites one entry in twenty of the layout's MEMORY.md
    (about 100 of ~2,000), as a consolidation would, and whose selection keeps 236 of
    the 256 selected raw memories, forgets 20 and brings in 20 (its forgetting ledger
    lists them all)."""
    from memoryui import curation, documents
    from memoryui.models import GenerationRun, MemoryVersion, Proposal, RawMemory

    existing = Proposal.objects.filter(layout=layout).first()
    if existing:
        return existing.pk
    md = curation.latest(layout, MemoryVersion.Document.MEMORY_MD)
    summary = curation.latest(layout, MemoryVersion.Document.MEMORY_SUMMARY)
    lines = curation.text_of(md).split("\n")
    changed = [
        line + " (reworded)" if line.startswith("scope:") and i % 20 == 0 else line
        for i, line in enumerate(lines)
    ]
    _, selection = documents.current_selection(layout)
    selected = [item.rollout_id for item in selection.items] if selection else []
    newcomers = list(
        RawMemory.objects.filter(layout=layout)
        .exclude(rollout_id__in=selected)
        .order_by("-updated_at_raw")
        .values_list("rollout_id", flat=True)[:20]
    )
    run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.DONE)
    return Proposal.objects.create(
        layout=layout,
        run=run,
        base_memory_md=md,
        base_memory_summary=summary,
        memory_md="\n".join(changed),
        memory_summary=curation.text_of(summary),
        raw_memories_md="",
        retained=selected[: len(selected) - 20],
        removed=selected[len(selected) - 20 :],
        added=newcomers,
    ).pk


def profile(client, url: str, requests: int) -> None:  # type: ignore[no-untyped-def]
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(requests):
        client.get(url)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats("cumulative").print_stats(35)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(r"memoryui|generation", 40)  # the project's own
    if saved := os.environ.get("BENCH_PROFILE_OUT"):
        stats.dump_stats(saved)
        print(f"profile saved to {saved}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="memoryui-pages-"))
    try:
        return run(argv, workdir)
    finally:  # its SQLite database of the 10k tree is ~90 MB
        shutil.rmtree(workdir, ignore_errors=True)


def run(argv: list[str] | None, workdir: Path) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="reuse (or generate) the tree here")
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument(
        "--memory-reads",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="for a tree generated here: the share of rollouts that begin by reading "
        "memory (default 1.0: every run, as the SDK's memory prompt asks; the usage "
        "figures of the MEMORY.md, usage and review pages count them)",
    )
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--database-url")
    parser.add_argument(
        "--profile", metavar="PAGE", help="also print a cProfile of this page's requests"
    )
    parser.add_argument("--only", metavar="PAGE", action="append", help="measure these pages")
    parser.add_argument(
        "--show-queries",
        action="store_true",
        help="print each page's queries with their wall time (one warm request)",
    )
    parser.add_argument(
        "--explain-over",
        type=float,
        metavar="MS",
        help="with --show-queries on PostgreSQL: EXPLAIN ANALYZE the queries slower than this",
    )
    parser.add_argument(
        "--keep-database",
        action="store_true",
        help="on PostgreSQL, reuse the database of an earlier run (import only if it is empty)",
    )
    args = parser.parse_args(argv)

    tree = args.tree or workdir / "tree"
    if not (tree / "README.md").exists():
        print(f"generating {args.rollouts:,} rollouts in {tree} ...", file=sys.stderr)
        generate_tree.main(
            [str(tree), "--rollouts", str(args.rollouts), "--memory-reads", str(args.memory_reads)]
        )
    if args.database_url and not args.keep_database:
        reset_postgres(args.database_url)
    setup(args.database_url, workdir)

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    from memoryui import search
    from memoryui.importer import import_workspace
    from memoryui.models import Membership, Role, Workspace

    call_command("migrate", verbosity=0)
    if not Workspace.objects.filter(name="bench").exists():
        started = time.perf_counter()
        import_workspace(tree, "bench")
        print(f"imported in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    # What a worker does once the import has committed (PostgreSQL): the search's vectors.
    started = time.perf_counter()
    if search.index_pending():
        print(f"search vectors in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    user = get_user_model().objects.filter(username="bench").first()
    if user is None:
        user = get_user_model().objects.create_user("bench", password="bench-pass-123")
        Membership.objects.create(  # decisions need a reviewer
            workspace=Workspace.objects.get(name="bench"), user=user, role=Role.REVIEWER
        )
    signed_in = Client()
    signed_in.force_login(user)

    print(
        f"{'page':<26} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'cpu p95':>8} {'x login':>8}"
        f" {'queries':>8}  status"
    )
    worst, baseline = 0.0, 1.0
    anonymous = Client()
    for label, url in [(LOGIN, reverse("login")), *pages()]:
        if args.only and label not in args.only and label != LOGIN:
            continue
        client = anonymous if label == LOGIN else signed_in
        response = client.get(url)  # warm: template and parse caches
        if response.status_code != 200:
            print(f"{label:<26} HTTP {response.status_code}")
            continue
        times, cpu = [], []
        queries: list[tuple[float, str, Any]] = []

        def count(execute, sql, params, many, context, queries=queries):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                queries.append(((time.perf_counter() - started) * 1000, sql, params))

        with connection.execute_wrapper(count):
            client.get(url)
        if args.show_queries:
            for ms, sql, params in queries:
                print(f"    {ms:6.2f} ms  {' '.join(sql.split())[:150]}", file=sys.stderr)
                # A SELECT only: EXPLAIN ANALYZE runs the statement again.
                if (
                    args.explain_over is not None
                    and ms > args.explain_over
                    and sql.lstrip().upper().startswith("SELECT")
                ):
                    with connection.cursor() as cursor:
                        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                        for (line,) in cursor.fetchall():
                            print(f"        {line}", file=sys.stderr)
        for _ in range(args.requests):
            t, c = time.perf_counter(), time.process_time()
            client.get(url)
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        if label == args.profile:
            profile(client, url, args.requests)
        times.sort()
        p95 = times[max(0, round(0.95 * len(times)) - 1)]
        if label == LOGIN:
            baseline = p95
        else:
            worst = max(worst, p95)
        print(
            f"{label:<26} {statistics.median(times):7.1f} {p95:7.1f} {times[-1]:7.1f} "
            f"{sorted(cpu)[max(0, round(0.95 * len(cpu)) - 1)]:8.1f} "
            f"{p95 / baseline:8.1f} {len(queries):8d}  "
            f"{'ok' if p95 <= TARGET_P95_MS else 'OVER'}"
        )
    if not args.only or "entry decision round trip" in args.only:
        decision_round_trip(signed_in, args.requests, args.profile == "entry decision round trip")
    print(
        f"\n{connection.vendor}; worst p95 {worst:.1f} ms (target {TARGET_P95_MS:.0f} ms); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. cpu p95: this "
        "process's CPU time per request (on PostgreSQL the server's work is not in it)"
    )
    return 0


TARGET_DECISION_P95_MS = 100.0


def decision_round_trip(client, requests: int, profile_it: bool = False) -> None:  # type: ignore[no-untyped-def]
    """An entry decision as the review page sends it (htmx POST) and its answer (the
    entry's card and the progress bar), on the ~100-change proposal of the 10k tree:
    accept and reject in turn over the changed entries, each a decision nobody made
    yet (the proposal's earlier decisions are cleared first), so every answer meets a
    set of decisions it has not seen: what a reviewer's next decision costs."""
    from django.db import connection
    from django.urls import reverse

    from memoryui import curation
    from memoryui.models import Layout, Proposal

    layout = Layout.objects.select_related("workspace").order_by("memories_dir").first()
    proposal = Proposal.objects.get(pk=proposal_pk(layout))
    proposal.decisions.all().delete()
    md = curation.document_reviews(proposal)[0]
    changed = [c.key for c in curation.decidable(md)]
    # Each timed decision a new one: at most as many as there are changes to decide.
    requests = min(requests, (len(changed) - 2) // (2 if profile_it else 1))
    url = reverse("memoryui:proposal_decide", args=[layout.workspace.name, layout.pk, proposal.pk])

    def post(i: int):  # type: ignore[no-untyped-def]
        return client.post(
            url,
            {
                "document": md.document,
                "key": changed[i % len(changed)],
                "decision": "accept" if i % 2 else "reject",
                "page": 2,
            },
            HTTP_HX_REQUEST="true",
        )

    warm = post(0)
    assert warm.status_code == 200, warm.status_code
    queries: list[str] = []

    def count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        post(1)
    times = []
    for i in range(2, requests + 2):
        t = time.perf_counter()
        post(i)
        times.append((time.perf_counter() - t) * 1000)
    if profile_it:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for i in range(requests + 2, 2 * requests + 2):
            post(i)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    times.sort()
    p95 = times[max(0, round(0.95 * len(times)) - 1)]
    print(
        f"{'entry decision round trip':<26} {statistics.median(times):7.1f} {p95:7.1f} "
        f"{times[-1]:7.1f} {len(queries):8d}  "
        f"{'ok' if p95 <= TARGET_DECISION_P95_MS else 'OVER'} ({len(warm.content):,} bytes)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
