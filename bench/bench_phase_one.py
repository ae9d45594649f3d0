"""Phase-one throughput: memoryui with concurrent workers against the SDK's own
sequential memory manager, on the same rollouts, against the same slow test server.

One run:

1. builds one memory layout (``memories`` + ``sessions``) holding N rollouts (200 by
   default): the rollout files of a tree from ``bench/generate_tree.py`` (or the first N
   of the ``medium-300`` fixture), copied byte for byte into a single ``sessions/`` dir;
2. starts ``tests.scripted_model.FakeOpenAI`` on localhost with ``delay`` seconds
   (0.3) before every answer;
3. **memoryui**: imports that workspace into a fresh database, creates a run with
   ``GenerationSettings.concurrency = 8`` (``pipeline.start_run``) and times
   ``pipeline.run_inline(run_id, threads=8)`` up to the end of phase one (phase two is
   replaced by a no-op that stops the clock: only phase one is measured);
4. **SDK** (openai-agents 0.24.0): a ``UnixLocalSandboxClient`` session on a copy of the
   same workspace, ``get_or_create_memory_generation_manager`` with a ``Memory`` whose
   ``MemoryGenerateConfig.phase_one_model`` is an ``OpenAIResponsesModel`` on an
   ``AsyncOpenAI`` client pointed at the test server; every run segment is appended with
   ``manager.enqueue_rollout_payload`` (untimed; the files come out byte-identical to the
   input), then ``manager.flush()`` is timed: its single worker runs phase one
   (``render_phase_one_prompt`` + ``run_phase_one``, i.e. ``Runner.run`` of a
   ``SandboxAgent``) for one rollout after the other; its ``_run_phase_two`` is replaced
   by a no-op that stops the clock;

and prints rollouts per second of both, their ratio (target: memoryui >= 6x the SDK)
and the number of model requests each made.

    .venv/bin/python bench/bench_phase_one.py                 # 200 rollouts, 0.3 s, 8 workers
    .venv/bin/python bench/bench_phase_one.py --json > result.json
    .venv/bin/python bench/bench_phase_one.py --source medium-300
    .venv/bin/python bench/bench_phase_one.py \\
        --database-url postgres://postgres@127.0.0.1:5432/memoryui_bench_p1

The test server's demo model knows memoryui's prompt; the SDK's prompt (the raw JSONL
inside its own template) is answered by ``bench_responder`` below, which renders that
JSONL the way memoryui does and hands it to the same demo model, so both sides get
equally plausible, schema-valid answers and write the same kind of files (the script
checks that both sides' raw memories come out byte-identical).

The test server sets ``TCP_NODELAY``, as real servers do; ``--server-as-is`` leaves
Nagle's algorithm on instead, which adds ~40 ms to every answer on a kept-alive
connection (both the SDK's client and memoryui's reuse theirs).

Django is configured here, before ``django.setup()``: ``DJANGO_SETTINGS_MODULE``,
``DATABASE_URL`` (a SQLite file in a temp dir unless ``--database-url``),
``MEMORYUI_VAR_DIR`` (the temp dir), ``OPENAI_BASE_URL`` (the test server) and
``OPENAI_API_KEY``. A Postgres database named in ``--database-url`` is dropped and
created, so its name must contain ``bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
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

from generation import model_server, offline_model, offline_writer, phase_one, prompts, tree  # noqa: E402
from tests.scripted_model import FakeOpenAI  # noqa: E402

TARGET_RATIO = 6.0
WORKSPACE_NAME = "bench-phase-one"
# The SDK-written fixtures: ../shared/fixtures beside the repository, or MEMORYUI_FIXTURES.
FIXTURES = Path(
    os.environ.get("MEMORYUI_FIXTURES") or BENCH_DIR.parent.parent / "shared" / "fixtures"
)
MEDIUM_300 = FIXTURES / "medium-300" / "workspace"
MEMORIES_DIR = "memories"
SESSIONS_DIR = "sessions"
SDK_PHASE_ONE_MODEL = "gpt-5.4-mini"  # the SDK's default; the test server ignores it


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the input --------------------------------------------------------------------------


def build_workspace(dest: Path, *, source: str, rollouts: int, seed: int, scratch: Path) -> int:
    """One layout with ``rollouts`` rollout files (bytes as the source has them) and the
    empty files and dirs the SDK's ``ensure_layout`` creates. Returns the byte count."""
    if source == "generated":
        generated = scratch / "generated-tree"
        generate_tree.generate(generated, rollouts, seed)
        sessions_root = generated / "sessions"
    else:
        sessions_root = MEDIUM_300 / "sessions"
    files = sorted(sessions_root.rglob("*.jsonl"), key=lambda p: p.name)[:rollouts]
    if len(files) < rollouts:
        raise SystemExit(f"{sessions_root} has only {len(files)} rollouts, {rollouts} asked")
    if len({p.name for p in files}) != len(files):
        raise SystemExit("rollout ids are not unique across the source's layouts")
    sessions = dest / SESSIONS_DIR
    sessions.mkdir(parents=True)
    memories = dest / MEMORIES_DIR
    for sub in ("raw_memories", "rollout_summaries", "skills"):
        (memories / sub).mkdir(parents=True)
    (memories / "MEMORY.md").write_bytes(b"")
    (memories / "memory_summary.md").write_bytes(b"")
    total = 0
    for path in files:
        data = path.read_bytes()
        (sessions / path.name).write_bytes(data)
        total += len(data)
    return total


