"""Phase two as a tool-calling loop over a staging copy, against the test server over
real HTTP: scripted tool calls (both APIs), refusals the model reads, limits, cancel,
the change set, and the demo model's incremental edits."""

import json
import os

import pytest
from agents.apply_diff import apply_diff
from agents.sandbox.config import MemoryGenerateConfig

from generation import memory_md, patches, prompts
from generation.llm import ModelConfig, make_client
from generation.phase_two_agent import (
    DEFAULT_MAX_TURNS,
    TOOLS,
    Limits,
    Staging,
    chat_tools,
    execute,
    responses_tools,
    run_agent,
)
from tests.scripted_model import FakeOpenAI, Reply

ENTRY_A = (
    "# Task Group: deploys\n\nscope: deploying the web app\n\n"
    "## Task 1: roll out v2, outcome success\n\n### rollout_summary_files\n\n"
    "- rollout_summaries/r1_deploy.md (rollout_id=r1, updated_at=2026-11-01, "
    "terminal_state=completed)\n\n### keywords\n\n- deploy, v2\n"
)
ENTRY_B = (
    "# Task Group: logs\n\nscope: reading worker logs\n\n"
    "## Task 1: find the OOM, outcome partial\n\n### rollout_summary_files\n\n"
    "- rollout_summaries/r2_logs.md (rollout_id=r2, updated_at=2026-11-02, "
    "terminal_state=failed)\n\n### keywords\n\n- logs, oom\n"
)
MEMORY = ENTRY_A + "\n" + ENTRY_B
SUMMARY = "## User Profile\n\nShips web apps.\n\n## What's in Memory\n\n- deploys\n- logs\n"


def memory_folder(**extra: bytes) -> dict[str, bytes]:
    return {
        "MEMORY.md": MEMORY.encode(),
        "memory_summary.md": SUMMARY.encode(),
        "raw_memories.md": b"rollout_id: r3\nupdated_at: 2026-11-03\n\nnew things\n",
        "rollout_summaries/r1_deploy.md": b"session_id: s\n\n# deploy\n",
        "phase_two_selection.json": b'{"version": 1, "items": []}',
        **extra,
    }


def loop(server, staging, *, api="responses", **kwargs):
    config = ModelConfig(model="demo", base_url=server.base_url, api=api)
    return run_agent(
        client=make_client(config),
        config=config,
        instructions="Curate the memory.",
        prompt=kwargs.pop("prompt", "Consolidate."),
        staging=staging,
        sleep=lambda seconds: None,
        **kwargs,
    )


def tool_outputs(request: dict) -> list[str]:
    """What the model read back from its tool calls, in either API's shape."""
    if "messages" in request:
        return [m["content"] for m in request["messages"] if m.get("role") == "tool"]
    return [i["output"] for i in request["input"] if i.get("type") == "function_call_output"]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_an_incremental_edit_of_one_entry_leaves_every_other_byte_of_memory_md(api):
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder()) as staging:
        server.script(
            Reply.tools(("read_file", {"path": "MEMORY.md", "start_line": 1, "end_line": 9})),
            Reply.tools(
                (
                    "replace_in_file",
                    {"path": "MEMORY.md", "old": "- logs, oom\n", "new": "- logs, oom, kill\n"},
                )
            ),
            Reply(raw_text="Added a keyword."),
        )
        result = loop(server, staging, api=api)

    assert result.status == "changed", result.reason
    assert result.turns == 3 and result.final_message == "Added a keyword."
    assert list(result.changes) == ["MEMORY.md"]
    old, new = result.changes["MEMORY.md"]
    assert old == MEMORY.encode()
    assert new == MEMORY.replace("- logs, oom\n", "- logs, oom, kill\n").encode()
    # Every other byte is the same: the documents differ in that one entry only.
    before, after = memory_md.parse(old.decode()), memory_md.parse(new.decode())
    assert [b.text for b in before.children][0] == [b.text for b in after.children][0]
    assert before.children[1].dump() != after.children[1].dump()
    assert "1: # Task Group: deploys" in tool_outputs(server.requests[1])[0]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_calls_outside_the_writable_set_are_refused_and_the_model_reads_why(api, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("keep me\n")
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder()) as staging:
        os.symlink(outside, staging.root / "skills_link.md")
        (staging.root / "skills").mkdir()
        os.symlink(tmp_path, staging.root / "skills" / "escape")
        server.script(
            Reply.tools(
                (
                    "read_file",
                    {"path": "../sessions/r1.jsonl", "start_line": None, "end_line": None},
                ),
                ("read_file", {"path": "/etc/passwd", "start_line": None, "end_line": None}),
                ("write_file", {"path": "raw_memories.md.new", "content": "x"}),
                ("replace_in_file", {"path": "raw_memories.md", "old": "new", "new": "old"}),
                ("write_file", {"path": "skills/escape/outside2.md", "content": "x"}),
                (
                    "read_file",
                    {"path": "skills/escape/outside.md", "start_line": None, "end_line": None},
                ),
                ("read_file", {"path": "sessions/r1.jsonl", "start_line": None, "end_line": None}),
                ("write_file", {"path": "engineering/MEMORY.md", "content": "x"}),
                (
                    "apply_patch",
                    {"patch": "*** Begin Patch\n*** Add File: ../evil.md\n+x\n*** End Patch"},
                ),
                ("delete_file", {"path": "rollout_summaries/r1_deploy.md"}),
            ),
            Reply(raw_text="I could not change anything."),
        )
        result = loop(server, staging, api=api)
        raw_after = (staging.root / "raw_memories.md").read_bytes()
        summary_kept = (staging.root / "rollout_summaries/r1_deploy.md").exists()

    outputs = tool_outputs(server.requests[1])
    assert len(outputs) == 10 and all(o.startswith("error: ") for o in outputs), outputs
    assert "'..' is refused" in outputs[0]
    assert "absolute paths are refused" in outputs[1]
    assert "read-only or outside the memory folder" in outputs[2]
    assert "read-only or outside the memory folder" in outputs[3]
    assert "links are refused" in outputs[4] and "links are refused" in outputs[5]
    assert "outside what phase two may read" in outputs[6]
    assert "read-only or outside the memory folder" in outputs[7]
    assert "'..' is refused" in outputs[8]
    assert "read-only or outside the memory folder" in outputs[9]
    assert result.status == "nothing" and result.changes == {}
    assert raw_after == memory_folder()["raw_memories.md"] and summary_kept
    assert outside.read_text() == "keep me\n" and not (tmp_path / "outside2.md").exists()
    assert not (tmp_path / "evil.md").exists()


