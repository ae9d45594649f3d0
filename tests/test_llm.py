"""The model client, through the real openai client over HTTP against FakeOpenAI."""

import socket
from email.utils import formatdate

import pytest

from generation.llm import (
    ModelConfig,
    PermanentModelError,
    TransientModelError,
    Usage,
    estimate_cost,
    make_call,
    make_client,
    parse_retry_after,
    structured_call,
)
from generation.model_server import chat_envelope, responses_envelope
from tests.scripted_model import FakeOpenAI, Reply

SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["title", "count"],
    "additionalProperties": False,
}
GOOD = {"title": "ok", "count": 3}


@pytest.fixture
def fake():
    with FakeOpenAI(use_demo=False) as server:
        yield server


def ask(server_or_url, **config):
    base_url = server_or_url if isinstance(server_or_url, str) else server_or_url.base_url
    cfg = ModelConfig(model="test-model", base_url=base_url, **config)
    return structured_call(
        make_client(cfg),
        cfg,
        instructions="Be brief.",
        prompt="Say something.",
        schema_name="thing",
        schema=SCHEMA,
    )


def test_responses_mode_sends_a_strict_json_schema_and_returns_the_object(fake):
    fake.script(Reply(json=GOOD, usage=(120, 30)))

    output, usage = ask(fake)

    assert output == GOOD
    assert usage == Usage(120, 30)
    [request] = fake.requests
    assert request["path"] == "/v1/responses"
    assert request["model"] == "test-model"
    assert request["instructions"] == "Be brief."
    assert request["input"] == "Say something."
    assert request["text"] == {
        "format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}
    }
    assert "reasoning" not in request


def test_responses_mode_sends_the_reasoning_effort_when_set(fake):
    fake.script(Reply(json=GOOD))

    ask(fake, reasoning_effort="low")

    assert fake.requests[0]["reasoning"] == {"effort": "low"}


def test_chat_mode_with_json_schema_sends_openais_response_format(fake):
    fake.script(Reply(json=GOOD, usage=(50, 7)))

    output, usage = ask(fake, api="chat", reasoning_effort="minimal")

    assert output == GOOD and usage == Usage(50, 7)
    [request] = fake.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say something."},
    ]
    assert request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True},
    }
    assert request["reasoning_effort"] == "minimal"


