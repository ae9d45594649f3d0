"""The OpenAI-compatible test server and its offline demo model."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from generation import prompts, tree
from generation.fake_openai import (
    DEMO_MODEL,
    FakeOpenAI,
    Reply,
    demo_phase_one,
    demo_responder,
)
from generation.phase_one import PHASE_ONE_SCHEMA, render_rollout

ROOT = Path(__file__).resolve().parent.parent


def client(server):
    return openai.OpenAI(api_key="x", base_url=server.base_url, max_retries=0)


def phase_one_prompt(*lines: dict) -> str:
    data = "\n".join(json.dumps(line) for line in lines).encode()
    return prompts.phase_one_prompt(render_rollout(tree.parse_rollout(data)).text)


def test_models_endpoint_lists_the_demo_model():
    with FakeOpenAI() as server:
        models = client(server).models.list()

    assert [m.id for m in models.data] == [DEMO_MODEL]
    assert server.requests == [{"path": "/v1/models"}]


def test_scripted_replies_come_first_in_order_then_the_responder_answers():
    with FakeOpenAI(lambda path, body: {"from": "responder"}) as server:
        server.script(Reply(json={"n": 1}), Reply(raw_text="two"))
        texts = [
            client(server).responses.create(model="m", input="hi").output_text for _ in range(3)
        ]

    assert texts == ['{"n": 1}', "two", '{"from": "responder"}']
    assert [r["input"] for r in server.requests] == ["hi", "hi", "hi"]
    assert {r["path"] for r in server.requests} == {"/v1/responses"}


def test_chat_replies_carry_content_and_usage():
    with FakeOpenAI() as server:
        server.script(Reply(json={"ok": True}, usage=(12, 3)))
        completion = client(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )

    assert completion.choices[0].message.content == '{"ok": true}'
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 3)


def test_error_replies_use_openais_error_body_and_headers():
    with FakeOpenAI() as server:
        server.script(
            Reply.error(429, "slow down", code="rate_limit_exceeded", headers={"Retry-After": "3"})
        )
        with pytest.raises(openai.RateLimitError) as caught:
            client(server).responses.create(model="m", input="hi")

    assert caught.value.body["message"] == "slow down"
    assert caught.value.body["code"] == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "3"


def test_without_responder_and_script_the_server_says_so():
    with FakeOpenAI(use_demo=False) as server:
        with pytest.raises(openai.InternalServerError, match="no scripted reply"):
            client(server).responses.create(model="m", input="hi")


def test_unknown_routes_are_404():
    with FakeOpenAI() as server:
        with pytest.raises(openai.NotFoundError):
            client(server).embeddings.create(model="m", input="hi")


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
        [sys.executable, "-m", "generation.fake_openai", "--port", str(port)],
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


def test_held_answers_stay_in_flight_until_released():
    import threading
    import time

    with FakeOpenAI() as server:
        server.script(Reply(raw_text="answered"))
        server.hold()
        answers = []

        def ask() -> None:
            answers.append(client(server).responses.create(model=DEMO_MODEL, input="hi"))

        caller = threading.Thread(target=ask)
        caller.start()
        deadline = time.monotonic() + 10
        while server.held == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert server.held == 1 and answers == []
        assert [r["path"] for r in server.requests] == ["/v1/responses"]  # recorded while held

        server.release()
        caller.join(timeout=10)

    assert answers[0].output_text == "answered" and server.held == 0
