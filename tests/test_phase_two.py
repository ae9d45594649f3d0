"""Phase two: the SDK's selection, the prompt, pinned and rejected entries, the demo."""

import json
from pathlib import Path

import pytest

from generation import memory_md, tree
from generation.llm import ModelConfig, PermanentModelError, Usage, make_call
from generation.phase_two import (
    PHASE_TWO_SCHEMA,
    PhaseTwoInput,
    find_reintroduced,
    plan_phase_two,
    restore_pins,
    run_phase_two,
)
from tests.scripted_model import FakeOpenAI, Reply

FIXTURES = ["small-a", "small-b", "medium-300"]

GROUP_A = (
    "# Task Group: deploys\n\nscope: deploy notes\n\n## Task 1: canary, outcome success\n\n"
    "### keywords\n\n- deployctl, canary\n\n"
)
GROUP_B = "# Task Group: billing\n\nscope: billing api\n\n## User preferences\n\n- be brief\n"


def layouts(fixtures_dir: Path, name: str):
    manifest = json.loads((fixtures_dir / name / "manifest.json").read_text())
    workspace = fixtures_dir / name / "workspace"
    return [workspace / c["memories_dir"] for c in manifest["counts"].values()]


def raw_texts(memories: Path) -> list[str]:
    return [p.read_text() for p in sorted((memories / "raw_memories").glob("*.md"))]


def small_plan(fixtures_dir: Path) -> PhaseTwoInput:
    memories = layouts(fixtures_dir, "small-a")[0]
    return plan_phase_two(raw_texts(memories), None, 256)


def answer(memory, summary="## User Profile\n\nx\n"):
    def call(instructions, prompt, schema_name, schema):
        call.seen = (instructions, prompt, schema_name, schema)
        return {"memory_md": memory, "memory_summary": summary}, Usage(9, 3)

    return call


def consolidate(plan, call, *, pinned=(), rejected=(), current=""):
    return run_phase_two(
        plan=plan,
        current_memory_md=current,
        current_summary="",
        pinned=list(pinned),
        rejected=list(rejected),
        extra_prompt="",
        call=call,
    )


@pytest.mark.parametrize("name", FIXTURES)
def test_plan_reproduces_every_fixture_selection_and_raw_memories_md(fixtures_dir, name):
    for memories in layouts(fixtures_dir, name):
        recorded_bytes = (memories / "phase_two_selection.json").read_bytes()
        recorded = tree.parse_selection(recorded_bytes)

        plan = plan_phase_two(raw_texts(memories), recorded, 256)

        assert tree.dump_selection(plan.selected, recorded.updated_at).encode() == recorded_bytes
        assert plan.raw_memories_md.encode() == (memories / "raw_memories.md").read_bytes()
        assert plan.diff.retained == [i.rollout_id for i in recorded.items]
        assert plan.diff.added == plan.diff.removed == [] and plan.removed_items == []


def test_plan_diff_against_a_changed_previous_selection(fixtures_dir):
    memories = layouts(fixtures_dir, "small-a")[0]
    recorded = tree.parse_selection((memories / "phase_two_selection.json").read_bytes())
    dropped, *kept = recorded.items
    gone = tree.SelectionItem(
        "gone-1",
        "2026-01-01",
        "sessions/gone-1.jsonl",
        "rollout_summaries/gone-1_old.md",
        "completed",
    )
    previous = tree.Selection([*kept, gone], recorded.updated_at, None)

    plan = plan_phase_two(raw_texts(memories), previous, 256)

    assert plan.diff.added == [dropped.rollout_id]
    assert plan.diff.retained == [i.rollout_id for i in kept]
    assert plan.diff.removed == ["gone-1"]
    assert plan.removed_items == [gone]


def test_plan_with_a_small_limit_keeps_the_newest_and_rebuilds_from_them(fixtures_dir):
    memories = layouts(fixtures_dir, "medium-300")[0]
    texts = raw_texts(memories)
    recorded = tree.parse_selection((memories / "phase_two_selection.json").read_bytes())

    plan = plan_phase_two(texts, recorded, 5)

    assert [i.rollout_id for i in plan.selected] == [i.rollout_id for i in recorded.items[:5]]
    assert plan.diff.removed == [i.rollout_id for i in recorded.items[5:]]
    assert plan.raw_memories_md.count("\nrollout_summary_file: ") == 5
    assert plan.raw_memories_md.startswith(f"rollout_id: {recorded.items[0].rollout_id}\n")


def test_the_prompt_shows_selection_pins_and_rejections_and_asks_for_both_files(fixtures_dir):
    call = answer(GROUP_A + GROUP_B)

    consolidate(small_plan(fixtures_dir), call, pinned=[GROUP_B], rejected=["- old advice\n"])

    instructions, prompt, schema_name, schema = call.seen
    assert schema == PHASE_TWO_SCHEMA and schema["additionalProperties"] is False
    assert "Pinned entries" in instructions
    assert '<pinned_entry n="1">\n' + GROUP_B + "\n</pinned_entry>" in prompt
    assert '<rejected_entry n="1">\n- old advice\n\n</rejected_entry>' in prompt
    assert "- [added] rollout_id=gtm-pipeline-65f53e" in prompt
    assert "rollout_id: prefs-6e64dc\n" in prompt