def test_a_skill_written_by_the_loop_is_in_the_change_set_and_a_deleted_one_too():
    folder = memory_folder(**{"skills/old-way/SKILL.md": b"---\nname: old-way\n---\n"})
    skill = "---\nname: deploy\ndescription: How deploys go.\n---\n\n# Deploy\n"
    with FakeOpenAI(use_demo=False) as server, Staging(folder) as staging:
        server.script(
            Reply.tools(
                ("write_file", {"path": "skills/deploy/SKILL.md", "content": skill}),
                ("delete_file", {"path": "skills/old-way/SKILL.md"}),
            ),
            Reply(raw_text="done"),
        )
        result = loop(server, staging)

    assert result.changes == {
        "skills/deploy/SKILL.md": (None, skill.encode()),
        "skills/old-way/SKILL.md": (b"---\nname: old-way\n---\n", None),
    }
    assert result.files_touched == ["skills/deploy/SKILL.md", "skills/old-way/SKILL.md"]


def test_the_turn_limit_fails_the_loop_with_its_reason_and_no_change_set():
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder()) as staging:
        edit = ("replace_in_file", {"path": "MEMORY.md", "old": "v2\n", "new": "v3\n"})
        read = ("read_file", {"path": "MEMORY.md", "start_line": 1, "end_line": 2})
        server.script(Reply.tools(edit), *[Reply.tools(read) for _ in range(5)])
        result = loop(server, staging, limits=Limits(max_turns=3))

    assert result.status == "failed"
    assert "turn limit reached" in result.reason and "max_turns 3" in result.reason
    assert result.changes == {} and result.turns == 3
    assert len(server.requests) == 3  # no fourth call


def test_the_token_budget_fails_the_loop_with_its_reason_and_no_change_set():
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder()) as staging:
        edit = ("replace_in_file", {"path": "MEMORY.md", "old": "v2\n", "new": "v3\n"})
        read = ("read_file", {"path": "MEMORY.md", "start_line": 1, "end_line": 2})
        server.script(
            Reply.tools(edit, usage=(1000, 100)),
            *[Reply.tools(read, usage=(1000, 100)) for _ in range(5)],
        )
        result = loop(server, staging, limits=Limits(token_budget=3000))

    assert result.status == "failed"
    assert "token budget exceeded: 3300 tokens after 3 turns" in result.reason
    assert result.changes == {} and result.usage.input_tokens == 3000


def test_cancel_mid_loop_stops_before_the_next_turn():
    cancelled = []
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder()) as staging:
        edit = ("replace_in_file", {"path": "MEMORY.md", "old": "v2\n", "new": "v3\n"})
        server.script(Reply.tools(edit), Reply.tools(edit), Reply(raw_text="done"))
        result = loop(
            server,
            staging,
            should_cancel=lambda: bool(cancelled),
            on_turn=lambda turn: cancelled.append(turn.number),
        )

    assert result.status == "cancelled" and result.changes == {}
    assert cancelled == [1] and len(server.requests) == 1
    assert result.files_touched == ["MEMORY.md"]


