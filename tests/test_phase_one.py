"""Phase one: rendering, the SDK's rules on the answer, and files the SDK reads back."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agents.sandbox.memory.interface import RolloutExtractionArtifacts
from agents.sandbox.memory.manager import _format_raw_memory, _format_rollout_summary
from agents.sandbox.memory.phase_one import normalize_rollout_slug, validate_rollout_artifacts
from agents.sandbox.memory.storage import _extract_selection_item
from agents.sandbox.util.token_truncation import TruncationPolicy, truncate_text

from generation import tree
from generation.llm import ModelConfig, PermanentModelError, Usage, make_call
from generation.phase_one import (
    PHASE_ONE_SCHEMA,
    count_tokens,
    phase_one_files,
    render_rollout,
    run_phase_one,
)
from tests.scripted_model import FakeOpenAI

SESSION_ID = "0f4b7e9e-6d0c-4c3e-9d52-2f6f3f1f2a10"


def segment(*items, state="completed", updated_at="2026-11-29T10:00:00+00:00", final="done"):
    line = {"updated_at": updated_at, "rollout_id": "r-1", "input": [], "generated_items": []}
    for item in items:
        line["input" if item.get("role") == "user" else "generated_items"].append(item)
    line["terminal_metadata"] = {
        "terminal_state": state,
        "exception_type": None,
        "exception_message": None,
        "has_final_output": final is not None,
    }
    if final is not None:
        line["final_output"] = final
    return json.dumps(line, separators=(",", ":"))


def rollout(*segments):
    return tree.parse_rollout(("\n".join(segments) + "\n").encode())


def user(text):
    return {"role": "user", "content": text}


def answer(output):
    def call(instructions, prompt, schema_name, schema):
        call.seen = (instructions, prompt, schema_name, schema)
        return output, Usage(11, 7)

    return call


def test_render_drops_system_developer_reasoning_compaction_and_images_keeps_tool_items():
    parsed = rollout(
        segment(
            {"role": "system", "content": "SYSTEM-SECRET"},
            {"role": "developer", "content": "DEVELOPER-NOTE"},
            user("Please fix the build"),
            {"type": "reasoning", "id": "rs_1", "summary": [{"text": "REASONING-TRACE"}]},
            {"type": "compaction", "encrypted_content": "COMPACTED-BLOB"},
            {"type": "image_generation_call", "result": "IMAGE-BYTES"},
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": "c1",
                "arguments": '{"cmd": "make"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "exit 2\nmissing dep"},
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "call_id": "c2",
                "input": "*** Begin Patch",
            },
            {"type": "mcp_call", "name": "search", "arguments": "{}", "output": "MCP-RESULT"},
            {"type": "unknown_thing", "payload": "UNKNOWN-ITEM"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Fixed it."}]},
            {"role": "tool", "content": "TOOL-MESSAGE"},
        )
    )

    text = render_rollout(parsed).text

    for dropped in (
        "SYSTEM-SECRET",
        "DEVELOPER-NOTE",
        "REASONING-TRACE",
        "COMPACTED-BLOB",
        "IMAGE-BYTES",
        "UNKNOWN-ITEM",
    ):
        assert dropped not in text
    for kept in (
        "[user]\nPlease fix the build",
        "[function_call exec_command call_id=c1]",
        'arguments: {"cmd": "make"}',
        "output:\nexit 2\nmissing dep",
        "[custom_tool_call apply_patch call_id=c2]",
        "MCP-RESULT",
        "[assistant]\nFixed it.",
        "TOOL-MESSAGE",
        "[final_output]\ndone",
    ):
        assert kept in text


def test_render_of_a_multi_segment_rollout_lists_each_segments_terminal_state():
    parsed = rollout(
        segment(user("first"), state="interrupted", final=None),
        segment(user("second"), state="failed", final=None),
        segment(user("third"), state="completed", updated_at="2026-11-30T08:00:00+00:00"),
    )

    text = render_rollout(parsed).text

    assert text.startswith("Run segments: 3\n")
    assert "Terminal state of each segment: 1: interrupted, 2: failed, 3: completed" in text
    metadata = json.loads(text.split("Terminal metadata of the last segment: ")[1].split("\n")[0])
    assert metadata["terminal_state"] == "completed" and metadata["has_final_output"] is True
    assert (
        "=== Segment 2 of 3 (updated_at 2026-11-29T10:00:00+00:00, terminal_state failed)" in text
    )
    assert text.index("first") < text.index("second") < text.index("third")


def test_a_rollout_within_budget_is_rendered_whole():
    rendered = render_rollout(rollout(segment(user("hello there"))))

    assert not rendered.truncated
    assert rendered.original_tokens == rendered.kept_tokens == count_tokens(rendered.text)
    assert "tokens truncated" not in rendered.text


def long_rollout(lines=4000):
    text = "of the long tool output \u00e9\u6f22\U0001f600"  # 1- to 4-byte characters
    output = "\n".join(f"line {i:05d} {text}" for i in range(lines))
    return rollout(
        segment(
            user("HEAD-REQUEST: summarise the log"),
            {"type": "function_call_output", "call_id": "c", "output": output},
            {"role": "assistant", "content": "TAIL-ANSWER: all good"},
            state="max_turns_exceeded",
            final=None,
        )
    )


def test_truncation_keeps_head_and_tail_and_counts_4_bytes_a_token_as_the_sdk():
    rendered = render_rollout(long_rollout(), max_tokens=2000)

    assert rendered.truncated
    whole = render_rollout(long_rollout(), max_tokens=10**9).text
    assert rendered.original_tokens == -(-len(whole.encode()) // 4) > 20_000
    assert len(rendered.text.encode()) <= 2000 * 4
    assert count_tokens(rendered.text) == rendered.kept_tokens > 1990  # the budget is used
    assert "HEAD-REQUEST" in rendered.text and "TAIL-ANSWER" in rendered.text
    assert '"terminal_state": "max_turns_exceeded"' in rendered.text
    assert "line 00000" in rendered.text and "line 03999" in rendered.text
    assert "line 02000" not in rendered.text


@pytest.mark.parametrize("max_tokens", [150_000, 2000, 1001, 7])
def test_the_cut_is_exactly_the_sdks_truncation_of_the_same_transcript(max_tokens):

    parsed = long_rollout(lines=40_000)  # ~2.6 MB: past the SDK's 150,000 tokens
    whole = render_rollout(parsed, max_tokens=10**9).text
    assert len(whole.encode()) > 150_000 * 4

    rendered = render_rollout(parsed, max_tokens=max_tokens)

    # Byte for byte what the SDK's phase one does to rollout text past its budget
    # (agents/sandbox/memory/phase_one.py: truncate_text(..., TruncationPolicy.tokens)).
    # The deliberate difference is what is cut: the SDK cuts the raw JSONL, memoryui the
    # transcript it renders from it (only the items the SDK keeps, metadata first).
    assert rendered.text == truncate_text(whole, TruncationPolicy.tokens(max_tokens))
    assert rendered.truncated


def test_a_cut_rollout_comes_with_a_note_in_the_prompt_a_whole_one_without():
    long_call = answer({"rollout_slug": "", "rollout_summary": "", "raw_memory": ""})
    run_phase_one(long_rollout(), call=long_call, max_tokens=2000)
    short_call = answer({"rollout_slug": "", "rollout_summary": "", "raw_memory": ""})
    run_phase_one(rollout(segment(user("hi"))), call=short_call)

    long_prompt, short_prompt = long_call.seen[1], short_call.seen[1]
    assert "The transcript below is cut" in long_prompt
    assert long_prompt.index("The transcript below is cut") < long_prompt.index("<rollout>")
    assert "tokens truncated\u2026" in long_prompt
    assert "cut" not in short_prompt.split("<rollout>")[0]


def test_rendering_from_bytes_equals_rendering_the_parsed_rollout():
    parsed_text = "\n".join(
        [
            segment(user("first"), state="interrupted", final=None),
            "not json",
            segment(user("second \u00e9"), state="completed"),
        ]
    )
    data = parsed_text.encode()

    assert render_rollout(data).text == render_rollout(tree.parse_rollout(data)).text
    assert (
        render_rollout(data, max_tokens=40).text
        == render_rollout(tree.parse_rollout(data), max_tokens=40).text
    )


def test_all_empty_answer_means_nothing_to_remember_and_no_files():
    parsed = rollout(segment(user("what is 2 + 2?")))
    empty = {"rollout_slug": "", "rollout_summary": " ", "raw_memory": "\n"}

    result = run_phase_one(parsed, call=answer(empty))

    assert result.status == "nothing"
    assert result.usage == Usage(11, 7)
    assert validate_rollout_artifacts(RolloutExtractionArtifacts(**empty)) is False
    files = phase_one_files(
        rollout_id="r-1", result=result, parsed=parsed, rollout_path="s/r-1.jsonl", session_id="x"
    )
    assert files == {}


@pytest.mark.parametrize("empty_field", ["rollout_slug", "rollout_summary", "raw_memory"])
def test_a_partly_empty_answer_is_a_permanent_error_as_in_the_sdk(empty_field):
    output = {"rollout_slug": "notes", "rollout_summary": "# s", "raw_memory": "m"}
    output[empty_field] = "  "

    with pytest.raises(PermanentModelError, match=f"partly empty.*{empty_field}") as caught:
        run_phase_one(rollout(segment(user("hi"))), call=answer(output))

    assert caught.value.usage == Usage(11, 7)
    with pytest.raises(ValueError):
        validate_rollout_artifacts(RolloutExtractionArtifacts(**output))


@pytest.mark.parametrize("slug", ["deploy-notes.md", "  deploy-notes  ", "deploy-notes"])
def test_slug_is_normalised_like_the_sdk(slug):
    output = {"rollout_slug": slug, "rollout_summary": "# s", "raw_memory": "m"}

    result = run_phase_one(rollout(segment(user("hi"))), call=answer(output))

    assert result.status == "memory"
    assert result.slug == "deploy-notes" == normalize_rollout_slug(slug)


@pytest.mark.parametrize("slug", ["Deploy Notes", "-leading-dash", "a" * 81, "notes.md.md", "ü"])
def test_an_invalid_slug_is_a_permanent_error_naming_it(slug):
    output = {"rollout_slug": slug, "rollout_summary": "# s", "raw_memory": "m"}

    with pytest.raises(PermanentModelError, match="invalid rollout slug") as caught:
        run_phase_one(rollout(segment(user("hi"))), call=answer(output))

    assert repr(slug.strip()[:100]) in str(caught.value)
    with pytest.raises(ValueError):
        normalize_rollout_slug(slug)


def test_the_model_gets_our_instructions_the_rendered_rollout_and_the_schema():
    call = answer({"rollout_slug": "", "rollout_summary": "", "raw_memory": ""})

    run_phase_one(rollout(segment(user("Fix the flaky test"))), call=call, extra_prompt="Be terse.")

    instructions, prompt, schema_name, schema = call.seen
    assert "Be terse." in instructions
    assert "[user]\nFix the flaky test" in prompt and "<rollout>" in prompt
    assert schema == PHASE_ONE_SCHEMA
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["rollout_slug", "rollout_summary", "raw_memory"]


def test_a_rollout_without_segments_is_a_permanent_error():
    with pytest.raises(PermanentModelError, match="no readable run segment"):
        run_phase_one(tree.parse_rollout(b"not json\n"), call=answer({}))


def test_files_take_updated_at_and_terminal_state_from_the_last_segment():
    parsed = rollout(
        segment(user("a"), state="completed", updated_at="2026-01-01T00:00:00+00:00"),
        segment(user("b"), state="failed", updated_at="2026-01-02T00:00:00+00:00", final=None),
    )
    output = {"rollout_slug": "notes.md", "rollout_summary": "# Summary\n", "raw_memory": "body"}
    result = run_phase_one(parsed, call=answer(output))

    files = phase_one_files(
        rollout_id="r-1",
        result=result,
        parsed=parsed,
        rollout_path="sessions/r-1.jsonl",
        session_id=SESSION_ID,
    )

    assert files == {
        "raw_memories/r-1.md": (
            "rollout_id: r-1\nupdated_at: 2026-01-02T00:00:00+00:00\n"
            "rollout_path: sessions/r-1.jsonl\n"
            "rollout_summary_file: rollout_summaries/r-1_notes.md\n"
            "terminal_state: failed\n\nbody\n"
        ),
        "rollout_summaries/r-1_notes.md": (
            f"session_id: {SESSION_ID}\nupdated_at: 2026-01-02T00:00:00+00:00\n"
            "rollout_path: sessions/r-1.jsonl\nterminal_state: failed\n\n# Summary\n"
        ),
    }


def test_files_say_unknown_when_the_last_segment_has_no_timestamp_or_state():
    line = json.dumps({"rollout_id": "r-1", "input": [user("x")], "generated_items": []})
    parsed = tree.parse_rollout(line.encode())
    result = run_phase_one(
        parsed, call=answer({"rollout_slug": "n", "rollout_summary": "s", "raw_memory": "m"})
    )

    files = phase_one_files(
        rollout_id="r-1", result=result, parsed=parsed, rollout_path="s/r-1.jsonl", session_id="x"
    )

    raw = files["raw_memories/r-1.md"]
    assert "updated_at: unknown\n" in raw and "terminal_state: unknown\n" in raw


# --- every fixture rollout, through the real client and the demo model ---------------


def fixture_rollouts(fixtures_dir: Path, name: str):
    manifest = json.loads((fixtures_dir / name / "manifest.json").read_text())
    workspace = fixtures_dir / name / "workspace"
    for layout in manifest["counts"].values():
        for path in sorted((workspace / layout["sessions_dir"]).glob("*.jsonl")):
            yield manifest, workspace, layout, path


@pytest.mark.parametrize("name", ["small-a", "small-b"])
def test_demo_phase_one_on_every_fixture_rollout_writes_files_the_sdk_reads(fixtures_dir, name):
    with FakeOpenAI() as server:
        call = make_call(ModelConfig(model="demo", base_url=server.base_url))
        checked = 0
        for manifest, workspace, layout, path in fixture_rollouts(fixtures_dir, name):
            rollout_id = path.stem
            parsed = tree.parse_rollout(path.read_bytes())
            rollout_path = f"{layout['sessions_dir']}/{path.name}"
            session_id = manifest["sandbox_session_id"]

            result = run_phase_one(parsed, call=call)
            files = phase_one_files(
                rollout_id=rollout_id,
                result=result,
                parsed=parsed,
                rollout_path=rollout_path,
                session_id=session_id,
            )

            sdk_wrote_memory = rollout_id not in layout["rollouts_without_raw_memory"]
            assert (result.status == "memory") == sdk_wrote_memory, rollout_id
            if not sdk_wrote_memory:
                assert files == {}
                continue
            artifacts = RolloutExtractionArtifacts(
                rollout_slug=result.slug,
                rollout_summary=result.summary,
                raw_memory=result.raw_memory,
            )
            assert validate_rollout_artifacts(artifacts) is True
            assert normalize_rollout_slug(result.slug) == result.slug
            raw_path, summary_path = files
            raw, summary = files[raw_path], files[summary_path]
            assert raw_path == f"raw_memories/{rollout_id}.md"

            item = _extract_selection_item(raw.rstrip("\n"))
            assert item is not None
            assert item.rollout_id == rollout_id
            assert item.rollout_summary_file == summary_path
            assert summary_path == f"rollout_summaries/{rollout_id}_{result.slug}.md"

            # Byte for byte what the SDK's own writer makes of the same values.
            sdk_values = {
                "updated_at": item.updated_at,
                "rollout_path": rollout_path,
                "terminal_state": item.terminal_state,
            }
            assert raw == _format_raw_memory(
                rollout_id=rollout_id,
                rollout_summary_file=summary_path,
                raw_memory=result.raw_memory,
                **sdk_values,
            )
            assert summary == _format_rollout_summary(
                session_id=session_id, rollout_summary=result.summary, **sdk_values
            )
            # And the header lines the SDK wrote for this rollout, slug aside.
            memories = workspace / layout["memories_dir"]
            recorded = (memories / raw_path).read_text()
            for key in ("rollout_id", "updated_at", "rollout_path", "terminal_state"):
                assert tree.header_value(raw.encode(), key) == tree.header_value(
                    recorded.encode(), key
                ), (rollout_id, key)
            checked += 1
        assert checked == sum(
            c["raw_memories"]
            for c in json.loads((fixtures_dir / name / "manifest.json").read_text())[
                "counts"
            ].values()
        )


# --- a huge rollout ------------------------------------------------------------------

# The peak is this process's own (VmHWM of its memory map): getrusage's ru_maxrss would
# also count the test process it was started from, which exec does not reset.
_MEASURE = """
import re, sys
from generation import llm, phase_one
data = open(sys.argv[1], "rb").read()
call = llm.make_call(llm.ModelConfig(model="demo", base_url=sys.argv[2]))
result = phase_one.run_phase_one(data, call=call)
peak_kib = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print(result.status, result.rendered.original_tokens, result.rendered.kept_tokens,
      int(peak_kib) * 1024)
