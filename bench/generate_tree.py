"""Generate a synthetic Agents SDK sandbox workspace with a large memory tree.

The tree follows ``../shared/docs/memory-format.md`` (beside the repository; openai-agents
0.24.0) byte for byte where the format is fixed, and imitates the ``medium-300`` fixture
where it is free (the bodies the phase-one and phase-two models write). Two layouts share
the workspace: ``memories`` + ``sessions`` and the nested ``memories/engineering`` +
``sessions/engineering``.

Per layout it writes what the SDK writes:

- ``S/<rollout_id>.jsonl``: one compact, ASCII-escaped JSON line per run segment, keys in
  the SDK's order; user and assistant messages, ``exec_command`` function calls with
  their ``Chunk ID / Wall time / Process exited`` outputs (a few long ones truncated the
  way the sandbox runtime does), ``apply_patch`` custom tool calls, interruptions,
  failed and max-turns runs, multi-segment rollouts, a few without ``updated_at``;
- ``M/raw_memories/<id>.md`` and ``M/rollout_summaries/<id>_<slug>.md`` with the exact
  header lines (a few rollouts get neither, a few leave an orphaned older summary);
- ``M/raw_memories.md`` and ``M/phase_two_selection.json`` for the 256 most recent raw
  memories in phase two's order;
- ``M/MEMORY.md`` (one task group per ~5 rollouts) and ``M/memory_summary.md``;
- ``M/skills/`` with two skills.

The output depends only on ``--rollouts`` and ``--seed`` (file mtimes aside).

    python bench/generate_tree.py /tmp/bench-tree --rollouts 10000 --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

Item = dict[str, Any]

DEFAULT_ROLLOUTS = 10_000
DEFAULT_SEED = 7
MAX_RAW_MEMORIES_FOR_CONSOLIDATION = 256  # the SDK's default
# Rollouts are spread over this window; phase two "ran" one day after the last one.
START = datetime(2026, 1, 5, tzinfo=UTC)
SPAN = timedelta(days=320)
# Shell outputs longer than this many approximate tokens are cut like the sandbox's
# ``max_output_tokens`` does (4 bytes a token, head and tail kept).
MAX_OUTPUT_TOKENS = 250
APPROX_BYTES_PER_TOKEN = 4
README_TITLE = "# Benchmark workspace"


@dataclass(frozen=True)
class LayoutDirs:
    name: str
    memories_dir: str
    sessions_dir: str


LAYOUTS = (
    LayoutDirs("default", "memories", "sessions"),
    LayoutDirs("engineering", "memories/engineering", "sessions/engineering"),
)
# medium-300 puts 123 of 300 rollouts in the engineering layout.
ENGINEERING_SHARE = 0.41

SERVICES = (
    "auth-proxy",
    "billing-api",
    "ledger-sync",
    "search-indexer",
    "media-transcoder",
    "notif-gateway",
    "report-worker",
    "invoice-renderer",
)
REGIONS = ("us-east-1", "eu-west-1", "sa-east-1", "ap-southeast-2")
# (task, task group, function, module, symptom)
BUGS = (
    (
        "fix-invoice-total",
        "acme_metrics bug fixes",
        "format_invoice_total",
        "report",
        "invoice totals add the tax rate instead of applying it ($100.08 instead of $107.50)",
    ),
    (
        "fix-duration-parse",
        "jobkit bug fixes",
        "parse_duration_ms",
        "durations",
        "'1m30s' parses as 30000 ms instead of 90000",
    ),
    (
        "fix-page-count",
        "paging bug fixes",
        "page_count",
        "paging",
        "the last partial page of search results is never shown",
    ),
    (
        "fix-slugify-unicode",
        "menus bug fixes",
        "slugify",
        "slugs",
        "menu slugs use underscores and keep double spaces (cr\u00e8me__br\u00fbl\u00e9e_menu)",
    ),
    (
        "fix-retry-backoff",
        "jobkit bug fixes",
        "next_backoff",
        "retry",
        "the backoff never grows past the first delay",
    ),
)
PREFERENCES = (
    ("always answer with short bullet points", "answer-format"),
    ("keep diffs minimal and run the tests before saying done", "diffs"),
    ("use ISO dates (YYYY-MM-DD) and UTC times", "dates"),
    ("never push to main; open a PR and ask me before merging", "git"),
    ("write commit messages in the imperative mood, max 72 chars", "commits"),
    ("reply in English even when I write in another language", "language"),
    ("use metric units, never imperial", "units"),
    ("put every shell command in a fenced code block", "command-format"),
)
# Non-ASCII flourishes so the JSONL exercises \u escapes (surrogate pairs included).
FLOURISHES = (
    "",
    "",
    "",
    " Gr\u00fc\u00dfe aus M\u00fcnchen \u2014 danke!",
    " ship it \U0001f680\U0001f4e6",
    " \u65e5\u672c\u8a9e\u306e\u8981\u7d04\u3082\u304a\u9858\u3044\u3057\u307e\u3059\u3002",
    " merci \u00e0 vous \u2014 \u00e7a presse",
)
LEADS_CSV = (
    "account,segment,seats,trial_events,monthly_spend\n"
    "Northstar Health,healthcare,240,98,18000\n"
    "Beacon Retail,retail,75,18,4200\n"
    "Apex Fintech,financial-services,180,76,13500\n"
    "Summit Labs,healthcare,52,22,3900\n"
    "M\u00fcller Logistik,logistics,130,41,8800\n"
)
FAILURES = (
    ("failed", "RuntimeError", "Upstream model provider error: 502 Bad Gateway"),
    ("max_turns_exceeded", "MaxTurnsExceeded", "Max turns (10) exceeded"),
    (
        "guardrail_tripped",
        "OutputGuardrailTripwireTriggered",
        "Guardrail OutputGuardrail triggered tripwire",
    ),
    ("cancelled", "CancelledError", None),
)
SKILLS = (
    (
        "run-plain-python-tests",
        "Run this workspace's script-style tests without pytest.",
        "1. `PYTHONPATH=src python3 tests/test_<module>.py`\n"
        "2. Success prints `1 passed`; an AssertionError shows actual vs expected.\n",
    ),
    (
        "write-deploy-notes",
        "Turn a service runbook into dated deployment notes.",
        "1. `cat deploy/<service>/RUNBOOK.md`\n"
        "2. Add `docs/deploy-notes-<service>.md` with date, region, canary and rollback.\n",
    ),
)


# --- rollouts -------------------------------------------------------------------------


@dataclass
class Segment:
    """One ``Runner.run``: one line of the rollout file."""

    updated_at: str | None  # None: the key is absent (a run without a timestamp)
    input: list[Item]
    generated_items: list[Item]
    terminal_state: str = "completed"
    exception_type: str | None = None
    exception_message: str | None = None
    final_output: str | None = None
    interruptions: list[Item] = field(default_factory=list)

    def json_line(self, rollout_id: str) -> str:
        # Insertion order is the SDK's key order; absent keys are omitted, not null.
        payload: dict[str, Any] = {}
        if self.updated_at is not None:
            payload["updated_at"] = self.updated_at
        payload["rollout_id"] = rollout_id
        payload["input"] = self.input
        payload["generated_items"] = self.generated_items
        if self.interruptions:
            payload["interruptions"] = self.interruptions
        payload["terminal_metadata"] = {
            "terminal_state": self.terminal_state,
            "exception_type": self.exception_type,
            "exception_message": self.exception_message,
            "has_final_output": self.final_output is not None,
        }
        if self.final_output is not None:
            payload["final_output"] = self.final_output
        return json.dumps(payload, separators=(",", ":")) + "\n"


@dataclass
class Rollout:
    layout: LayoutDirs
    rollout_id: str
    kind: str  # the scenario, for descriptions
    task: str
    task_group: str
    service: str
    keyword: str
    request: str  # the first user message, quoted in memories
    segments: list[Segment]
    slug: str | None  # None: phase one produced no raw memory or summary
    orphan_slug: str | None = None  # an older extraction's summary left behind
    preference: str | None = None

    @property
    def updated_at(self) -> str:
        return self.segments[-1].updated_at or "unknown"

    @property
    def terminal_state(self) -> str:
        return self.segments[-1].terminal_state

    @property
    def states(self) -> list[str]:
        return [s.terminal_state for s in self.segments]

    @property
    def outcome(self) -> str:
        if self.terminal_state == "completed":
            return "success"
        return "partial" if self.terminal_state == "interrupted" else "fail"

    @property
    def rollout_path(self) -> str:
        return f"{self.layout.sessions_dir}/{self.rollout_id}.jsonl"

    @property
    def summary_file(self) -> str:
        return f"rollout_summaries/{self.rollout_id}_{self.slug}.md"

    def jsonl(self) -> str:
        return "".join(seg.json_line(self.rollout_id) for seg in self.segments)

    def description(self) -> str:
        return f"{self.kind.replace('_', ' ')} ({self.task}); terminal states {self.states}."

    def raw_memory(self) -> str:
        prefs = (
            f'- the user said: "{self.preference}" -> apply this by default without being asked'
            if self.preference
            else "- none recorded"
        )
        failures = (
            "- none recorded" if self.outcome == "success" else f"- ended {self.terminal_state}"
        )
        body = (
            "---\n"
            f"description: {self.description()}\n"
            f"task: {self.task}\n"
            f"task_group: {self.task_group}\n"
            f"task_outcome: {self.outcome}\n"
            f"keywords: {self.task}, {self.service}, {self.keyword}\n"
            "---\n\n"
            f"### Task 1: {self.task.replace('-', ' ')}\n\n"
            f"task: {self.task}\n"
            f"task_group: {self.task_group}\n"
            f"task_outcome: {self.outcome}\n\n"
            f"Preference signals:\n{prefs}\n\n"
            "Reusable knowledge:\n"
            f"- {self.task} handled in {len(self.segments)} segment(s)\n\n"
            f"Failures and how to do differently:\n{failures}\n\n"
            f"References:\n- `{self.request}`\n"
        )
        # manager._format_raw_memory
        return (
            f"rollout_id: {self.rollout_id}\n"
            f"updated_at: {self.updated_at}\n"
            f"rollout_path: {self.rollout_path}\n"
            f"rollout_summary_file: {self.summary_file}\n"
            f"terminal_state: {self.terminal_state}\n\n"
            f"{body.rstrip()}\n"
        )

    def rollout_summary(self, session_id: str, *, updated_at: str | None = None) -> str:
        body = (
            f"# {self.task}: {self.outcome}.\n\n"
            f"Rollout context: {len(self.segments)} segment(s).\n\n"
            f"## Task 1: {self.task}\n\n"
            f"Outcome: {self.outcome}\n\n"
            "Preference signals:\n\n"
            f"- {self.preference or 'none'}\n\n"
            "Key steps:\n\n"
            f"- states: {self.states}\n\n"
            f"References:\n\n- [1] {self.rollout_id}\n"
        )
        # manager._format_rollout_summary
        return (
            f"session_id: {session_id}\n"
            f"updated_at: {updated_at or self.updated_at}\n"
            f"rollout_path: {self.rollout_path}\n"
            f"terminal_state: {self.terminal_state}\n\n"
            f"{body.rstrip()}\n"
        )


@dataclass
class Context:
    service: str
    flourish: str


@dataclass
class Scenario:
    kind: str
    task: str
    group: str
    keyword: str
    request: str
    # Builds one segment's generated items and the final answer ("" when none).
    segment: Callable[[bool], tuple[list[Item], str]]
    followups: tuple[str, ...] = ("Continue.",)
    preference: str | None = None
    failure: tuple[str, str, str | None] | None = None
    interrupted: bool = False


class Generator:
    """Builds rollouts from a seeded RNG; every random choice goes through ``self.rng``."""

    def __init__(self, rollouts: int, seed: int) -> None:
        self.count = rollouts
        self.rng = random.Random(seed)
        self.session_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.scenarios: list[tuple[float, Callable[[Context], Scenario]]] = [
            (0.30, self.bug_fix),
            (0.18, self.deployment_notes),
            (0.14, self.user_preferences),
            (0.08, self.gtm_analysis),
            (0.08, self.log_triage),
            (0.17, self.failed_run),
            (0.05, self.approval_needed),
        ]

    # -- ids and small values ------------------------------------------------------
    def hex(self, digits: int) -> str:
        return f"{self.rng.getrandbits(4 * digits):0{digits}x}"

    def timestamp(self, when: datetime) -> str:
        # datetime.now(timezone.utc).isoformat(): microseconds omitted when zero.
        return when.isoformat()

    def user(self, text: str) -> Item:
        return {"content": text, "role": "user"}

    def assistant(self, text: str, phase: str = "final_answer") -> Item:
        return {
            "id": f"msg_{self.hex(24)}",
            "content": [{"annotations": [], "text": text, "type": "output_text"}],
            "role": "assistant",
            "status": "completed",
            "type": "message",
            "phase": phase,
        }

    def exec_call(self, cmd: str, output: str, exit_code: int = 0) -> list[Item]:
        """An ``exec_command`` function call and its output, formatted like the sandbox
        shell tool (and cut in the middle when long, as its token truncation does)."""
        call_id = f"call_{self.hex(24)}"
        sections = [
            f"Chunk ID: {self.hex(6)}",
            f"Wall time: {self.rng.uniform(0.001, 3):.4f} seconds",
            f"Process exited with code {exit_code}",
        ]
        budget = MAX_OUTPUT_TOKENS * APPROX_BYTES_PER_TOKEN
        encoded = output.encode("utf-8")
        if len(encoded) > budget:
            tokens = -(-len(encoded) // APPROX_BYTES_PER_TOKEN)
            sections.append(f"Original token count: {tokens}")
            prefix = f"Total output lines: {len(output.splitlines())}\n\n"
            marker_guess = f"\u2026{tokens} tokens truncated\u2026"
            room = budget - len(prefix) - len(marker_guess.encode("utf-8"))
            left = encoded[: room // 2].decode("utf-8", "ignore")
            right = encoded[len(encoded) - (room - room // 2) :].decode("utf-8", "ignore")
            removed = len(encoded) - len(left.encode("utf-8")) - len(right.encode("utf-8"))
            marker = f"\u2026{-(-removed // APPROX_BYTES_PER_TOKEN)} tokens truncated\u2026"
            output = f"{prefix}{left}{marker}{right}"
        sections += ["Output:", output]
        return [
            {
                "arguments": json.dumps({"cmd": cmd}),
                "call_id": call_id,
                "name": "exec_command",
                "type": "function_call",
                "id": f"fc_{self.hex(24)}",
                "status": "completed",
            },
            {"call_id": call_id, "output": "\n".join(sections), "type": "function_call_output"},
        ]

    def apply_patch(self, patch: str, result: str) -> list[Item]:
        call_id = f"call_{self.hex(24)}"
        return [
            {
                "call_id": call_id,
                "input": patch,
                "name": "apply_patch",
                "type": "custom_tool_call",
                "id": f"ctc_{self.hex(24)}",
            },
            {"type": "custom_tool_call_output", "call_id": call_id, "output": result},
        ]

    # -- scenarios -----------------------------------------------------------------
    def bug_fix(self, ctx: Context) -> Scenario:
        task, group, func, module, symptom = self.rng.choice(BUGS)
        request = f"Fix {func} ({symptom}) with a minimal diff.{ctx.flourish}"
        test = f"PYTHONPATH=src python3 tests/test_{module}.py"

        # Most fixes are short (run the test, answer), as in medium-300; some patch the
        # code; a few read the code and watch the test fail first.
        depth = self.rng.choices((0, 1, 2), weights=(50, 35, 15))[0]

        def segment(first: bool) -> tuple[list[Item], str]:
            items: list[Item] = []
            if depth == 2 and first:
                items.append(
                    self.assistant(f"Reading src/{module}.py and its test first.", "commentary")
                )
                items += self.exec_call(
                    f"sed -n '1,40p' src/{module}.py",
                    f"def {func}(value):\n    # {symptom}\n    return value\n",
                )
                items += self.exec_call(
                    test,
                    "Traceback (most recent call last):\n"
                    f'  File "tests/test_{module}.py", line 9, in <module>\n'
                    f"    test_{func}()\nAssertionError\n",
                    exit_code=1,
                )
            if depth >= 1:
                items += self.apply_patch(
                    f"*** Begin Patch\n*** Update File: src/{module}.py\n@@\n"
                    f"-    return value\n+    return _{func}_fixed(value)\n*** End Patch\n",
                    f"Updated src/{module}.py",
                )
            items += self.exec_call(test, "1 passed\n")
            return items, f"Fixed `{func}` in src/{module}.py; `{test}` prints `1 passed`."

        return Scenario(
            "bug_fix",
            task,
            group,
            func,
            request,
            segment,
            followups=("Also add a regression test.", "Now tidy the docstring."),
        )

    def deployment_notes(self, ctx: Context) -> Scenario:
        region = self.rng.choice(REGIONS)
        request = (
            f"Write deployment notes for {ctx.service} ({region}) from its runbook.{ctx.flourish}"
        )
        runbook = (
            f"# {ctx.service} rollout runbook\n\n1. Build image `{ctx.service}:2026-05-09`\n"
            f"2. Canary 25% in {region} for 30 min, watch p95 latency\n"
            "3. Promote to 100% if error rate < 0.5%\n4. Roll back with `deployctl undo`\n"
        )

        writes = self.rng.random() < 0.5

        def segment(first: bool) -> tuple[list[Item], str]:
            items = self.exec_call(f"cat deploy/{ctx.service}/RUNBOOK.md", runbook)
            if not writes:
                return items, f"Summarized the {ctx.service} runbook: canary, promote, rollback."
            items += self.apply_patch(
                f"*** Begin Patch\n*** Add File: docs/deploy-notes-{ctx.service}.md\n"
                f"+# Deployment notes: {ctx.service} ({region})\n+\n+- Canary 25% for 30 min\n"
                "+- Promote below 0.5% errors\n+- Rollback: `deployctl undo`\n*** End Patch\n",
                f"Created docs/deploy-notes-{ctx.service}.md",
            )
            return items, f"Saved docs/deploy-notes-{ctx.service}.md (canary, promote, rollback)."

        return Scenario(
            "deployment_notes",
            f"deploy-notes-{ctx.service}",
            "deployment runbooks",
            "runbook",
            request,
            segment,
            followups=("Add the rollback owner.",),
        )

    def user_preferences(self, ctx: Context) -> Scenario:
        preference, keyword = self.rng.choice(PREFERENCES)
        request = f"Quick ground rule for future work: {preference}.{ctx.flourish}"

        def segment(first: bool) -> tuple[list[Item], str]:
            return [], f"Noted: {preference}."

        scenario = Scenario(
            "user_preferences",
            "record-user-preferences",
            "user working preferences",
            keyword,
            request,
            segment,
            followups=("And keep answers short.",),
        )
        scenario.preference = preference
        return scenario

    def gtm_analysis(self, ctx: Context) -> Scenario:
        request = f"Analyze data/leads.csv and pick a promising GTM segment.{ctx.flourish}"

        def segment(first: bool) -> tuple[list[Item], str]:
            items = [self.assistant("Looking at the CSV first.", "commentary")]
            items += self.exec_call("cat data/leads.csv", LEADS_CSV)
            return items, (
                "Most promising segment: **financial-services** \u2014 high trial "
                "events per seat and strong monthly spend."
            )

        return Scenario(
            "gtm_analysis",
            "gtm-segment-analysis",
            "GTM pipeline analysis",
            "segments",
            request,
            segment,
            followups=("Now save gtm_hypothesis.md.", "Add a follow-up data checklist."),
        )

    def log_triage(self, ctx: Context) -> Scenario:
        request = f"Why did {ctx.service} restart overnight? Check the logs.{ctx.flourish}"
        # About half of these print enough log to be truncated by the runtime.
        lines = self.rng.choice((4, 8, 30, 100))

        def segment(first: bool) -> tuple[list[Item], str]:
            log = "".join(
                f"2026-05-0{1 + i % 9}T0{i % 10}:{i % 60:02d}:00Z {ctx.service} "
                f"{'WARN' if i % 7 else 'ERROR'} worker {i % 4} heap {512 + i} MB\n"
                for i in range(lines)
            )
            items = self.exec_call(
                f"journalctl -u {ctx.service} --since yesterday | tail -n {lines}", log
            )
            return items, f"{ctx.service} was OOM-killed: heap grew past the 1 GB limit."

        return Scenario(
            "log_triage",
            f"triage-restart-{ctx.service}",
            "operations incidents",
            "oom",
            request,
            segment,
            followups=("Propose a memory limit.",),
        )

    def failed_run(self, ctx: Context) -> Scenario:
        request = f"Rotate the API keys for {ctx.service} and restart it.{ctx.flourish}"
        # Mostly provider errors and max turns, as in medium-300.
        state, exc_type, message = self.rng.choices(FAILURES, weights=(10, 10, 1, 1))[0]
        if state == "failed" and self.rng.random() < 0.2:
            message = f"{message} (request_id=req_{self.hex(12)})"

        def segment(first: bool) -> tuple[list[Item], str]:
            return self.exec_call("ls -R deploy | head -n 20", "deploy:\n"), ""

        scenario = Scenario(
            "failed_run",
            f"rotate-keys-{ctx.service}",
            "operations incidents",
            "verification",
            request,
            segment,
            followups=("Try again with the staging keys.",),
        )
        scenario.failure = (state, exc_type, message)
        return scenario

    def approval_needed(self, ctx: Context) -> Scenario:
        request = f"Restart {ctx.service} in production.{ctx.flourish}"

        def segment(first: bool) -> tuple[list[Item], str]:
            return self.exec_call(f"deployctl status {ctx.service}", "3/3 pods ready\n"), ""

        scenario = Scenario(
            "approval",
            f"restart-{ctx.service}",
            "operations incidents",
            "approval",
            request,
            segment,
            followups=("Approved, go ahead.",),
        )
        scenario.interrupted = True
        return scenario

    # -- assembling ----------------------------------------------------------------
    def rollout(self, index: int, start: datetime) -> Rollout:
        rng = self.rng
        layout = LAYOUTS[1] if rng.random() < ENGINEERING_SHARE else LAYOUTS[0]
        ctx = Context(service=rng.choice(SERVICES), flourish=rng.choice(FLOURISHES))
        weights = [w for w, _ in self.scenarios]
        build = rng.choices([b for _, b in self.scenarios], weights=weights)[0]
        scenario = build(ctx)
        if rng.random() < 0.4:  # no conversation id: the SDK names it run-<uuid hex>
            rollout_id = f"run-{self.hex(32)}"
        else:
            rollout_id = f"{scenario.kind.replace('_', '-')}-{index:05d}-{self.hex(6)}"

        n_segments = rng.choices((1, 2, 3), weights=(90, 7, 3))[0]
        segments = []
        when = start
        for number in range(n_segments):
            request = scenario.request if number == 0 else rng.choice(scenario.followups)
            items, answer = scenario.segment(number == 0)
            last = number == n_segments - 1
            seg = Segment(
                updated_at=self.timestamp(when), input=[self.user(request)], generated_items=items
            )
            if scenario.failure and last:
                seg.terminal_state, seg.exception_type, seg.exception_message = scenario.failure
            elif scenario.interrupted and last:
                seg.terminal_state = "interrupted"
                seg.interruptions = [
                    {
                        "arguments": json.dumps({"cmd": f"deployctl restart {ctx.service}"}),
                        "call_id": f"call_{self.hex(24)}",
                        "name": "exec_command",
                        "type": "function_call",
                        "id": f"fc_{self.hex(24)}",
                        "status": "completed",
                    }
                ]
            else:
                seg.generated_items = items + [self.assistant(answer or "Done.")]
                seg.final_output = answer or "Done."
            segments.append(seg)
            when += timedelta(seconds=rng.uniform(60, 4 * 3600), microseconds=rng.randrange(10**6))
        if rng.random() < 0.001:  # the SDK's rare run without a timestamp
            segments[-1].updated_at = None

        slug: str | None = f"{scenario.task}-{self.hex(4)}"
        orphan = None
        roll = rng.random()
        if roll < 0.01:  # nothing worth remembering, or an invalid slug: no memory at all
            slug = None
        elif roll < 0.013:  # re-extracted with a new slug: the old summary stays behind
            orphan = f"{scenario.task}-{self.hex(4)}"
        return Rollout(
            layout=layout,
            rollout_id=rollout_id,
            kind=scenario.kind,
            task=scenario.task,
            task_group=scenario.group,
            service=ctx.service,
            keyword=scenario.keyword,
            request=scenario.request,
            segments=segments,
            slug=slug,
            orphan_slug=orphan,
            preference=scenario.preference,
        )

    def rollouts(self) -> list[Rollout]:
        step = SPAN / self.count
        out = []
        for index in range(self.count):
            jitter = timedelta(seconds=self.rng.uniform(0, step.total_seconds() * 0.8))
            start = (START + step * index + jitter).replace(microsecond=self.rng.randrange(10**6))
            out.append(self.rollout(index, start))
        return out


# --- phase two outputs ----------------------------------------------------------------


def selection_order(remembered: list[Rollout]) -> list[Rollout]:
    """Phase two's candidate order: real timestamps first, newest (as a string) first,
    then rollout id, all descending (``storage._list_current_selection_items``)."""

    def key(r: Rollout) -> tuple[tuple[int, str], str]:
        ts = r.updated_at.strip()
        return ((0, "") if not ts or ts == "unknown" else (1, ts)), r.rollout_id

    return sorted(remembered, key=key, reverse=True)


def selection_json(selected: list[Rollout], updated_at: str) -> str:
    payload = {
        "version": 1,
        "updated_at": updated_at,
        "selected": [
            {
                "rollout_id": r.rollout_id,
                "updated_at": r.updated_at,
                "rollout_path": r.rollout_path,
                "rollout_summary_file": r.summary_file,
                "terminal_state": r.terminal_state,
            }
            for r in selected
        ],
    }
    return json.dumps(payload, indent=2) + "\n"


def memory_md(ordered: list[Rollout], rng: random.Random) -> str:
    """One ``# Task Group`` per 3-7 rollouts (5 on average), newest first."""
    blocks: list[str] = []
    i = 0
    while i < len(ordered):
        group = ordered[i : i + rng.randint(3, 7)]
        i += len(group)
        first = group[0]
        date = first.updated_at[:10] if first.updated_at != "unknown" else "undated"
        lines = [
            f"# Task Group: {first.task_group}, {first.service} ({date})",
            "",
            f"scope: {', '.join(sorted({r.task for r in group}))}",
            "",
        ]
        for n, r in enumerate(group, start=1):
            lines += [
                f"## Task {n}: {r.task}, outcome {r.outcome}",
                "",
                "### rollout_summary_files",
                "",
                f"- {r.summary_file} (rollout_id={r.rollout_id}, updated_at={r.updated_at}, "
                f"terminal_state={r.terminal_state})",
                "",
                "### keywords",
                "",
                f"- {r.task}, {r.service}, {r.keyword}",
                "",
            ]
        prefs = [(n, r) for n, r in enumerate(group, start=1) if r.preference]
        if prefs:
            lines += ["## User preferences", ""]
            lines += [f'- the user said: "{r.preference}" [Task {n}]' for n, r in prefs] + [""]
        lines += ["## Reusable knowledge", ""]
        lines += [
            f"- {r.task} handled in {len(r.segments)} segment(s) [Task {n}]"
            for n, r in enumerate(group, start=1)
        ] + [""]
        failed = [(n, r) for n, r in enumerate(group, start=1) if r.outcome != "success"]
        if failed:
            lines += ["## Failures and how to do differently", ""]
            lines += [
                f"- ended {r.terminal_state}; check credentials and approvals first [Task {n}]"
                for n, r in failed
            ] + [""]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def memory_summary_md(layout: LayoutDirs, ordered: list[Rollout]) -> str:
    """The index the SDK injects into instructions; kept near medium-300's ~40 KB."""
    prefs = sorted({r.preference for r in ordered if r.preference})
    out = [
        "## User Profile",
        "",
        f"Works in the `{layout.memories_dir}` memory scope; {len(ordered)} remembered "
        "task(s). Cares about minimal, verified changes and clear written notes.",
        "",
        "## User preferences",
        "",
        *[f'- the user said: "{p}" -> apply by default' for p in prefs],
        "",
        "## General Tips",
        "",
        "- Search MEMORY.md by the keywords below before exploring the workspace.",
        "- Failed and max-turn runs are recorded with their terminal_state; check them "
        "first when a similar request comes back.",
        "",
        "## What's in Memory",
        "",
        f"### {layout.memories_dir}",
        "",
    ]
    shown = ordered[:150]
    date: str | None = None
    for r in shown:
        day = r.updated_at[:10] if r.updated_at != "unknown" else "unknown"
        if day != date:
            out += ([""] if date is not None else []) + [f"#### {day}", ""]
            date = day
        out += [
            f"- {r.task_group}: {r.task}, {r.service}, {r.keyword}",
            f"  - desc: {r.description()}",
            f"  - learnings: outcome {r.outcome}; see {r.summary_file}",
        ]
    out += ["", f"- older topics ({len(ordered) - len(shown)} tasks): search MEMORY.md by keyword"]
    return "\n".join(out) + "\n"