def test_a_loop_that_changes_nothing_ends_with_nothing_worth_saving():
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder()) as staging:
        server.script(
            Reply.tools(("replace_in_file", {"path": "MEMORY.md", "old": "v2\n", "new": "v3\n"})),
            Reply.tools(("replace_in_file", {"path": "MEMORY.md", "old": "v3\n", "new": "v2\n"})),
            Reply(raw_text="On reflection nothing new."),
        )
        result = loop(server, staging)

    assert result.status == "nothing" and result.changes == {}
    assert result.reason == "nothing worth saving"


def test_a_permanent_model_error_fails_the_loop_and_transient_ones_are_retried():
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder()) as staging:
        server.script(
            Reply.error(503),
            Reply.tools(("replace_in_file", {"path": "MEMORY.md", "old": "v2\n", "new": "v3\n"})),
            Reply.error(400, "context too long"),
        )
        result = loop(server, staging)

    assert result.status == "failed" and result.changes == {}
    assert "turn 2 failed" in result.reason and "context too long" in result.reason
    assert len(server.requests) == 3


def test_every_tool_the_model_is_told_of_runs_and_every_tool_that_runs_is_told():
    """The specs and the dispatch come from one table: each advertised tool, called with
    arguments its own schema asks for, runs (no "no tool named", no crash on a key its
    schema left out), in both APIs' shapes; nothing runs that the model is not told."""
    told_responses = {spec["name"]: spec["parameters"] for spec in responses_tools()}
    told_chat = {spec["function"]["name"]: spec["function"]["parameters"] for spec in chat_tools()}
    assert told_responses == told_chat
    sample = {"path": "MEMORY.md", "query": "deploy", "old": "deploys", "new": "deploys"}
    with Staging(memory_folder()) as staging:
        for name, schema in told_responses.items():
            assert set(schema["required"]) == set(schema["properties"])  # strict mode
            args = {
                key: None if prop["type"] == ["integer", "null"] else sample.get(key, "")
                for key, prop in schema["properties"].items()
            }
            output = execute(staging, name, json.dumps(args))
            assert not output.startswith("error: no tool named"), (name, output)
        refused = execute(staging, "rm_rf", "{}")
    assert refused.startswith("error: no tool named 'rm_rf'")
    assert set(TOOLS) == set(told_responses)
    assert refused.endswith(", ".join(sorted(told_responses)))


def test_reads_are_bounded_and_say_where_to_read_on():
    big = "".join(f"- line {i} {'x' * 60}\n" for i in range(2000)).encode()
    with FakeOpenAI(use_demo=False) as server, Staging(memory_folder(**{"MEMORY.md": big})) as s:
        server.script(
            Reply.tools(("read_file", {"path": "MEMORY.md", "start_line": None, "end_line": None})),
            Reply(raw_text="ok"),
        )
        loop(server, s)

    output = tool_outputs(server.requests[1])[0]
    assert len(output) < 20_200
    assert "of 2000 shown; output limit reached, read on from line" in output


def test_the_default_turn_limit_is_the_sdks():
    assert DEFAULT_MAX_TURNS == MemoryGenerateConfig().phase_two_max_turns


@pytest.mark.parametrize(
    "patch",
    [
        "*** Begin Patch\n*** Update File: f\n@@\n b\n-c\n+C\n d\n*** End Patch",
        "*** Begin Patch\n*** Update File: f\n@@ a\n-b\n+B1\n+B2\n*** End Patch",
        "*** Begin Patch\n*** Update File: f\n@@\n d\n+e\n*** End of File\n*** End Patch",
        "*** Begin Patch\n*** Update File: f\n@@\n-a\n+A\n@@\n c\n-d\n*** End Patch",
    ],
)
def test_v4a_patches_apply_as_the_sdks_apply_diff_does(patch):
    text = "a\nb\nc\nd\n"
    ops = patches.parse_patch(patch)
    sdk_diff = "\n".join(patch.split("\n")[2:-1]) + "\n"

    assert patches.apply_hunks(text, ops[0].hunks) == apply_diff(text, sdk_diff)


def test_a_unified_diff_applies_by_line_number_and_context():
    text = "x\ny\nz\nx\ny\nz\n"
    diff = "--- a/MEMORY.md\n+++ b/MEMORY.md\n@@ -4,2 +4,2 @@\n x\n-y\n+Y\n"
    (op,) = patches.parse_patch(diff)

    assert op.path == "MEMORY.md"
    assert patches.apply_hunks(text, op.hunks) == "x\ny\nz\nx\nY\nz\n"


# --- the demo model drives the same loop ----------------------------------------------


