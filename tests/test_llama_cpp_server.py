"""A real OpenAI-compatible server, as users run locally: llama.cpp's with Gemma 3 270M.

The server and model come from the dev dependencies (see generation/local_model.py); nothing here is
skipped when they are missing: the fixture fails with the server's output instead.
"""

import json

import jsonschema
import openai
import pytest
from agents.sandbox.memory.phase_one import normalize_rollout_slug
from agents.sandbox.memory.storage import _extract_selection_item

from generation import llm, phase_one, tree
from generation.llm import ModelConfig, make_client
from generation.local_model import small_model_schema
from generation.phase_two_agent import Limits, Staging, run_agent

PHASE_ONE_SCHEMA = {
    "type": "object",
    "properties": {
        "rollout_slug": {"type": "string"},
        "rollout_summary": {"type": "string"},
        "raw_memory": {"type": "string"},
    },
    "required": ["rollout_slug", "rollout_summary", "raw_memory"],
    "additionalProperties": False,
}

MESSAGES = [
    {
        "role": "system",
        "content": "You turn an agent's rollout into memory. Answer with one JSON object with "
        "the keys rollout_slug, rollout_summary and raw_memory.",
    },
    {
        "role": "user",
        "content": "Rollout: the user asked the agent to fix a failing test in parser.py. The "
        "agent ran pytest, saw that parse('') raised IndexError, made it return an empty list, "
        "and the whole suite passed.",
    },
]


def test_chat_completions_json_object_schema_gives_schema_valid_json(llama_server):
    client = llama_server.client()
    response = client.chat.completions.create(
        model=llama_server.model,
        messages=MESSAGES,
        # llama.cpp's server form: the schema becomes a grammar that constrains sampling.
        response_format={"type": "json_object", "schema": PHASE_ONE_SCHEMA},
        max_tokens=300,
        temperature=0,
    )
    choice = response.choices[0]
    content = choice.message.content
    assert choice.finish_reason == "stop", f"{choice.finish_reason}: {content!r}"
    # strict=False: the server's grammar lets raw control characters (a newline, a tab) into
    # JSON strings, which the JSON spec and json.loads' default refuse.
    data = json.loads(content, strict=False)
    jsonschema.validate(data, PHASE_ONE_SCHEMA)
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0


def test_openai_json_schema_form_and_responses_api_are_not_served(llama_server):
    """What the Chat Completions mode must work around on this server (pinned, so an upgrade
    that changes it shows up here): OpenAI's json_schema form is refused, with a 500 that
    carries the validation error, and there is no Responses API."""
    client = llama_server.client()
    with pytest.raises(openai.InternalServerError) as refused:
        client.chat.completions.create(
            model=llama_server.model,
            messages=MESSAGES,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "phase_one", "schema": PHASE_ONE_SCHEMA, "strict": True},
            },
            max_tokens=8,
        )
    assert "Input should be 'text' or 'json_object'" in refused.value.response.text
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=llama_server.model, input="hi", max_output_tokens=8)


def test_phase_one_through_llama_cpp_writes_files_in_the_sdks_format(
    llama_server,
    fixtures_dir,
):
    """memoryui's real phase one (prompt, Chat Completions json_object mode, validation,
    file writing) on a fixture rollout, answered by a real local model. A 270M model's
    prose is not judged; the schema is tightened (lengths, no control characters) so that
    every sample is usable, as generation.local_model.small_model_schema explains."""

    path = fixtures_dir / "small-a/workspace/sessions/engineering/eng-slugify-unicode-65aef7.jsonl"
    parsed = tree.parse_rollout(path.read_bytes())
    config = llm.ModelConfig(
        model=llama_server.model,
        api_key=llama_server.api_key,
        base_url=llama_server.base_url,
        api="chat",
        chat_format="json_object",
    )
    call = llm.make_call(config)

    result = phase_one.run_phase_one(
        parsed,
        call=lambda instructions, prompt, name, schema: call(
            instructions, prompt, name, small_model_schema(schema)
        ),
        max_tokens=2500,
    )
    files = phase_one.phase_one_files(
        rollout_id="eng-slugify-unicode-65aef7",
        result=result,
        parsed=parsed,
        rollout_path="sessions/engineering/eng-slugify-unicode-65aef7.jsonl",
        session_id="979b33c0-34e3-4a2b-9784-6b83cb988639",
    )

    assert result.status == "memory", llama_server.log()
    jsonschema.validate(
        {
            "rollout_slug": result.slug,
            "rollout_summary": result.summary,
            "raw_memory": result.raw_memory,
        },
        phase_one.PHASE_ONE_SCHEMA,
    )
    assert normalize_rollout_slug(result.slug) == result.slug
    raw = files["raw_memories/eng-slugify-unicode-65aef7.md"]
    item = _extract_selection_item(raw.rstrip("\n"))
    assert item is not None and item.rollout_id == "eng-slugify-unicode-65aef7"
    assert item.terminal_state == "completed"
    assert item.updated_at == parsed.segments[-1].updated_at
    summary_name = f"rollout_summaries/eng-slugify-unicode-65aef7_{result.slug}.md"
    assert item.rollout_summary_file == summary_name
    summary = files[summary_name]
    assert summary.startswith(
        "session_id: 979b33c0-34e3-4a2b-9784-6b83cb988639\n"
        f"updated_at: {parsed.segments[-1].updated_at}\n"
        "rollout_path: sessions/engineering/eng-slugify-unicode-65aef7.jsonl\n"
        "terminal_state: completed\n\n"
    )
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


def test_phase_two_agent_through_llama_cpp_ends_with_a_result_and_a_reason(llama_server):
    """A 270M model may not call tools well: the loop must still end with a status and a
    reason a person can read, never an exception, and change only what it may."""

    config = ModelConfig(
        model=llama_server.model,
        api_key=llama_server.api_key,
        base_url=llama_server.base_url,
        api="chat",
        chat_format="json_object",
    )
    folder = {
        "MEMORY.md": b"# Task Group: tests\n\nscope: parser tests\n",
        "memory_summary.md": b"## User Profile\n\nWrites parsers.\n",
        "raw_memories.md": b"rollout_id: r1\nupdated_at: 2026-11-30\n\nparse('') now returns []\n",
    }
    with Staging(folder) as staging:
        result = run_agent(
            client=make_client(config),
            config=config,
            instructions="Update MEMORY.md with the new raw memory using your tools.",
            prompt="Consolidate raw_memories.md into MEMORY.md.",
            staging=staging,
            limits=Limits(max_turns=3, max_answer_tokens=200),
            sleep=lambda seconds: None,
        )

    assert result.status in ("changed", "nothing", "failed")
    assert result.turns >= 1 or result.reason
    if result.status == "failed":
        assert result.reason and result.changes == {}
    assert set(result.changes) <= {"MEMORY.md", "memory_summary.md"}