def subset_workspace(source: Path, dest: Path, rollouts: int) -> None:
    """A copy of the layout with only its first ``rollouts`` rollouts (for warming up)."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("*.jsonl"))
    for path in sorted((source / SESSIONS_DIR).glob("*.jsonl"))[:rollouts]:
        shutil.copyfile(path, dest / SESSIONS_DIR / path.name)


# --- the test server's answers ----------------------------------------------------------

SDK_SESSION_START = "Filtered session:\n"
SDK_SESSION_END = "\n\nIMPORTANT:"


def sdk_rollout_jsonl(prompt: str) -> bytes | None:
    """The rollout JSONL inside the SDK's phase-one user message, or None when the
    message is not the SDK's."""
    start = prompt.find(SDK_SESSION_START)
    end = prompt.rfind(SDK_SESSION_END)
    if start < 0 or end < start:
        return None
    body = prompt[start + len(SDK_SESSION_START) : end]
    # Only whole JSON lines: a truncated view (over 150k tokens) carries a marker line.
    lines = [line for line in body.splitlines() if line.startswith("{")]
    return "\n".join(lines).encode()


def bench_responder(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The demo model, taught to read the SDK's phase-one prompt too: the JSONL the SDK
    sends is rendered as memoryui renders a rollout and answered like memoryui's own
    prompt. Everything else goes to ``demo_responder`` unchanged."""
    parts = model_server.request_parts(path, body)
    required = set(parts.schema.get("required") or ())
    if offline_model.PHASE_ONE_KEYS <= required and f"<{prompts.ROLLOUT_TAG}>" not in parts.prompt:
        data = sdk_rollout_jsonl(parts.prompt)
        if data is not None:
            rendered = phase_one.render_rollout(tree.parse_rollout(data))
            return offline_writer.demo_phase_one(prompts.phase_one_prompt(rendered.text))
    return offline_model.demo_responder(path, body)


def model_requests(fake: FakeOpenAI, since: int) -> int:
    return sum(
        1 for r in fake.requests[since:] if r["path"].endswith(("/responses", "/chat/completions"))
    )


# --- Django ------------------------------------------------------------------------------


def configure_django(url: str | None, workdir: Path, base_url: str) -> str:
    """Point the settings at a scratch database, var dir and the test server, set Django
    up and migrate. Returns the database's description."""
    if url is None:
        url = f"sqlite:///{workdir / 'bench.sqlite3'}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "memoryui.settings"
    os.environ.setdefault("DEBUG", "1")  # development settings, as bin/start runs them
    os.environ["DATABASE_URL"] = url
    os.environ["MEMORYUI_VAR_DIR"] = str(workdir / "var")
    os.environ["OPENAI_BASE_URL"] = base_url
    os.environ["OPENAI_API_KEY"] = "bench-not-a-key"
    os.environ["MEMORYUI_OPENAI_API"] = "responses"
    os.environ.setdefault("LOG_LEVEL", "WARNING")

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor == "postgresql":
        name = connection.settings_dict["NAME"]
        if "bench" not in name:
            raise SystemExit(f"refusing to drop and recreate Postgres database {name!r}")
        _postgres_admin("create")
    call_command("migrate", verbosity=0)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            return f"PostgreSQL {cursor.fetchone()[0]}"
    import sqlite3

    return f"SQLite {sqlite3.sqlite_version} (file, WAL)"


def _postgres_admin(action: str) -> None:
    """Drop (and for "create", create again) the scratch database, with bench_import's
    helpers."""
    import bench_import
    from django.db import connections

    connections.close_all()
    bench_import._postgres_admin(
        bench_import._create_postgres if action == "create" else bench_import._drop_postgres
    )


# --- measuring ---------------------------------------------------------------------------


@dataclass
class Side:
    name: str
    workers: int
    rollouts: int
    seconds: float = 0.0
    requests: int = 0
    memories: int = 0  # rollouts that got a raw memory + rollout summary
    nothing: int = 0  # rollouts answered "nothing worth remembering"
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.rollouts / self.seconds if self.seconds else 0.0


def run_memoryui(
    workspace: Path, fake: FakeOpenAI, workers: int, name: str = WORKSPACE_NAME
) -> Side:
    """One generation run over a fresh import named ``name`` (phase-one results are
    cached per layout, so every round imports under a new name: nothing is reused)."""
    from django.db import connections

    from memoryui import pipeline
    from memoryui.importer import import_workspace
    from memoryui.models import Layout, PhaseOneJob, PhaseOneResult
    from memoryui.pipeline import steps

    result = import_workspace(workspace, name)
    if result.errors:
        log(f"import reported {len(result.errors)} problems, e.g. {result.errors[:3]}")
    layouts = list(Layout.objects.filter(workspace__name=name))
    if len(layouts) != 1:
        raise SystemExit(f"expected one layout, the import found {len(layouts)}")
    layout = layouts[0]
    gs = pipeline.settings_for(layout)
    gs.concurrency = workers
    gs.save()
    run = pipeline.start_run(layout, reextract=True)  # time phase one on every rollout
    jobs = PhaseOneJob.objects.filter(run=run)
    side = Side("memoryui", workers, jobs.count())

    stopped: dict[str, float | int] = {}

    def stop_clock(run_id: int) -> bool:  # stands in for pipeline.consolidate (phase two)
        stopped.setdefault("at", time.perf_counter())
        stopped.setdefault("requests", len(fake.requests))
        return True

    # Phase two's step looks ``consolidate`` up in its own module.
    original_consolidate = steps.consolidate
    steps.consolidate = stop_clock
    since = len(fake.requests)
    started = time.perf_counter()
    try:
        pipeline.run_inline(run.pk, threads=workers)
    except Exception as exc:  # e.g. "database is locked" from a worker thread
        side.errors.append(f"run_inline raised {type(exc).__name__}: {exc}")
    finally:
        steps.consolidate = original_consolidate
        connections.close_all()
    ended = float(stopped.get("at", time.perf_counter()))
    side.seconds = ended - started
    side.requests = model_requests(fake, since)
    side.failed = jobs.filter(status=PhaseOneJob.Status.FAILED).count()
    done = jobs.filter(status=PhaseOneJob.Status.DONE)
    side.memories = done.filter(result__outcome=PhaseOneResult.Outcome.MEMORY).count()
    side.nothing = done.filter(result__outcome=PhaseOneResult.Outcome.NOTHING).count()
    unfinished = jobs.exclude(status__in=[PhaseOneJob.Status.DONE, PhaseOneJob.Status.FAILED])
    if unfinished.exists():
        side.errors.append(f"{unfinished.count()} jobs never finished")
    side.errors += [
        f"job {pk}: {error}" for pk, error in jobs.exclude(error="").values_list("pk", "error")[:10]
    ]
    side.notes["phase_two_reached"] = "at" in stopped
    side.notes["reused_results"] = done.filter(reused=True).count()
    return side


class _CountErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage()[:300])