def raw_memory(rid, group, desc):
    return (
        f"rollout_id: {rid}\nupdated_at: 2026-11-2{rid[-1]}T10:00:00+00:00\n"
        f"rollout_path: sessions/{rid}.jsonl\nrollout_summary_file: rollout_summaries/{rid}_x.md\n"
        f"terminal_state: completed\n\n---\ndescription: {desc}\ntask: t-{rid}\n"
        f"task_group: {group}\ntask_outcome: success\nkeywords: {group}, {rid}\n---\n\n"
        f"### Task 1: {desc}\n\nPreference signals:\n- the user said: always {rid}\n"
    )


def demo_prompt(added, removed=()):
    lines = [f"selected: {len(added)}"]
    lines += [
        f"- [added] rollout_id={r}, rollout_summary_file=rollout_summaries/{r}_x.md, "
        "updated_at=unknown, terminal_state=completed"
        for r in added
    ]
    lines += [
        f"- [removed] rollout_id={r}, rollout_summary_file=rollout_summaries/{r}_y.md, "
        "updated_at=unknown, terminal_state=completed"
        for r in removed
    ]
    return prompts.phase_two_agent_prompt(selection_lines="\n".join(lines), pinned=[], rejected=[])


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_demo_model_adds_new_tasks_and_forgets_removed_ones_leaving_the_rest(api):
    raws = "\n".join(
        [
            raw_memory("r7", "logs", "found the leak"),
            raw_memory("r8", "billing", "fixed invoice rounding"),
        ]
    )
    folder = memory_folder(**{"raw_memories.md": raws.encode()})
    with FakeOpenAI() as server, Staging(folder) as staging:
        result = loop(server, staging, api=api, prompt=demo_prompt(["r7", "r8"], ["r1"]))

    assert result.status == "changed", result.reason
    new = result.changes["MEMORY.md"][1].decode()
    # deploys lost its removed citation, logs got a task 2, billing is a new group at the end
    assert "rollout_id=r1" not in new
    assert new.startswith(ENTRY_A.split("- rollout_summaries/r1")[0])
    assert "## Task 2: found the leak, outcome success" in new
    assert new.index("# Task Group: logs") < new.index("found the leak") < new.index("find the OOM")
    assert new.endswith("- the user said: always r8 [Task 1]\n")
    assert "# Task Group: billing" in new
    assert new.count("# Task Group:") == 3
    summary = result.changes["memory_summary.md"][1].decode()
    assert summary.startswith(SUMMARY.split("- deploys")[0]) and summary.endswith(
        "- deploys\n- logs\n"
    )
    assert "see rollout_summaries/r8_x.md" in summary
    assert 4 <= result.turns <= 7


def test_the_demo_model_writes_a_skill_when_a_procedure_repeats():
    raws = "\n".join(raw_memory(f"r{i}", "deploys", f"deploy number {i}") for i in range(3, 6))
    folder = memory_folder(**{"raw_memories.md": raws.encode()})
    with FakeOpenAI() as server, Staging(folder) as staging:
        result = loop(server, staging, prompt=demo_prompt(["r3", "r4", "r5"]))

    assert "skills/deploys/SKILL.md" in result.changes
    skill = result.changes["skills/deploys/SKILL.md"][1].decode()
    assert skill.startswith("---\nname: deploys\ndescription: ")
    assert "deploy number 4" in skill


def test_the_demo_model_with_nothing_new_saves_nothing():
    with FakeOpenAI() as server, Staging(memory_folder()) as staging:
        result = loop(server, staging, prompt=demo_prompt([]))

    assert result.status == "nothing" and result.turns == 1


def test_a_memory_md_over_2_mb_is_consolidated_without_any_answer_holding_the_whole_file():
    groups = [ENTRY_B.replace("logs", f"area {i:05d}").replace("r2", f"q{i}") for i in range(8000)]
    big = "\n".join(groups)
    assert len(big.encode()) > 2 * 1024 * 1024
    raws = "\n".join(raw_memory(f"r{i}", f"area {i:05d}", f"task {i}") for i in (7, 8, 9))
    folder = memory_folder(**{"MEMORY.md": big.encode(), "raw_memories.md": raws.encode()})
    with FakeOpenAI() as server, Staging(folder) as staging:
        result = loop(server, staging, prompt=demo_prompt(["r7", "r8", "r9"]))

    assert result.status == "changed", result.reason
    old, new = result.changes["MEMORY.md"]
    assert len(new) > len(old) > 2 * 1024 * 1024
    assert new.decode().count("## Task 2: task") == 3
    for answer in server.responses:
        assert len(json.dumps(answer)) < 100_000
    for request in server.requests:
        assert len(json.dumps(request)) < 200_000  # reads are bounded: no request holds it