def test_chat_mode_with_json_object_sends_the_llama_cpp_shape(fake):
    fake.script(Reply(json=GOOD))

    output, _ = ask(fake, api="chat", chat_format="json_object")

    assert output == GOOD
    request = fake.requests[0]
    assert request["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert "reasoning_effort" not in request


def test_usage_is_zero_when_the_server_reports_none(fake):
    body = chat_envelope('{"title": "x", "count": 1}', model="m", usage=(0, 0))
    del body["usage"]
    fake.script(Reply(body=body))

    _, usage = ask(fake, api="chat")

    assert usage == Usage(0, 0)


def test_rate_limit_with_retry_after_is_transient_with_that_delay(fake):
    fake.script(Reply.error(429, "Rate limit reached", headers={"Retry-After": "7"}))

    with pytest.raises(TransientModelError) as caught:
        ask(fake)

    assert caught.value.retry_after == 7
    assert "HTTP 429" in str(caught.value)


def test_rate_limit_in_chat_mode_reads_retry_after_ms(fake):
    fake.script(Reply.error(429, headers={"retry-after-ms": "1500"}))

    with pytest.raises(TransientModelError) as caught:
        ask(fake, api="chat")

    assert caught.value.retry_after == 1.5


def test_out_of_quota_429_is_permanent(fake):
    fake.script(Reply.error(429, "You exceeded your current quota", code="insufficient_quota"))

    with pytest.raises(PermanentModelError, match="exceeded your current quota"):
        ask(fake)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_transient(fake, status):
    fake.script(Reply(status=status))

    with pytest.raises(TransientModelError, match=f"HTTP {status}") as caught:
        ask(fake)

    assert caught.value.retry_after is None


def test_a_reply_slower_than_the_client_timeout_is_transient(fake):
    fake.script(Reply(json=GOOD, delay=2.0))

    with pytest.raises(TransientModelError, match="did not answer in time"):  # the client's
        ask(fake, timeout=0.3)

    assert len(fake.requests) == 1  # asked once: the Celery task decides when to try again


def test_connection_refused_is_transient():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port any more.

    with pytest.raises(TransientModelError, match="could not connect"):
        ask(f"http://127.0.0.1:{port}/v1")


def test_bad_request_is_permanent_with_the_servers_message(fake):
    fake.script(Reply.error(400, "Invalid schema for response_format 'thing'"))

    with pytest.raises(PermanentModelError) as caught:
        ask(fake)

    assert str(caught.value) == "HTTP 400: Invalid schema for response_format 'thing'"


@pytest.mark.parametrize("status", [401, 403, 404, 422])
def test_other_client_errors_are_permanent(fake, status):
    fake.script(Reply.error(status, "nope"))

    with pytest.raises(PermanentModelError, match=f"HTTP {status}: nope"):
        ask(fake, api="chat")


def test_malformed_json_then_a_valid_repair_succeeds_with_two_requests(fake):
    fake.script(Reply(raw_text='{"title": "ok", "count": ', usage=(10, 5)), Reply(json=GOOD))

    output, usage = ask(fake)

    assert output == GOOD
    assert len(fake.requests) == 2
    repair = fake.requests[1]["input"]
    assert repair[0] == {"role": "user", "content": "Say something."}
    assert repair[1] == {"role": "assistant", "content": '{"title": "ok", "count": '}
    assert repair[2]["role"] == "user" and "not valid JSON" in repair[2]["content"]
    assert usage.input_tokens > 10 and usage.output_tokens > 5


def test_schema_violation_is_repaired_in_chat_mode_with_the_validators_error(fake):
    fake.script(Reply(json={"title": "ok", "count": "three"}), Reply(json=GOOD))

    output, _ = ask(fake, api="chat")

    assert output == GOOD
    messages = fake.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert "'three' is not of type 'integer'" in messages[3]["content"]


def test_schema_violation_twice_is_permanent_and_keeps_the_spent_tokens(fake):
    fake.script(
        Reply(json={"title": "ok"}, usage=(100, 10)),
        Reply(json={"title": "ok", "extra": 1, "count": 1}, usage=(150, 12)),
    )

    with pytest.raises(PermanentModelError, match="schema") as caught:
        ask(fake)

    assert len(fake.requests) == 2
    assert "Additional properties" in str(caught.value)
    assert caught.value.usage == Usage(250, 22)


def test_code_fences_around_the_json_are_tolerated(fake):
    fake.script(Reply(raw_text='```json\n{"title": "ok", "count": 3}\n```'))

    output, _ = ask(fake, api="chat", chat_format="json_object")

    assert output == GOOD
    assert len(fake.requests) == 1


def test_a_refusal_is_permanent(fake):
    fake.script(Reply(body=responses_envelope("", model="m", usage=(5, 2), refusal="I can't.")))

    with pytest.raises(PermanentModelError, match="refused: I can't") as caught:
        ask(fake)

    assert caught.value.usage == Usage(5, 2)


def test_a_refusal_in_chat_mode_is_permanent(fake):
    fake.script(Reply(body=chat_envelope("", model="m", usage=(5, 2), refusal="No.")))

    with pytest.raises(PermanentModelError, match="refused: No"):
        ask(fake, api="chat")


def test_empty_output_is_permanent(fake):
    fake.script(Reply(raw_text="   "))

    with pytest.raises(PermanentModelError, match="empty output"):
        ask(fake)

    assert len(fake.requests) == 1


def test_an_error_during_the_repair_call_keeps_the_first_calls_tokens(fake):
    fake.script(Reply(raw_text="not json", usage=(40, 4)), Reply(status=503))

    with pytest.raises(TransientModelError) as caught:
        ask(fake)

    assert caught.value.usage == Usage(40, 4)


def test_make_call_binds_a_client_for_the_phases(fake):
    fake.script(Reply(json=GOOD, usage=(3, 4)))
    call = make_call(ModelConfig(model="m", base_url=fake.base_url))

    assert call("i", "p", "thing", SCHEMA) == (GOOD, Usage(3, 4))


def test_make_client_never_retries_and_uses_the_configured_timeout():
    client = make_client(ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", timeout=5.0))

    assert client.max_retries == 0
    assert client.timeout == 5.0
    assert client.api_key == "not-needed"


def test_retry_after_is_read_as_seconds_milliseconds_or_an_http_date():
    now = 1_800_000_000.0

    assert parse_retry_after({"Retry-After": "7"}) == 7
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": formatdate(now + 30, usegmt=True)}, now=now) == 30
    assert parse_retry_after({"Retry-After": formatdate(now - 30, usegmt=True)}, now=now) == 0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_estimate_cost_prices_known_models_and_their_snapshots():
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000)

    assert estimate_cost("gpt-4o-mini", usage) == pytest.approx(0.15 + 0.06)
    assert estimate_cost("gpt-4.1-2025-04-14", usage) == pytest.approx(2.00 + 0.80)
    assert estimate_cost("gemma3-270m", usage) is None
    assert estimate_cost("gpt-4o", Usage()) == 0