async def _sdk_phase_one(workspace: Path, source: Path, fake: FakeOpenAI) -> Side:
    from agents.models.openai_responses import OpenAIResponsesModel
    from agents.sandbox.capabilities.memory import Memory
    from agents.sandbox.config import MemoryGenerateConfig, MemoryLayoutConfig
    from agents.sandbox.manifest import Manifest
    from agents.sandbox.memory.manager import get_or_create_memory_generation_manager
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from openai import AsyncOpenAI

    rollout_files = sorted((source / SESSIONS_DIR).glob("*.jsonl"))
    side = Side("SDK", 1, len(rollout_files))
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=str(workspace)))
    await session.start()
    openai_client = AsyncOpenAI(base_url=fake.base_url, api_key="bench-not-a-key")
    memory = Memory(
        layout=MemoryLayoutConfig(memories_dir=MEMORIES_DIR, sessions_dir=SESSIONS_DIR),
        read=None,
        generate=MemoryGenerateConfig(
            phase_one_model=OpenAIResponsesModel(
                model=SDK_PHASE_ONE_MODEL, openai_client=openai_client
            ),
        ),
    )
    manager = get_or_create_memory_generation_manager(session=session, memory=memory)
    # What the sandbox runner does after every run segment (untimed).
    for path in rollout_files:
        for line in path.read_text(encoding="utf-8").splitlines():
            payload = json.loads(line)
            await manager.enqueue_rollout_payload(payload, rollout_id=payload["rollout_id"])
    identical = sum(
        (workspace / SESSIONS_DIR / p.name).read_bytes() == p.read_bytes() for p in rollout_files
    )
    side.notes["rollout_files_identical_to_input"] = f"{identical}/{len(rollout_files)}"

    stopped: dict[str, float | int] = {}

    async def stop_clock() -> None:  # stands in for manager._run_phase_two
        stopped.setdefault("at", time.perf_counter())

    manager._run_phase_two = stop_clock  # type: ignore[method-assign]
    errors = _CountErrors()
    manager_logger = logging.getLogger("agents.sandbox.memory.manager")
    manager_logger.addHandler(errors)
    since = len(fake.requests)
    started = time.perf_counter()
    try:
        await manager.flush()  # phase one over every rollout, one at a time
    finally:
        manager_logger.removeHandler(errors)
    ended = float(stopped.get("at", time.perf_counter()))
    side.seconds = ended - started
    side.requests = model_requests(fake, since)
    side.memories = len(list((workspace / MEMORIES_DIR / "raw_memories").glob("*.md")))
    summaries = len(list((workspace / MEMORIES_DIR / "rollout_summaries").glob("*.md")))
    side.failed = len(errors.messages)
    side.nothing = side.rollouts - side.memories - side.failed
    side.errors = errors.messages[:10]
    side.notes["rollout_summaries"] = summaries
    side.notes["phase_two_reached"] = "at" in stopped
    await session.stop()
    await openai_client.close()
    return side


