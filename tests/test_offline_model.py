"""The offline demo model: what it writes for memoryui's prompts, and its server."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import openai

from generation import prompts, tree
from generation.offline_model import DEMO_MODEL, demo_responder
from generation.offline_writer import demo_phase_one
from generation.phase_one import PHASE_ONE_SCHEMA, render_rollout

ROOT = Path(__file__).resolve().parent.parent


def phase_one_prompt(*lines: dict) -> str:
    data = "\n".join(json.dumps(line) for line in lines).encode()
    return prompts.phase_one_prompt(render_rollout(tree.parse_rollout(data)).text)


def test_the_demo_answers_a_phase_one_request_in_the_sdks_raw_memory_shape():
    prompt = phase_one_prompt(
        {
            "updated_at": "2026-11-29T10:00:00+00:00",
            "input": [
                {
                    "role": "user",
                    "content": "Hi! Please rotate the API keys for ledger-sync and restart it.",
                }
            ],
            "generated_items": [
                {
                    "type": "function_call",
                    "name": "exec_command",
                    "call_id": "c1",
                    "arguments": "{}",
                }
            ],
            "terminal_metadata": {"terminal_state": "failed"},
        }
    )

    output = demo_phase_one(prompt)

    assert output["rollout_slug"] == "rotate-api-keys-ledger-sync"
    assert tree.SLUG_RE.fullmatch(output["rollout_slug"])
    front, _, body = output["raw_memory"].partition("---\n\n")
    assert front.splitlines()[0] == "---"
    assert [line.split(":")[0] for line in front.splitlines()[1:]] == [
        "description",
        "task",
        "task_group",
        "task_outcome",
        "keywords",
    ]
    assert "task_outcome: fail" in front and "exec_command" in front
    assert body.startswith("### Task 1: ")
    assert output["rollout_summary"].startswith("# ")


def test_the_demo_remembers_nothing_without_a_user_request():
    prompt = phase_one_prompt(
        {
            "input": [{"role": "system", "content": "You are helpful."}],
            "generated_items": [{"role": "assistant", "content": "Hello!"}],
            "terminal_metadata": {"terminal_state": "completed"},
        }
    )

    assert demo_phase_one(prompt) == {"rollout_slug": "", "rollout_summary": "", "raw_memory": ""}


def test_the_demo_recognises_phase_one_in_a_llama_cpp_json_object_request():
    prompt = phase_one_prompt(
        {
            "input": [{"role": "user", "content": "Please document how the deploy pipeline works"}],
            "generated_items": [],
            "terminal_metadata": {"terminal_state": "completed"},
            "final_output": "Done.",
        }
    )
    body = {
        "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": prompt}],
        "response_format": {"type": "json_object", "schema": PHASE_ONE_SCHEMA},
    }

    output = demo_responder("/v1/chat/completions", body)

    assert output["rollout_slug"] == "document-deploy-pipeline-works"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_main_serves_the_demo_model_in_the_foreground():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "generation.offline_model", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = process.stdout.readline()
        models = openai.OpenAI(
            api_key="x", base_url=f"http://127.0.0.1:{port}/v1", max_retries=3
        ).models.list()
    finally:
        process.terminate()
        process.wait(timeout=10)

    assert f"http://127.0.0.1:{port}/v1" in banner
    assert [m.id for m in models.data] == [DEMO_MODEL]