# --- writing --------------------------------------------------------------------------


@dataclass
class Stats:
    files: int = 0
    bytes: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)

    def add(self, kind: str, size: int) -> None:
        self.files += 1
        self.bytes += size
        self.by_kind.setdefault(kind, []).append(size)


def write(root: Path, rel: str, text: str, stats: Stats, kind: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(data)
    stats.add(kind, len(data))


def add_memory_reads(gen: Generator, rollouts: list[Rollout], share: float, seed: int) -> None:
    """Begin ``share`` of the rollouts with the agent reading its memory as the SDK's
    memory prompt tells it to: a numbered ``rg`` of ``MEMORY.md``, a ``sed`` range of it,
    or a rollout summary ``cat``. Drawn from an RNG of their own, so that every other byte
    of the tree is the same with or without them."""
    main_rng, gen.rng = gen.rng, random.Random(seed + 1)
    try:
        rng = gen.rng
        for r in rollouts:
            if rng.random() >= share:
                continue
            memories = r.layout.memories_dir
            roll = rng.random()
            if roll < 0.5:
                lines = sorted(rng.sample(range(1, 20_000), rng.randint(1, 3)))
                items = gen.exec_call(
                    f"rg -n {r.keyword!r} {memories}/MEMORY.md",
                    "".join(f"{n}:- {r.keyword} in {r.service}\n" for n in lines),
                )
            elif roll < 0.75:
                start = rng.randint(1, 20_000)
                items = gen.exec_call(
                    f"sed -n '{start},{start + 40}p' {memories}/MEMORY.md",
                    f"## Task 1: {r.task}\n- {r.keyword}\n",
                )
            else:
                items = gen.exec_call(
                    f"cat {memories}/rollout_summaries/{r.task}.md", f"# {r.task}\n"
                )
            r.segments[0].generated_items[:0] = items
    finally:
        gen.rng = main_rng


def generate(
    root: Path, rollouts: int = DEFAULT_ROLLOUTS, seed: int = DEFAULT_SEED, memory_reads: float = 0
) -> Stats:
    """Write the workspace into ``root`` (created; must not hold anything yet);
    ``memory_reads``: the share of rollouts that begin by reading memory."""
    gen = Generator(rollouts, seed)
    all_rollouts = gen.rollouts()
    if memory_reads:
        add_memory_reads(gen, all_rollouts, memory_reads, seed)
    stats = Stats()
    root.mkdir(parents=True, exist_ok=True)
    write(
        root,
        "README.md",
        f"{README_TITLE} (seed {seed}, {rollouts} rollouts)\n",
        stats,
        "workspace_file",
    )
    write(root, "data/leads.csv", LEADS_CSV, stats, "workspace_file")
    phase_two_at = (START + SPAN + timedelta(days=1)).isoformat()

    for layout in LAYOUTS:
        mine = [r for r in all_rollouts if r.layout == layout]
        memories = root / layout.memories_dir
        # What the SDK creates with a layout's first rollout, skills/ included.
        for sub in ("raw_memories", "rollout_summaries", "skills"):
            (memories / sub).mkdir(parents=True, exist_ok=True)
        (root / layout.sessions_dir).mkdir(parents=True, exist_ok=True)
        for r in mine:
            write(root, r.rollout_path, r.jsonl(), stats, "rollout")
            if r.slug is None:
                continue
            write(
                root,
                f"{layout.memories_dir}/raw_memories/{r.rollout_id}.md",
                r.raw_memory(),
                stats,
                "raw_memory",
            )
            write(
                root,
                f"{layout.memories_dir}/{r.summary_file}",
                r.rollout_summary(gen.session_id),
                stats,
                "rollout_summary",
            )
            if r.orphan_slug:
                earlier = r.segments[0].updated_at or "unknown"
                write(
                    root,
                    f"{layout.memories_dir}/rollout_summaries/{r.rollout_id}_{r.orphan_slug}.md",
                    r.rollout_summary(gen.session_id, updated_at=earlier),
                    stats,
                    "rollout_summary",
                )

        ordered = selection_order([r for r in mine if r.slug is not None])
        selected = ordered[:MAX_RAW_MEMORIES_FOR_CONSOLIDATION]
        m = layout.memories_dir
        write(
            root,
            f"{m}/raw_memories.md",
            "\n\n".join(r.raw_memory().rstrip("\n") for r in selected),
            stats,
            "raw_memories_merged",
        )
        write(
            root,
            f"{m}/phase_two_selection.json",
            selection_json(selected, phase_two_at),
            stats,
            "selection",
        )
        write(root, f"{m}/MEMORY.md", memory_md(ordered, gen.rng), stats, "memory_index")
        write(
            root,
            f"{m}/memory_summary.md",
            memory_summary_md(layout, ordered),
            stats,
            "memory_summary",
        )
        for name, description, steps in SKILLS:
            seen_in = next((r.rollout_id for r in ordered), "")
            write(
                root,
                f"{m}/skills/{name}/SKILL.md",
                f"---\nname: {name}\ndescription: {description}\n---\n\n"
                f"# {name.replace('-', ' ').capitalize()}\n\n{steps}\nSeen in: {seen_in}\n",
                stats,
                "skill",
            )
    return stats


def is_generated_tree(path: Path) -> bool:
    """True when ``path`` holds a tree this script wrote (its README says so): the only
    kind of directory that ``--force`` and the benchmark's ``--regenerate`` delete."""
    try:
        return (path / "README.md").read_text(encoding="utf-8").startswith(README_TITLE)
    except OSError:
        return False


def describe(stats: Stats) -> str:
    lines = [f"{stats.files} files, {stats.bytes / 1e6:.1f} MB"]
    for kind, sizes in sorted(stats.by_kind.items()):
        lines.append(
            f"  {kind:<20} {len(sizes):>6} files  avg {sum(sizes) / len(sizes):>9.0f} B  "
            f"max {max(sizes):>9} B"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="workspace directory to create")
    parser.add_argument("--rollouts", type=int, default=DEFAULT_ROLLOUTS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    parser.add_argument(
        "--memory-reads",
        type=float,
        default=0,
        metavar="SHARE",
        help="the share of rollouts (0-1) that begin by reading MEMORY.md or a summary",
    )
    args = parser.parse_args(argv)
    if args.rollouts < 1:
        parser.error("--rollouts must be at least 1")
    if args.output.exists() and any(args.output.iterdir()):
        if not args.force:
            parser.error(f"{args.output} exists and is not empty (use --force to replace it)")
        if not is_generated_tree(args.output):
            parser.error(f"{args.output} was not written by this script; not deleting it")
        shutil.rmtree(args.output)
    started = time.perf_counter()
    stats = generate(args.output, args.rollouts, args.seed, args.memory_reads)
    print(f"wrote {args.output} in {time.perf_counter() - started:.1f}s: {describe(stats)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