def same_raw_memories(sdk_workspace: Path, name: str = WORKSPACE_NAME) -> int:
    """How many of the SDK's raw memory files equal, byte for byte, the one memoryui
    stored for the same rollout (both sides got the same answers from the test server)."""
    from memoryui.models import PhaseOneResult

    ours = {}
    for result in PhaseOneResult.objects.filter(layout__workspace__name=name):
        for path, text in result.files.items():
            if path.startswith("raw_memories/"):
                ours[path] = text
    return sum(
        ours.get(f"raw_memories/{p.name}") == p.read_text(encoding="utf-8")
        for p in (sdk_workspace / MEMORIES_DIR / "raw_memories").glob("*.md")
    )


def run_sdk(workspace: Path, source: Path, fake: FakeOpenAI) -> Side:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # no trace upload to api.openai.com
    # The layout without its rollouts: enqueue_rollout_payload writes those.
    shutil.copytree(source, workspace, ignore=shutil.ignore_patterns("*.jsonl"))
    return asyncio.run(_sdk_phase_one(workspace, source, fake))


# --- report ------------------------------------------------------------------------------


def table(rounds: list[list[Side]], ratio: float) -> str:
    """One line per side with its median round (by seconds); per-round ratios below."""
    lines = [
        f"{'':<28} {'rollouts':>8} {'seconds':>8} {'rollouts/s':>10} {'requests':>8} "
        f"{'memories':>8} {'nothing':>7} {'failed':>6}",
    ]
    for column in zip(*rounds, strict=True):
        s = median_side(list(column))
        label = f"{s.name} ({s.workers} worker{'s' if s.workers > 1 else ''})"
        lines.append(
            f"{label:<28} {s.rollouts:>8} {s.seconds:>8.2f} {s.per_second:>10.2f} "
            f"{s.requests:>8} {s.memories:>8} {s.nothing:>7} {s.failed:>6}"
        )
    if len(rounds[0]) < 2:
        return "\n".join(lines)
    if len(rounds) > 1:
        lines[0] += f"   (medians of {len(rounds)} rounds)"
        each = ", ".join(
            f"{ui.seconds:.2f} s / {sdk.seconds:.2f} s = {ui.per_second / sdk.per_second:.2f}x"
            for ui, sdk in rounds
        )
        lines.append(f"rounds (memoryui / SDK): {each}")
    verdict = "meets" if ratio >= TARGET_RATIO else "does NOT meet"
    lines.append(f"ratio memoryui/SDK: {ratio:.2f}x ({verdict} the target of {TARGET_RATIO:g}x)")
    return "\n".join(lines)


