"""Memory usage from the rollouts: an agent run by the SDK itself (``Runner.run`` in a
``UnixLocalSandboxClient`` sandbox with ``Memory()``) reads its memory with the shell
and ``load_skill``; the import finds each read and the entries it printed."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from agents import RunConfig, Runner
from agents.run_config import SandboxRunConfig
from agents.sandbox import SandboxAgent
from agents.sandbox.capabilities.capabilities import Capabilities
from agents.sandbox.capabilities.memory import Memory
from agents.sandbox.capabilities.skills import LocalDirLazySkillSource, Skills
from agents.sandbox.config import MemoryGenerateConfig, MemoryLayoutConfig
from agents.sandbox.entries import LocalDir
from agents.sandbox.manifest import Manifest
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.sandbox.util.token_truncation import formatted_truncate_text_with_token_count
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from generation import memory_entries, memory_reads, phase_two, review
from memoryui import curation, documents, forgetting, tasks, tokens, usage
from memoryui.importer import import_workspace, spool
from memoryui.importer.spool import ReadSpool
from memoryui.models import (
    EntryRead,
    GenerationSettings,
    Layout,
    Membership,
    MemoryRead,
    MemoryVersion,
    Pin,
    Proposal,
    Role,
    Workspace,
)
from memoryui.usage import entry_usage, usage_of, usage_ranking
from tests.factories import curate, make_user
from tests.scripted_model import Reply
from tests.test_remote_snapshots import no_tracing, sdk_model  # noqa: F401 (a fixture)
from tests.test_scoped_duplicates import generated_memory_md

LAYOUT = MemoryLayoutConfig(memories_dir="memories", sessions_dir="sessions")

MEMORY_MD = """\
# Task Group: deploys
scope: deploying services

## Task 1: Deploy billing, success

### rollout_summary_files
- rollout_summaries/r1_deploy-billing.md (rollout_id=r1)

### keywords
- billing, runbook

## Task 2: Roll back search, failed

### rollout_summary_files
- rollout_summaries/r2_rollback.md (rollout_id=r2)

### keywords
- rollback, search

# Task Group: databases
scope: database migrations

## Task 1: Migrate the orders table, success

### rollout_summary_files
- rollout_summaries/r3_orders.md (rollout_id=r3)

### keywords
- migration, orders
"""
SUMMARY = "## User Profile\n\nDeploys billing and search; runs migrations.\n"
SKILL = "---\nname: deploy\ndescription: Deploy a service with the runbook.\n---\n\nRun it.\n"

# Titles of the entries of MEMORY_MD, by what the tests call them.
DEPLOYS = "deploys"
BILLING = "Task 1: Deploy billing, success"
ROLLBACK = "Task 2: Roll back search, failed"
DATABASES = "databases"
ORDERS = "Task 1: Migrate the orders table, success"


def titles(keys) -> list[str]:
    by_key = {e.key: e.title for e in review.entries(MEMORY_MD)}
    return [by_key[k] for k in keys]


def workspace_with_memory(root: Path) -> None:
    memories = root / "memories"
    (memories / "rollout_summaries").mkdir(parents=True)
    (memories / "skills" / "deploy").mkdir(parents=True)
    (memories / "raw_memories").mkdir()
    (memories / "MEMORY.md").write_text(MEMORY_MD)
    (memories / "memory_summary.md").write_text(SUMMARY)
    (memories / "rollout_summaries" / "r1_deploy-billing.md").write_text(
        "session_id: s1\nupdated_at: 2026-11-01T10:00:00+00:00\nrollout_path: sessions/r1.jsonl\n"
        "terminal_state: completed\n\n# Deploy billing\n\nFollowed the runbook.\n"
    )
    (memories / "skills" / "deploy" / "SKILL.md").write_text(SKILL)
    (root / "sessions").mkdir()


def exec_command(
    cmd: str, workdir: str | None = None, max_output_tokens: int | None = None
) -> tuple[str, dict]:
    args: dict = {"cmd": cmd}
    if workdir:
        args["workdir"] = workdir
    if max_output_tokens:
        args["max_output_tokens"] = max_output_tokens
    return ("exec_command", args)


def run_agent(model, root: Path, *turns: tuple[str, dict], monkeypatch) -> None:
    """One SDK run in a sandbox over ``root`` whose model makes ``turns`` (one tool
    call each), then answers. The run's rollout is written under ``sessions/``."""
    # The sandbox's shell finds rg where this interpreter's tools are.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    model.script(*(Reply.tools(turn) for turn in turns), Reply(raw_text="Done."))
    # The lazy skills come from the workspace's memory folder, a path under the
    # current directory (the SDK reads no other host folder without a grant).
    monkeypatch.chdir(root)

    async def session_run() -> None:
        client = UnixLocalSandboxClient()
        session = await client.create(manifest=Manifest(root=str(root)))
        await session.start()
        agent = SandboxAgent(
            name="deployer",
            instructions="Deploy services when asked.",
            model=sdk_model(model),
            capabilities=[
                *Capabilities.default(),
                Memory(
                    layout=LAYOUT,
                    generate=MemoryGenerateConfig(
                        phase_one_model=sdk_model(model), phase_two_model=sdk_model(model)
                    ),
                ),
                Skills(
                    lazy_from=LocalDirLazySkillSource(source=LocalDir(src=Path("memories/skills")))
                ),
            ],
        )
        result = await Runner.run(
            agent,
            "Deploy billing.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
        )
        assert result.final_output == "Done."
        # Not closed: closing would run the SDK's memory generation (phase one and two).

    asyncio.run(session_run())