def test_a_pin_the_model_dropped_is_restored_at_the_end_and_listed(fixtures_dir):
    result = consolidate(small_plan(fixtures_dir), answer(GROUP_A), pinned=[GROUP_B])

    assert result.memory_md == GROUP_A.rstrip("\n") + "\n\n" + GROUP_B
    assert result.restored_pins == [GROUP_B]
    assert result.usage == Usage(9, 3)


def test_a_pin_the_model_rewrote_is_put_back_in_place_of_the_same_heading(fixtures_dir):
    rewritten = GROUP_B.replace("be brief", "be very brief")
    tail = "# Task Group: zeta\n\nscope: z\n"

    result = consolidate(
        small_plan(fixtures_dir), answer(rewritten + GROUP_A + tail), pinned=[GROUP_B]
    )

    assert result.memory_md == GROUP_B + GROUP_A + tail
    assert result.restored_pins == [GROUP_B]


def test_a_pin_kept_verbatim_is_left_alone_even_at_the_end_without_a_newline(fixtures_dir):
    memory = GROUP_A + GROUP_B.rstrip("\n")

    result = consolidate(small_plan(fixtures_dir), answer(memory), pinned=[GROUP_B])

    assert result.memory_md == memory and result.restored_pins == []


def test_restore_pins_appends_a_pinned_bullet_and_skips_blank_pins():
    document, restored = restore_pins(GROUP_A, ["- always run the tests\n", "  "])

    assert document == GROUP_A.rstrip("\n") + "\n\n- always run the tests\n"
    assert restored == ["- always run the tests\n"]


def test_a_rejected_entry_the_model_brings_back_is_reported(fixtures_dir):
    rejected = ["- Use  `deployctl promote --force`\n", "# Task Group: never here\n"]
    memory = GROUP_A + "## Notes\n\n- use `deployctl   promote --force`\n"

    result = consolidate(small_plan(fixtures_dir), answer(memory), rejected=rejected)

    assert result.reintroduced == [rejected[0]]


def test_find_reintroduced_looks_in_the_summary_too_and_ignores_blank_entries():
    found = find_reintroduced(["# MEMORY\n", "## General Tips\n\n- Ping Bob\n"], ["- ping bob", ""])

    assert found == ["- ping bob"]


def test_an_empty_memory_md_is_a_permanent_error(fixtures_dir):
    with pytest.raises(PermanentModelError, match="empty MEMORY.md"):
        consolidate(small_plan(fixtures_dir), answer("  \n"))


def test_nothing_selected_is_a_permanent_error():
    plan = plan_phase_two(["no headers here\n"], None, 256)

    with pytest.raises(PermanentModelError, match="nothing to consolidate"):
        consolidate(plan, answer(GROUP_A))


def test_a_pin_dropped_by_a_real_model_reply_over_http_is_restored(fixtures_dir):
    with FakeOpenAI() as server:
        server.script(Reply(json={"memory_md": GROUP_A, "memory_summary": "## User Profile\n"}))
        call = make_call(ModelConfig(model="m", base_url=server.base_url, api="chat"))

        result = consolidate(small_plan(fixtures_dir), call, pinned=[GROUP_B])

    assert result.memory_md.endswith(GROUP_B)
    assert result.restored_pins == [GROUP_B]


@pytest.mark.parametrize("name", FIXTURES)
def test_the_demo_model_consolidates_every_layout_into_parseable_files(fixtures_dir, name):
    with FakeOpenAI() as server:
        call = make_call(ModelConfig(model="demo", base_url=server.base_url))
        for memories in layouts(fixtures_dir, name):
            plan = plan_phase_two(raw_texts(memories), None, 256)
            summary_files = {
                f"rollout_summaries/{p.name}" for p in (memories / "rollout_summaries").iterdir()
            }

            result = consolidate(plan, call, pinned=[GROUP_B])

            root = memory_md.parse(result.memory_md)
            assert root.dump() == result.memory_md
            groups = memory_md.task_groups(root)
            assert len(groups) == len(plan.selected) + 1
            assert set(root.citations) == {i.rollout_summary_file for i in plan.selected}
            assert set(root.citations) <= summary_files
            for group in groups[:-1]:
                assert group.scope and group.keywords and len(group.citations) == 1
            assert result.restored_pins == [] and GROUP_B in result.memory_md
            summary = memory_md.parse(result.memory_summary)
            kinds = [b.kind for b in summary.children]
            assert kinds == ["user_profile", "user_preferences", "general_tips", "whats_in_memory"]
            assert set(summary.citations) <= summary_files