def median_side(column: list[Side]) -> Side:
    return sorted(column, key=lambda s: s.seconds)[len(column) // 2]


def machine() -> dict[str, Any]:
    import django

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    from importlib.metadata import version

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "django": django.get_version(),
        "openai": version("openai"),
        "openai_agents": version("openai-agents"),
        "load_1min_at_end": load,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated tree")
    parser.add_argument("--source", choices=("generated", "medium-300"), default="generated")
    parser.add_argument("--delay", type=float, default=0.3, help="seconds before each answer")
    parser.add_argument("--workers", type=int, default=8, help="memoryui's concurrency")
    parser.add_argument("--database-url", help="default: a SQLite file in the temp dir")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds (medians)")
    parser.add_argument(
        "--warmup", type=int, default=8, help="rollouts of an untimed first round (0: none)"
    )
    parser.add_argument("--skip-sdk", action="store_true", help="time memoryui only")
    parser.add_argument(
        "--server-as-is",
        action="store_true",
        help="turn Nagle's algorithm back on in the test server (adds ~40 ms to every "
        "answer on a reused connection; see the README)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if min(args.rollouts, args.workers, args.repeat) < 1:
        parser.error("--rollouts, --workers and --repeat must be at least 1")

    workdir = Path(tempfile.mkdtemp(prefix="memoryui-bench-p1-"))
    try:
        source = workdir / "input"
        size = build_workspace(
            source, source=args.source, rollouts=args.rollouts, seed=args.seed, scratch=workdir
        )
        log(f"input: {args.rollouts} rollouts ({size / 1e3:.0f} KB) from {args.source} in {source}")
        # The test server writes an answer's headers and body in two sends: without
        # TCP_NODELAY the body waits for the client's delayed ACK on a kept-alive
        # connection, ~40 ms. The server sets it (socketserver's class attribute);
        # --server-as-is turns it off to measure that.
        model_server._Handler.disable_nagle_algorithm = not args.server_as_is
        fake = FakeOpenAI(bench_responder)
        fake.delay = args.delay
        with fake:
            database = configure_django(args.database_url, workdir, fake.base_url)
            phase_one.count_tokens("warm up")  # load the tokenizer before any clock runs
            if args.warmup:
                # First calls pay one-time costs (lazy imports, first queries, client
                # setup) that a long-lived worker does not: run both sides once, untimed.
                warm = workdir / "warmup"
                subset_workspace(source, warm, args.warmup)
                log(f"warm-up: {args.warmup} rollouts on each side (untimed) ...")
                run_memoryui(warm, fake, args.workers, f"{WORKSPACE_NAME}-warmup")
                if not args.skip_sdk:
                    run_sdk(workdir / "sdk-warmup", warm, fake)
            rounds: list[list[Side]] = []
            for number in range(1, args.repeat + 1):
                name = f"{WORKSPACE_NAME}-{number}"
                log(f"round {number}: memoryui, {args.workers} threads ({database}) ...")
                ours = run_memoryui(source, fake, args.workers, name)
                log(f"round {number}: memoryui {ours.seconds:.2f} s")
                sides = [ours]
                if not args.skip_sdk:
                    log(f"round {number}: SDK, sequential ...")
                    sdk_workspace = workdir / f"sdk-workspace-{number}"
                    sdk = run_sdk(sdk_workspace, source, fake)
                    log(f"round {number}: SDK {sdk.seconds:.2f} s")
                    same = same_raw_memories(sdk_workspace, name)
                    log(f"round {number}: raw memories identical: {same}/{sdk.memories}")
                    sdk.notes["raw_memories_identical_to_memoryui"] = same
                    sides.append(sdk)
                rounds.append(sides)
        if args.database_url and "postgres" in args.database_url and not args.keep:
            _postgres_admin("drop")
        medians = [median_side(list(column)) for column in zip(*rounds, strict=True)]
        ratio = medians[0].per_second / medians[1].per_second if len(medians) > 1 else 0.0
        report = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "database": database,
            "source": args.source,
            "seed": args.seed if args.source == "generated" else None,
            "rollouts": args.rollouts,
            "input_bytes": size,
            "delay_seconds": args.delay,
            "warmup_rollouts": args.warmup,
            "server_tcp_nodelay": not args.server_as_is,
            "floor_seconds": {
                "memoryui": -(-args.rollouts // args.workers) * args.delay,
                "SDK": args.rollouts * args.delay,
            },
            "rounds": [
                [{**asdict(s), "rollouts_per_second": round(s.per_second, 3)} for s in sides]
                for sides in rounds
            ],
            "median_seconds": {s.name: round(s.seconds, 3) for s in medians},
            "median_rollouts_per_second": {s.name: round(s.per_second, 3) for s in medians},
            "ratio": round(ratio, 3),
            "target_ratio": TARGET_RATIO,
            "meets_target": ratio >= TARGET_RATIO,
            "ceiling_ratio": args.workers,
        }
        for sides in rounds:
            for s in sides:
                for error in s.errors:
                    log(f"{s.name}: {error}")
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(table(rounds, ratio))
            nodelay = "" if args.server_as_is else ", TCP_NODELAY"
            print(
                f"{args.rollouts} rollouts from {args.source}, {args.delay:g} s per answer"
                f"{nodelay}, {database}; floors {report['floor_seconds']['memoryui']:.2f} s "
                f"and {report['floor_seconds']['SDK']:.1f} s, at most {args.workers}x"
            )
        return 0
    finally:
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