"""


def write_huge_rollout(path: Path, size: int) -> None:
    """One run segment of ``size`` bytes on one JSONL line (the worst case: a segment is
    the unit that is parsed), mostly long tool outputs, as a long agent run writes."""
    with path.open("w") as out:
        out.write('{"updated_at":"2026-11-29T10:00:00+00:00","rollout_id":"huge","input":')
        out.write(json.dumps([user("Please triage these logs and fix the failing job")]))
        out.write(',"generated_items":[')
        written = n = 0
        while written < size:
            lines = (f"{n:08d} worker log line with words \u00e9 and more text" for _ in range(200))
            item = json.dumps(
                {"type": "function_call_output", "call_id": f"c{n}", "output": "\n".join(lines)}
            )
            out.write(("," if n else "") + item)
            written, n = written + len(item) + 1, n + 1
        out.write('],"terminal_metadata":{"terminal_state":"completed"},"final_output":"done"}\n')


def test_phase_one_of_a_60_mb_rollout_stays_under_500_mb_and_sends_the_sdks_budget(tmp_path):

    path = tmp_path / "huge.jsonl"
    write_huge_rollout(path, 60_000_000)
    with FakeOpenAI() as server:
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, str(path), server.base_url],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
            timeout=300,
            check=True,
        )
        prompt = server.requests[-1]["input"]

    status, original, kept, peak = done.stdout.split()
    assert status == "memory"
    assert int(original) > 13_000_000  # ~55 MB of transcript at 4 bytes a token
    assert int(kept) <= 150_000
    assert len(prompt.encode()) < 150_000 * 4 + 5_000  # the transcript cut, plus our words
    assert "worker log line" in prompt and "tokens truncated" in prompt
    print(f"peak RSS of phase one on a 60 MB rollout: {int(peak) / 2**20:.0f} MiB")
    assert int(peak) < 500 * 2**20