def reads_of(layout: Layout) -> list[MemoryRead]:
    return list(
        MemoryRead.objects.filter(layout=layout)
        .prefetch_related("entries")
        .order_by("segment", "item", "pk")
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("no_tracing")
def test_each_read_of_an_sdk_run_lands_on_exactly_the_entries_it_printed(
    model, tmp_path, monkeypatch
):
    root = tmp_path / "ws"
    workspace_with_memory(root)
    run_agent(
        model,
        root,
        exec_command("rg -n runbook memories/MEMORY.md"),
        exec_command("sed -n 20,26p memories/MEMORY.md"),
        exec_command("cat memories/rollout_summaries/r1_deploy-billing.md"),
        exec_command("cd memories && grep 'rollback, search' MEMORY.md"),
        exec_command("cat MEMORY.md | head -n 3", workdir="memories"),
        exec_command("echo memories/MEMORY.md && ls memories/skills > /dev/null"),
        ("load_skill", {"skill_name": "deploy"}),
        monkeypatch=monkeypatch,
    )
    assert list((root / "sessions").glob("*.jsonl"))
    import_workspace(root, "agents")
    layout = Layout.objects.get(workspace__name="agents", memories_dir="memories")
    reads = reads_of(layout)

    found = [(r.kind, r.path, r.how, titles(e.key for e in r.entries.all())) for r in reads]
    assert found == [
        ("memory_md", "MEMORY.md", "search", [BILLING]),
        ("memory_md", "MEMORY.md", "range", [DATABASES, ORDERS]),
        ("rollout_summary", "rollout_summaries/r1_deploy-billing.md", "whole", []),
        ("memory_md", "MEMORY.md", "search", [ROLLBACK]),
        ("memory_md", "MEMORY.md", "range", [DEPLOYS]),
        ("skill", "skills/deploy/SKILL.md", "load_skill", []),
    ]
    version = MemoryVersion.objects.get(layout=layout, document="memory_md")
    assert {r.version_id for r in reads if r.kind == "memory_md"} == {version.pk}
    assert all(r.terminal_state == "completed" and r.read_at is not None for r in reads)
    # Each read is the item of the rollout that made it: the call, not its output.
    assert reads[0].command == "rg -n runbook memories/MEMORY.md"
    assert len({r.item for r in reads}) == len(reads)


@pytest.mark.django_db
@pytest.mark.usefixtures("no_tracing")
def test_a_whole_file_whose_output_the_tool_cut_reads_only_the_entries_of_its_head_and_tail(
    model, tmp_path, monkeypatch
):
    """An agent that asks the shell tool for at most a few tokens of output gets the
    head and the tail of MEMORY.md around a marker: the entries of the middle stayed
    unseen, and count as unread (forgetting may propose them)."""
    root = tmp_path / "ws"
    workspace_with_memory(root)
    run_agent(
        model,
        root,
        exec_command("cat memories/MEMORY.md", max_output_tokens=20),
        exec_command("cat memories/MEMORY.md"),
        monkeypatch=monkeypatch,
    )
    import_workspace(root, "agents")
    layout = Layout.objects.get(workspace__name="agents", memories_dir="memories")
    (rollout,) = (root / "sessions").glob("*.jsonl")
    segment = json.dumps(json.loads(rollout.read_text()), ensure_ascii=False)
    assert "tokens truncated…" in segment  # the SDK's tool cut it
    cut, whole = reads_of(layout)
    assert (cut.how, titles(e.key for e in cut.entries.all())) == ("cut", [DEPLOYS, ORDERS])
    assert (whole.how, whole.entry_count) == ("whole", 5)
    # The rollout page says why a cat read two entries of five.
    page = viewer_client(layout).get(
        reverse("memoryui:rollout_detail", args=["agents", layout.pk, rollout.stem])
    )
    text = page.content.decode()
    assert "(the head and tail of a cut output): " in text and "(the whole file): " in text


@pytest.mark.django_db
@pytest.mark.usefixtures("no_tracing")
def test_a_reimport_of_unchanged_files_adds_nothing_and_a_new_rollout_adds_its_reads(
    model, tmp_path, monkeypatch
):
    root = tmp_path / "ws"
    workspace_with_memory(root)
    run_agent(model, root, exec_command("rg -n orders memories/MEMORY.md"), monkeypatch=monkeypatch)
    import_workspace(root, "agents")
    layout = Layout.objects.get(workspace__name="agents", memories_dir="memories")
    assert MemoryRead.objects.filter(layout=layout).count() == 1
    first = list(EntryRead.objects.values_list("pk", "key"))

    import_workspace(root, "agents")
    assert list(EntryRead.objects.values_list("pk", "key")) == first

    run_agent(model, root, exec_command("sed -n 4,11p memories/MEMORY.md"), monkeypatch=monkeypatch)
    import_workspace(root, "agents")
    reads = reads_of(layout)
    assert [titles(e.key for e in r.entries.all()) for r in reads] == [[ORDERS], [BILLING]]


def test_commands_that_only_mention_a_memory_path_read_nothing():
    for cmd in (
        "echo memories/MEMORY.md",
        "ls memories/rollout_summaries",
        "printf '%s\\n' memories/skills/deploy/SKILL.md",
        "touch memories/MEMORY.md",
        "echo hi > memories/MEMORY.md",
        "test -f memories/MEMORY.md && echo yes",
    ):
        assert memory_reads.command_reads(cmd, "memories", output="yes") == [], cmd


def test_reads_follow_the_shell_quoting_cd_pipelines_and_lists():
    reads = memory_reads.command_reads
    assert reads("cd memories/x && cat ../MEMORY.md", "memories") == [
        memory_reads.Read("memory_md", "MEMORY.md", "whole")
    ]
    assert reads("cd /tmp && cat memories/MEMORY.md", "memories") == []
    assert reads('cat "memories/rollout_summaries/a b.md"', "memories") == [
        memory_reads.Read("rollout_summary", "rollout_summaries/a b.md", "whole")
    ]
    assert reads("tail -n 4 /home/u/ws/memories/MEMORY.md", "memories") == [
        memory_reads.Read("memory_md", "MEMORY.md", "range", ((-4, -1),))
    ]
    searched = reads(
        "rg -n -i deploy memories",
        "memories",
        output="memories/MEMORY.md:3:deploy\nmemories/skills/d/SKILL.md:1:deploy\n",
    )
    assert [(r.path, r.numbered) for r in searched] == [
        ("MEMORY.md", (3,)),
        ("skills/d/SKILL.md", (1,)),
    ]
    assert reads("(cd memories; cat MEMORY.md) && cat MEMORY.md", "memories") == [
        memory_reads.Read("memory_md", "MEMORY.md", "whole")
    ]


def test_the_same_search_run_again_reads_the_lines_its_own_output_printed():
    """A command's parse is kept by its text; the lines a search read are never kept
    with it: the same ``rg`` over another MEMORY.md hits what that run printed."""
    reads = memory_reads.command_reads
    for output, numbered in (("3:deploy\n", (3,)), ("7:deploy\n9:deploy\n", (7, 9)), ("", ())):
        searched = reads("rg -n deploy memories/MEMORY.md", "memories", output=output)
        assert searched == [
            memory_reads.Read("memory_md", "MEMORY.md", "search", numbered=numbered)
        ]
    for output, printed in (("- deploy first\n", ("- deploy first",)), ("x\n", ("x",))):
        piped = reads("cat memories/MEMORY.md | grep deploy", "memories", output=output)
        assert piped == [memory_reads.Read("memory_md", "MEMORY.md", "search", printed=printed)]
    # The same text from another directory is another command.
    assert reads("cat MEMORY.md", "memories", workdir="memories") == [
        memory_reads.Read("memory_md", "MEMORY.md", "whole")
    ]
    assert reads("cat MEMORY.md", "memories", workdir="elsewhere") == []


def test_a_tail_range_and_a_whole_file_map_to_the_entries_they_cover():
    tail = memory_reads.Read("memory_md", "MEMORY.md", "range", ((-2, -1),))
    assert titles(memory_entries.entry_hits(tail, MEMORY_MD)) == [ORDERS]
    whole = memory_reads.Read("memory_md", "MEMORY.md", "whole")
    assert titles(memory_entries.entry_hits(whole, MEMORY_MD)) == [
        DEPLOYS,
        BILLING,
        ROLLBACK,
        DATABASES,
        ORDERS,
    ]


def test_a_cut_output_maps_a_range_or_a_tail_to_the_lines_it_still_showed():
    """The SDK's own cut (``formatted_truncate_text_with_token_count``, as its shell
    tool applies ``max_output_tokens``) of what ``sed`` and ``tail`` printed."""
    lines = MEMORY_MD.splitlines(keepends=True)

    def hits(cmd: str, printed: list[str]) -> list[str]:
        output, _ = formatted_truncate_text_with_token_count("".join(printed), 20)
        assert "tokens truncated…" in output
        (read,) = memory_reads.command_reads(cmd, "memories", output=output)
        return titles(memory_entries.entry_hits(read, MEMORY_MD))

    # Lines 6-9 (BILLING's) and 28-29 (ORDERS') printed; ROLLBACK and DATABASES unseen.
    assert hits("sed -n 6,400p memories/MEMORY.md", lines[5:]) == [BILLING, ORDERS]
    assert hits("tail -n 20 memories/MEMORY.md", lines[-20:]) == [BILLING, ORDERS]
    # Not cut: every entry of the range, as before.
    whole = memory_reads.command_reads("sed -n 6,400p memories/MEMORY.md", "memories", output="")
    assert titles(memory_entries.entry_hits(whole[0], MEMORY_MD)) == [
        BILLING,
        ROLLBACK,
        DATABASES,
        ORDERS,
    ]
    # Two files in one cut output: which lines are whose cannot be told; both whole.
    output, _ = formatted_truncate_text_with_token_count(MEMORY_MD + SUMMARY, 20)
    both = memory_reads.command_reads(
        "cat memories/MEMORY.md memories/memory_summary.md", "memories", output=output
    )
    assert [r.how for r in both] == ["whole", "whole"]


def _starts_from_entries(text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    starts, keys, line = [], [], 1
    for entry in review.entries(text):
        starts.append(line)
        keys.append(entry.key)
        line += entry.text.count("\n")
    return tuple(starts), tuple(keys)


def test_entries_found_a_group_at_a_time_are_the_entries_of_the_whole_parse(fixtures_dir, tmp_path):
    """An import finds where each entry of a large MEMORY.md starts one task group at
    a time (holding no parse of the whole text): the same lines and keys as the
    entries, on every SDK-written MEMORY.md, a generated one with repeated titles, and
    texts that are not made of task groups alone."""
    texts = [path.read_text() for path in sorted(fixtures_dir.rglob("MEMORY.md"))]
    texts.append(generated_memory_md(tmp_path))
    texts.append(texts[-1] + texts[-1])  # every key taken twice: "#2"
    texts += [MEMORY_MD, "A preamble.\n\n" + MEMORY_MD, "```\n" + MEMORY_MD]
    texts.append(MEMORY_MD + "# Task Group: open\n\n```\n# Task Group: fenced\n")
    for text in texts:
        assert review.entry_starts(text) == _starts_from_entries(text)
    assert len(texts) >= 10 and all(review.entry_starts(t)[1] for t in texts)


def test_a_search_without_numbers_lands_on_each_entry_holding_a_line_it_printed():
    """Lines matched by their text, a line printed twice in the file found at both."""
    text = MEMORY_MD + "\n# Task Group: again\n\n## Task 1: Again\n\n- billing, runbook\n"
    read = memory_reads.Read("memory_md", "MEMORY.md", "search", printed=("- billing, runbook",))
    lines = memory_entries.entry_lines(text, read.printed)
    assert lines.total == len(text.splitlines())
    assert [
        review.entries(text)[i].title
        for i, k in enumerate(lines.keys)
        if k in memory_entries.entry_hits(read, lines)
    ] == [BILLING, "Task 1: Again"]
    assert memory_entries.entry_hits(read, text) == memory_entries.entry_hits(read, lines)


# --- usage per entry, across versions ---------------------------------------------------


def rollout_line(rollout_id: str, when: str, state: str, *cmds: tuple[str, str]) -> str:
    """One run segment as the SDK writes it: each (command, output) an exec_command call
    and its output."""
    items: list[dict] = []
    for n, (cmd, output) in enumerate(cmds):
        call_id = f"call_{n}"
        items.append(
            {
                "arguments": json.dumps({"cmd": cmd}),
                "call_id": call_id,
                "name": "exec_command",
                "type": "function_call",
            }
        )
        items.append(
            {
                "call_id": call_id,
                "output": f"Chunk ID: 1\nWall time: 0.01 seconds\nProcess exited with code 0\n"
                f"Output:\n{output}",
                "type": "function_call_output",
            }
        )
    segment = {
        "updated_at": when,
        "rollout_id": rollout_id,
        "input": [{"content": "Go.", "role": "user"}],
        "generated_items": items,
        "terminal_metadata": {
            "terminal_state": state,
            "exception_type": None,
            "exception_message": None,
            "has_final_output": state == "completed",
        },
    }
    return json.dumps(segment, separators=(",", ":")) + "\n"


def write_rollout(root: Path, rollout_id: str, *segments: str) -> None:
    (root / "sessions" / f"{rollout_id}.jsonl").write_text("".join(segments))


RENAMED = MEMORY_MD.replace(
    "## Task 2: Roll back search, failed", "## Task 2: Revert the search deploy, failed"
).replace("- billing, runbook", "- billing, runbook, canary")
ADDED = "## Task 3: Rotate the keys, success\n\n### keywords\n- keys, rotation\n\n"
LATER = RENAMED.replace("# Task Group: databases", ADDED + "# Task Group: databases")


def key_of(text: str, title: str) -> str:
    return next(e.key for e in review.entries(text) if e.title == title)


@pytest.fixture
def used_layout(db, tmp_path) -> Layout:
    """MEMORY_MD imported with two rollouts: "r-ok" (two completed runs) read the
    billing task twice, "r-bad" (a failed run) the rollback task once."""
    root = tmp_path / "ws"
    workspace_with_memory(root)
    write_rollout(
        root,
        "r-ok",
        rollout_line(
            "r-ok",
            "2026-11-02T10:00:00+00:00",
            "completed",
            ("rg -n runbook memories/MEMORY.md", "10:- billing, runbook"),
        ),
        rollout_line(
            "r-ok", "2026-11-03T10:00:00+00:00", "completed", ("sed -n 4,6p memories/MEMORY.md", "")
        ),
    )
    write_rollout(
        root,
        "r-bad",
        rollout_line(
            "r-bad", "2026-11-04T10:00:00+00:00", "failed", ("sed -n 12,18p memories/MEMORY.md", "")
        ),
    )
    import_workspace(root, "agents")
    layout = Layout.objects.get(workspace__name="agents", memories_dir="memories")
    return layout


@pytest.mark.django_db
def test_usage_is_carried_to_changed_and_paired_entries_and_a_new_entry_starts_at_zero(
    used_layout,
):
    layout = used_layout
    curate(layout, "memory_md", LATER)
    latest = MemoryVersion.objects.filter(layout=layout, document="memory_md").first()
    assert latest is not None and latest.number == 2

    usage = entry_usage(layout, latest)

    billing = usage[key_of(LATER, BILLING)]
    assert (billing.reads, billing.runs, billing.states) == (2, 2, {"completed": 2})
    assert billing.first_read.isoformat() == "2026-11-02T10:00:00+00:00"
    assert billing.last_read.isoformat() == "2026-11-03T10:00:00+00:00"
    revert = usage[key_of(LATER, "Task 2: Revert the search deploy, failed")]
    assert (revert.reads, revert.runs, revert.states) == (1, 1, {"failed": 1})
    assert revert.read_by_failing_runs == 1
    assert key_of(LATER, "Task 3: Rotate the keys, success") not in usage
    assert key_of(LATER, ORDERS) not in usage  # never read


def the_billing_run_also_read_the_rollback(layout: Layout) -> None:
    """r-ok's first run (its rg printed the billing task) printed the rollback task too."""
    read = MemoryRead.objects.get(rollout__rollout_id="r-ok", segment=1)
    EntryRead.objects.create(
        read=read,
        layout=layout,
        version_id=read.version_id,
        key=key_of(MEMORY_MD, ROLLBACK),
        rollout_id=read.rollout_id,
        segment=1,
        read_at=read.read_at,
        terminal_state="completed",
    )


def test_the_usage_of_some_entries_reads_theirs_alone_and_agrees_with_every_entrys(
    used_layout, django_assert_max_num_queries
):
    """A page of cards or blocks asks for its entries' usage: their reads alone are
    read, earlier forms included, and they count as in the usage of every entry."""
    layout = used_layout
    curate(layout, "memory_md", LATER)
    latest = MemoryVersion.objects.filter(layout=layout, document="memory_md").first()
    billing, revert = (
        key_of(LATER, BILLING),
        key_of(LATER, "Task 2: Revert the search deploy, failed"),
    )
    orders = key_of(LATER, ORDERS)

    with django_assert_max_num_queries(4):  # 3, and a version's text not read before
        some = entry_usage(layout, latest, {billing, orders})
    every = entry_usage(layout, latest)

    assert set(some) == {billing}  # orders was never read; revert was not asked for
    assert revert in every
    assert (
        (some[billing].reads, some[billing].runs, some[billing].states)
        == (
            every[billing].reads,
            every[billing].runs,
            every[billing].states,
        )
        == (2, 2, {"completed": 2})
    )
    assert (some[billing].first_read, some[billing].last_read) == (
        every[billing].first_read,
        every[billing].last_read,
    )
    # A group of entries (a block, a card's earlier entries): a run that read several
    # of them counts once.
    the_billing_run_also_read_the_rollback(layout)
    both = usage_of(layout, latest, {"both": [billing, revert]})["both"]
    assert (both.reads, both.runs, both.states) == (4, 3, {"completed": 2, "failed": 1})
    assert both.read_by_failing_runs == 1


MERGED = MEMORY_MD.replace(
    MEMORY_MD[
        MEMORY_MD.index("## Task 1: Deploy billing") : MEMORY_MD.index("# Task Group: databases")
    ],
    "## Task 1: Deploy billing and roll back search, partial\n\n"
    "### rollout_summary_files\n"
    "- rollout_summaries/r1_deploy-billing.md (rollout_id=r1)\n"
    "- rollout_summaries/r2_rollback.md (rollout_id=r2)\n\n"
    "### keywords\n- billing, runbook\n- rollback, search\n\n",
)


def test_an_entry_merged_from_two_counts_a_run_that_read_both_once(used_layout):
    layout = used_layout
    the_billing_run_also_read_the_rollback(layout)
    curate(layout, "memory_md", MERGED)
    latest = MemoryVersion.objects.filter(layout=layout, document="memory_md").first()
    merged = key_of(MERGED, "Task 1: Deploy billing and roll back search, partial")

    every = entry_usage(layout, latest)[merged]
    alone = entry_usage(layout, latest, [merged])[merged]

    for used in (every, alone):
        assert (used.reads, used.runs, used.states) == (4, 3, {"completed": 2, "failed": 1})


def test_usage_kept_between_imports_counts_the_reads_the_next_import_brings(used_layout, tmp_path):
    client = viewer_client(used_layout)
    url = reverse("memoryui:layout_usage", args=["agents", used_layout.pk])
    memory_url = reverse("memoryui:memory_md", args=["agents", used_layout.pk])

    def billing_row() -> str:
        table = client.get(url).content.decode().split('id="entry-usage"')[1]
        return table.split(BILLING)[1].split("</tr>")[0]

    assert '<td class="num">2</td><td class="num">2</td>' in billing_row()
    assert "Read 3 times by 3 runs" in client.get(memory_url).content.decode()
    write_rollout(
        tmp_path / "ws",
        "r-new",
        rollout_line(
            "r-new",
            "2026-11-05T10:00:00+00:00",
            "failed",
            ("rg -n runbook memories/MEMORY.md", "10:- billing, runbook"),
        ),
    )
    import_workspace(tmp_path / "ws", "agents")

    assert '<td class="num">3</td><td class="num">3</td>' in billing_row()
    never = client.get(memory_url, {"usage": "failing"}).content.decode()
    assert "Read 4 times by 4 runs" in never and "2 of them failing" in never


# --- where people see it ---------------------------------------------------------------


def viewer_client(layout: Layout) -> Client:
    user = make_user("viewer")
    Membership.objects.create(user=user, workspace=layout.workspace, role=Role.VIEWER)
    client = Client()
    client.force_login(user)
    return client


def test_the_memory_page_shows_each_entrys_reads_and_filters_never_read_and_failing(
    used_layout, django_assert_max_num_queries
):
    client = viewer_client(used_layout)
    url = reverse("memoryui:memory_md", args=["agents", used_layout.pk])
    with django_assert_max_num_queries(14):
        page = client.get(url).content.decode()
    deploys, databases = page.split('<article class="entry')[1:3]
    assert "Read 3 times by 3 runs, " in deploys
    assert "1 of them failing" in deploys
    assert "never read" in databases and "Read " not in databases

    never = client.get(url, {"usage": "never"}).content.decode()
    assert "Task Group: databases" in never and "Task Group: deploys" not in never
    failing = client.get(url, {"usage": "failing"}).content.decode()
    assert "Task Group: deploys" in failing and "Task Group: databases" not in failing
    found = client.get(url, {"usage": "never", "q": "DATABASES"}).content.decode()
    assert "Task Group: databases" in found and "Task Group: deploys" not in found
    found = client.get(url, {"usage": "never", "q": "deploys"}).content.decode()
    assert "Task Group: databases" not in found and "Task Group: deploys" not in found
    assert client.get(url, {"usage": "sometimes"}).status_code == 400


def test_the_rollout_page_marks_the_calls_that_read_memory_and_links_their_entries(
    used_layout, django_assert_max_num_queries
):
    client = viewer_client(used_layout)
    url = reverse("memoryui:rollout_detail", args=["agents", used_layout.pk, "r-ok"])
    with django_assert_max_num_queries(14):
        page = client.get(url).content.decode()
    assert page.count(">reads memory</span>") == 2
    memory_url = reverse("memoryui:memory_md", args=["agents", used_layout.pk])
    link = f'<a href="{memory_url}?version=1&amp;q=Task%201%3A%20Deploy%20billing%2C%20success">'
    assert page.count(link + BILLING + "</a>") == 2
    # The output that answered the call is not marked: the call is.
    assert page.count('class="memory-reads"') == 2


# --- forgetting, proposed -------------------------------------------------------------


def aged(layout: Layout, read_days_ago: dict[str, int], version_days_ago: int) -> None:
    """Move the layout's history back: its MEMORY.md versions made ``version_days_ago``
    days ago, each read of an entry titled T ``read_days_ago[T]`` days ago."""
    now = timezone.now()
    MemoryVersion.objects.filter(layout=layout).update(
        created_at=now - timedelta(days=version_days_ago)
    )
    by_title = {e.title: e.key for e in review.entries(MEMORY_MD)}
    for title, days in read_days_ago.items():
        entry_reads = EntryRead.objects.filter(layout=layout, key=by_title[title])
        MemoryRead.objects.filter(pk__in=entry_reads.values("read_id")).update(
            read_at=now - timedelta(days=days)
        )
        entry_reads.update(read_at=now - timedelta(days=days))


def test_propose_forgetting_proposes_exactly_the_unread_unpinned_old_entries(used_layout):
    layout = used_layout
    aged(layout, {BILLING: 40, ROLLBACK: 5}, version_days_ago=100)
    young = MEMORY_MD.replace("# Task Group: databases", ADDED + "# Task Group: databases")
    curate(layout, "memory_md", young)  # Task 3 is new today: left alone

    assert [f.title for f in forgetting.forgettable(layout, 30)] == [BILLING, DATABASES, ORDERS]
    Pin.objects.create(
        layout=layout, document="memory_md", key=key_of(young, ORDERS), text="", title=ORDERS
    )
    assert [f.title for f in forgetting.forgettable(layout, 30)] == [BILLING]
    assert [f.title for f in forgetting.forgettable(layout, 3)] == [BILLING, ROLLBACK]


def test_forgetting_is_a_proposal_a_person_decides(used_layout):
    layout = used_layout
    aged(layout, {BILLING: 40, ROLLBACK: 5}, version_days_ago=100)
    admin = make_user("ada")
    Membership.objects.create(user=admin, workspace=layout.workspace, role=Role.ADMIN)
    client = Client()
    client.force_login(admin)
    before = curation.latest(layout, "memory_md")

    response = client.post(
        reverse("memoryui:propose_forgetting", args=["agents", layout.pk]), {"days": 30}
    )

    proposal = Proposal.objects.get(layout=layout)
    assert response.status_code == 302 and response["Location"].endswith(f"/{proposal.pk}/")
    assert proposal.status == Proposal.Status.PENDING
    kept = [e.title for e in review.entries(proposal.memory_md)]
    assert kept == [DEPLOYS, ROLLBACK]
    assert curation.latest(layout, "memory_md") == before  # nothing changed yet
    assert GenerationSettings.objects.get(layout=layout).forget_unread_days == 30
    review_page = client.get(response["Location"]).content.decode()
    # Each card says how often agents read the entry it removes.
    cards = {
        c.split('class="entry-title">')[1].split("<")[0]: c
        for c in review_page.split("<article")[1:]
        if 'class="entry-title">' in c
    }
    assert ">read 2 times</span>" in cards[BILLING]
    assert ">never read</span>" in cards[ORDERS]
    viewer = viewer_client(layout)
    url = reverse("memoryui:propose_forgetting", args=["agents", layout.pk])
    assert viewer.post(url, {"days": 30}).status_code == 403
    assert client.post(url, {"days": 0}).status_code == 400


def test_the_usage_page_lists_entries_by_reads_and_reads_per_day_by_kind(
    used_layout, django_assert_max_num_queries
):
    client = viewer_client(used_layout)
    url = reverse("memoryui:layout_usage", args=["agents", used_layout.pk])
    with django_assert_max_num_queries(20):
        page = client.get(url).content.decode()
    table = page.split('id="entry-usage"')[1]
    assert table.index(BILLING) < table.index(ROLLBACK) < table.index(ORDERS)
    per_day = page.split('id="reads-per-day"')[1].split("</table>")[0]
    assert "2026-11-04" in per_day and "2026-11-02" in per_day
    # The same figures drawn: a bar per day, each segment coloured by kind, and every
    # figure in the chart's text for a screen reader (and as a tooltip per day).
    chart = page.split('id="reads-chart"')[1].split("</svg>")[0]
    assert "Memory reads per day by kind of file" in chart
    assert chart.count("<g><title>") == per_day.count("<tr>") - 1 == 3  # the header row
    assert 'class="kind-memory_md"' in chart and "MEMORY.md (" in chart
    assert "3 days, 2 Nov to 4 Nov" in chart
    assert "Propose forgetting</button>" not in page  # a viewer cannot


def test_the_worker_computes_usage_ahead_so_the_first_view_after_an_import_waits_on_none(
    used_layout, eager, monkeypatch
):
    """After a backlog of imports the worker's lint also computes what the Usage page
    and the MEMORY.md page's filters keep per import: the first reviewer to open them
    after an import finds it done (at 100,000 rollouts it takes seconds)."""
    client = viewer_client(used_layout)
    usage_page = reverse("memoryui:layout_usage", args=["agents", used_layout.pk])
    never_read = reverse("memoryui:memory_md", args=["agents", used_layout.pk]) + "?usage=never"
    every_entry = usage._every_entry
    computed: list[int] = []

    def counted(*args):
        computed.append(1)
        return every_entry(*args)

    monkeypatch.setattr(usage, "_every_entry", counted)

    def first_view(url: str) -> tuple[int, set[str]]:
        computed.clear()
        with CaptureQueriesContext(connection) as queries:
            page = client.get(url)
        assert page.status_code == 200
        return len(computed), {t for q in queries for t in READ_TABLES if t in q["sql"]}

    assert first_view(usage_page) == (1, set(READ_TABLES))
    import_workspace(Path(used_layout.workspace.source_path), "agents")  # a new stamp
    assert first_view(usage_page) == (1, set(READ_TABLES))  # computed again

    import_workspace(Path(used_layout.workspace.source_path), "agents")
    tasks.lint_workspace(used_layout.workspace.pk)
    assert first_view(usage_page) == (0, set())
    assert first_view(never_read)[0] == 0
    assert "Task Group: databases" in client.get(never_read).content.decode()


def test_a_sync_that_finds_the_directory_as_it_was_keeps_the_figures_pages_keep(used_layout):
    """A scheduled sync of an unchanged tree writes no row: the kept usage stays, and
    the Usage page after it reads no reads; a sync that brings a change computes it
    again."""
    workspace = used_layout.workspace
    root = Path(workspace.source_path)
    past = time.time() - 3600
    for path in root.rglob("*"):  # written well before the imports
        os.utime(path, (past, past), follow_symlinks=False)
    import_workspace(root, "agents")
    client = viewer_client(used_layout)
    url = reverse("memoryui:layout_usage", args=["agents", used_layout.pk])

    def tables_read() -> set[str]:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url).status_code == 200
        return {t for q in queries for t in READ_TABLES if t in q["sql"]}

    assert tables_read() == set(READ_TABLES)  # the first view computes
    before = Workspace.objects.get(pk=workspace.pk)
    again = import_workspace(root, "agents")
    assert again.unchanged == again.files and not again.added + again.changed
    after = Workspace.objects.get(pk=workspace.pk)
    assert after.last_imported_at > before.last_imported_at  # the sync is recorded
    assert tables_read() == set()

    write_rollout(
        root,
        "r-new",
        rollout_line(
            "r-new",
            "2026-11-05T10:00:00+00:00",
            "completed",
            ("sed -n 12,18p memories/MEMORY.md", ""),
        ),
    )
    import_workspace(root, "agents")
    assert tables_read() == set(READ_TABLES)
    page = client.get(url).content.decode()
    assert "2026-11-05" in page.split('id="reads-per-day"')[1]


def test_nothing_is_computed_ahead_that_the_web_would_not_see(used_layout, settings):
    """A worker of its own with Django's per-process memory cache (the embedded
    default): what it kept would stay in its own memory, so it computes nothing."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    workspace = used_layout.workspace
    with CaptureQueriesContext(connection) as queries:
        forgetting.keep_ahead(workspace)
    assert len(queries) == 0


READ_TABLES = ("memoryui_entryread", "memoryui_memoryread")


# --- the API ---------------------------------------------------------------------------


def test_the_api_pages_usage_per_entry_and_the_layouts_reads(
    used_layout, django_assert_max_num_queries
):
    user = make_user("reader")
    Membership.objects.create(user=user, workspace=used_layout.workspace, role=Role.VIEWER)
    auth = {"HTTP_AUTHORIZATION": "Bearer " + tokens.create_token(user, "t", ["agents"]).secret}
    base = f"/api/workspaces/agents/layouts/{used_layout.pk}/usage"
    client = Client()

    first = client.get(f"{base}/entries", {"limit": 2}, **auth).json()
    assert first["count"] == 5
    assert [(e["title"], e["reads"], e["runs"]) for e in first["items"]] == [
        (BILLING, 2, 2),
        (ROLLBACK, 1, 1),
    ]
    assert first["items"][1]["failing_runs"] == 1 and first["items"][1]["states"] == {"failed": 1}
    rest = client.get(f"{base}/entries", {"limit": 2, "offset": 2}, **auth).json()["items"]
    assert {e["reads"] for e in rest} == {0}

    with django_assert_max_num_queries(12):
        reads = client.get(f"{base}/reads", **auth).json()
    assert reads["count"] == 3
    assert [(r["rollout_id"], r["how"], r["terminal_state"]) for r in reads["items"]] == [
        ("r-bad", "range", "failed"),
        ("r-ok", "range", "completed"),
        ("r-ok", "search", "completed"),
    ]
    assert titles(reads["items"][0]["entries"]) == [ROLLBACK]
    assert client.get(f"{base}/reads", {"kind": "skill"}, **auth).json()["count"] == 0
    assert client.get(f"{base}/reads", {"kind": "nonsense"}, **auth).status_code == 422


# --- phase two's selection by usage ---------------------------------------------------


def raw(rollout_id: str, updated_at: str) -> str:
    return (
        f"rollout_id: {rollout_id}\nupdated_at: {updated_at}\n"
        f"rollout_path: sessions/{rollout_id}.jsonl\n"
        f"rollout_summary_file: rollout_summaries/{rollout_id}_x.md\n"
        "terminal_state: completed\n\n- a note\n"
    )


def test_selection_by_usage_ranks_by_reads_then_last_use_and_leaves_out_the_unused():
    texts = [
        raw("a", "2026-11-01T00:00:00+00:00"),
        raw("b", "2026-11-25T00:00:00+00:00"),
        raw("c", "2026-10-01T00:00:00+00:00"),
        raw("d", "2026-10-02T00:00:00+00:00"),
        raw("e", "2026-11-30T00:00:00+00:00"),
    ]
    ranking = phase_two.UsageRanking(
        reads={"a": 5, "d": 2, "e": 2},
        last_read={
            "a": "2026-11-20T00:00:00+00:00",
            "d": "2026-11-10T00:00:00+00:00",
            "e": "2026-11-05T00:00:00+00:00",
        },
        cutoff="2026-10-15T00:00:00+00:00",
    )
    # By hand: a (5 reads), then e and d (2 each; e last used 30 Nov, its own date, d
    # 10 Nov), then b (never read, new on 25 Nov); c is unused since 1 Oct: left out.
    plan = phase_two.plan_phase_two(texts, None, 3, by_usage=ranking)
    assert [i.rollout_id for i in plan.selected] == ["a", "e", "d"]
    everything = phase_two.plan_phase_two(texts, None, 10, by_usage=ranking)
    assert [i.rollout_id for i in everything.selected] == ["a", "e", "d", "b"]
    kept = phase_two.plan_phase_two(texts, None, 3, protected=["c"], by_usage=ranking)
    assert [i.rollout_id for i in kept.selected] == ["a", "e", "c"]
    # Without the option: the SDK's selection, the newest first.
    assert [i.rollout_id for i in phase_two.plan_phase_two(texts, None, 3).selected] == [
        "e",
        "b",
        "a",
    ]


@pytest.mark.parametrize(("batch", "kept_bytes"), [(1, 0), (2, 4 << 20)])
def test_reads_written_a_batch_at_a_time_are_the_reads_written_at_once(
    used_layout, batch, kept_bytes, monkeypatch
):
    """Each read keeps its own entries however the reads are split into batches, and
    whether the MEMORY.md they read is small enough to keep in the process or is read
    for the import alone (as a 27 MB one is)."""

    def rows(layout: Layout) -> list[tuple]:
        return [
            (
                r.rollout.rollout_id,
                r.segment,
                r.item,
                r.how,
                r.entry_count,
                r.version.number,
                sorted(e.key for e in r.entries.all()),
                r.read_at,
                r.terminal_state,
            )
            for r in reads_of(layout)
        ]

    monkeypatch.setattr(usage, "_READS_PER_BATCH", batch)
    monkeypatch.setattr(usage, "KEPT_TEXT_BYTES", kept_bytes)
    documents.text.cache_clear()
    import_workspace(Path(used_layout.workspace.source_path), "again")
    again = Layout.objects.get(workspace__name="again", memories_dir="memories")
    assert rows(again) == rows(used_layout) and len(rows(again)) == 3
    assert documents.text.cache_info().currsize == (1 if kept_bytes else 0)


def test_reads_go_with_the_rollout_layout_or_workspace_an_admin_deletes(used_layout):
    """A read's entries are found through their read, not by rollout or version of
    their own: deleting a rollout, then the whole workspace, leaves no read behind and
    no reference the database refuses."""
    bad = used_layout.rollouts.get(rollout_id="r-bad")
    assert EntryRead.objects.filter(rollout=bad).exists()
    bad.delete()
    connection.check_constraints()
    assert not MemoryRead.objects.filter(rollout_id=bad.pk).exists()
    assert not EntryRead.objects.filter(rollout_id=bad.pk).exists()
    assert EntryRead.objects.filter(layout=used_layout).count() == 2  # r-ok's reads stay
    used_layout.workspace.delete()
    connection.check_constraints()
    assert not MemoryRead.objects.exists()
    assert not EntryRead.objects.exists()


def test_a_rollouts_usage_is_the_reads_of_the_entries_that_cite_it(used_layout):
    ranking = usage_ranking(used_layout, 30)
    assert ranking.reads == {"r1": 2, "r2": 1}
    assert ranking.last_read == {
        "r1": "2026-11-03T10:00:00+00:00",
        "r2": "2026-11-04T10:00:00+00:00",
    }


def test_a_read_lands_on_the_version_the_agent_had_at_the_runs_time(used_layout, tmp_path):
    curate(used_layout, "memory_md", LATER)  # version 2, made now
    line = LATER.splitlines().index("- keys, rotation") + 1
    write_rollout(
        tmp_path / "ws",
        "r-later",
        rollout_line(
            "r-later",
            "2030-01-01T00:00:00+00:00",
            "completed",
            ("rg -n rotation memories/MEMORY.md", f"{line}:- keys, rotation"),
        ),
    )
    import_workspace(tmp_path / "ws", "agents")
    read = MemoryRead.objects.get(rollout__rollout_id="r-later")
    assert read.version.number == 2
    assert [e.key for e in read.entries.all()] == [
        key_of(LATER, "Task 3: Rotate the keys, success")
    ]
    # The earlier rollouts' reads stay on version 1, read before version 2 was made.
    assert set(
        MemoryRead.objects.exclude(pk=read.pk).values_list("version__number", flat=True)
    ) == {1}


def test_an_approved_forgetting_proposal_removes_the_entries_and_keeps_the_rest(used_layout):
    layout = used_layout
    aged(layout, {BILLING: 40, ROLLBACK: 5}, version_days_ago=100)
    proposal = forgetting.propose_forgetting(layout, 30, None)
    assert proposal is not None

    curation.approve(proposal, user=make_user("ada"))

    current = curation.text_of(curation.latest(layout, "memory_md"))
    # The task left is numbered again from 1, as every approval numbers a group's tasks.
    assert [e.title for e in review.entries(current)] == [
        DEPLOYS,
        "Task 1: Roll back search, failed",
    ]
    summary = curation.text_of(curation.latest(layout, "memory_summary"))
    assert summary == SUMMARY


# --- an import of many rollouts: the found reads held on disk until recorded ------------


def test_found_reads_spilled_to_disk_come_back_in_order_as_often_as_needed():
    end = (timezone.now(), "completed")
    read = memory_reads.Read(memory_reads.MEMORY_MD, "MEMORY.md", "range", lines=((4, 6),))
    found = [
        usage.FoundReads(n, n % 2, (memory_reads.ItemReads(1, 2, f"sed -n {n}p", (read,)),), (end,))
        for n in range(7)
    ]
    spool = ReadSpool(held=2, batch=2)
    for one in found:
        spool.add(one)

    assert spool.spilled and len(spool) == 7
    assert list(spool.file_ids) == list(range(7)) and spool.layout_ids == {0, 1}
    assert list(spool) == found
    # Gone through again, and inside another going-through (the reads are mapped, then
    # written), each batch is found by its own place in the file.
    assert [(a.file_id, b.file_id) for a in spool for b in spool][:9] == [
        (0, n) for n in range(7)
    ] + [(1, 0), (1, 1)]
    spool.close()
    assert list(spool) == [] and len(spool) == 0


@pytest.mark.django_db
def test_an_import_whose_reads_went_to_disk_records_exactly_what_one_held_in_memory(
    tmp_path, monkeypatch
):
    """Past ``spool.HELD`` rollouts, the reads an import finds wait in a temporary file
    for its versions: the rows recorded are those of an import that held them all."""

    def rows(workspace: str) -> list[tuple]:
        reads = MemoryRead.objects.filter(layout__workspace__name=workspace)
        return sorted(
            (
                r.rollout.rollout_id,
                r.segment,
                r.item,
                r.path,
                r.how,
                r.command,
                r.read_at,
                r.terminal_state,
                r.entry_count,
                tuple(sorted(r.entries.values_list("key", flat=True))),
            )
            for r in reads.select_related("rollout")
        )

    root = tmp_path / "ws"
    workspace_with_memory(root)
    for n in range(12):
        write_rollout(
            root,
            f"r-{n:02d}",
            rollout_line(
                f"r-{n:02d}",
                f"2026-11-{n + 2:02d}T10:00:00+00:00",
                "failed" if n % 3 == 0 else "completed",
                ("rg -n runbook memories/MEMORY.md", "10:- billing, runbook"),
                (f"sed -n {n + 1},{n + 6}p memories/MEMORY.md", ""),
            ),
        )
    import_workspace(root, "held")
    spilled: list[bool] = []
    close = spool.ReadSpool.close

    def close_noting(self):
        spilled.append(self.spilled)
        close(self)

    monkeypatch.setattr(spool, "HELD", 3)
    monkeypatch.setattr(spool, "BATCH", 2)
    monkeypatch.setattr(spool.ReadSpool, "close", close_noting)
    import_workspace(root, "spilled")

    assert spilled == [True]
    held = rows("held")
    assert len(held) == 24 and all(row[-1] for row in held if row[4] == "search")
    assert rows("spilled") == held


@pytest.mark.sqlite
def test_a_reads_time_is_stored_as_django_would_store_it_and_read_back_unchanged(db):
    """The import writes each read's time with its own adapter on SQLite (Django's
    checks left out): the text is Django's, and the time read back is the run's end."""
    adapt = usage._datetime_adapter()
    times = [
        datetime.fromisoformat("2026-11-30T10:00:00.123456+00:00"),
        datetime.fromisoformat("2026-11-30T10:00:00+00:00"),  # no microseconds: no fraction
        datetime.fromisoformat("2026-12-01T02:15:07.000005+05:30"),  # the day before, in UTC
        None,
    ]
    for when in times:
        assert adapt(when) == connection.ops.adapt_datetimefield_value(when)
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s", [adapt(times[2])])
        stored = cursor.fetchone()[0]
    assert stored == "2026-11-30 20:45:07.000005"
    assert datetime.fromisoformat(stored).replace(tzinfo=UTC) == times[2]
