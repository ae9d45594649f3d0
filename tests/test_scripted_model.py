"""The tests' scripted model server: scripted replies first, then the responder; errors
with OpenAI's body and headers; every request recorded; answers held in flight."""

import threading
import time

import openai
import pytest

from generation.model_server import DEMO_MODEL
from tests.scripted_model import FakeOpenAI, Reply


def client(server):
    return openai.OpenAI(api_key="x", base_url=server.base_url, max_retries=0)


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


def test_held_answers_stay_in_flight_until_released():

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
