"""The model client: one structured-output call, its errors and its cost.

Works with OpenAI and with OpenAI-compatible servers (vLLM, Ollama, LM Studio,
llama.cpp): the Responses API with a strict JSON schema by default, or Chat Completions
with either OpenAI's ``json_schema`` response format or llama.cpp's ``json_object`` +
``schema`` form. Errors are split into transient (retry later) and permanent (give up,
with a short reason a person can read); the client itself never retries, so that the
Celery task decides when to try again.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import jsonschema  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped, unused-ignore]

from generation import prompts

if TYPE_CHECKING:
    # Loaded by the functions that call a model (the client is heavy to import): pages
    # and commands that only use this module's types and errors never load it.
    import openai

JSONDict = dict[str, Any]
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class ModelConfig:
    model: str
    api_key: str | None = None  # None -> "not-needed" for local servers
    base_url: str | None = None
    api: Literal["responses", "chat"] = "responses"
    # "json_object" is llama.cpp's form: {"type": "json_object", "schema": ...}
    chat_format: Literal["json_schema", "json_object"] = "json_schema"
    reasoning_effort: str | None = None  # sent only when set
    timeout: float = 120.0


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


# (instructions, prompt, schema_name, schema) -> (output, usage): what the phases call.
ModelCall = Callable[[str, str, str, JSONDict], tuple[JSONDict, Usage]]


class ModelError(Exception):
    """A model call failed; ``str(error)`` is a short reason for people. ``usage`` holds
    the tokens already spent (a call can fail after the model answered)."""

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage()


class TransientModelError(ModelError):
    """Worth retrying: rate limits, server errors, timeouts, connection failures."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, usage: Usage | None = None
    ) -> None:
        super().__init__(message, usage=usage)
        self.retry_after = retry_after


class PermanentModelError(ModelError):
    """Retrying the same request would fail the same way."""


def make_client(config: ModelConfig) -> openai.OpenAI:
    import openai  # noqa: PLC0415 (deferred: openai loads at the first model call)

    return openai.OpenAI(
        api_key=config.api_key or "not-needed",
        base_url=config.base_url,
        timeout=config.timeout,
        max_retries=0,  # Celery retries, with backoff that honours Retry-After
    )


def make_call(config: ModelConfig, client: openai.OpenAI | None = None) -> ModelCall:
    """``structured_call`` bound to a client and config, in the shape the phases take."""
    bound = client or make_client(config)

    def call(
        instructions: str, prompt: str, schema_name: str, schema: JSONDict
    ) -> tuple[JSONDict, Usage]:
        return structured_call(
            bound,
            config,
            instructions=instructions,
            prompt=prompt,
            schema_name=schema_name,
            schema=schema,
        )

    return call


# --- the call --------------------------------------------------------------------------


class _InvalidOutput(Exception):
    """The model answered, but not with JSON that fits the schema."""


def structured_call(
    client: openai.OpenAI,
    config: ModelConfig,
    *,
    instructions: str,
    prompt: str,
    schema_name: str,
    schema: JSONDict,
) -> tuple[JSONDict, Usage]:
    """Ask for one JSON object matching ``schema``; validate it, and when it does not
    parse or validate, ask once more with the validator's complaint and the bad output.
    Raises TransientModelError or PermanentModelError."""
    messages: list[JSONDict] = [{"role": "user", "content": prompt}]
    text, usage = _request(client, config, instructions, messages, schema_name, schema)
    try:
        return parse_output(text, schema), usage
    except _InvalidOutput as exc:
        first_problem = str(exc)
    messages += [
        {"role": "assistant", "content": text},
        {"role": "user", "content": prompts.repair_prompt(first_problem)},
    ]
    try:
        text, more = _request(client, config, instructions, messages, schema_name, schema)
    except ModelError as exc:
        exc.usage = usage + exc.usage
        raise
    usage += more
    try:
        return parse_output(text, schema), usage
    except _InvalidOutput as exc:
        raise PermanentModelError(
            _short(f"output does not match the {schema_name} schema, even after a repair: {exc}"),
            usage=usage,
        ) from None


def _request(
    client: openai.OpenAI,
    config: ModelConfig,
    instructions: str,
    messages: list[JSONDict],
    schema_name: str,
    schema: JSONDict,
) -> tuple[str, Usage]:
    import openai  # noqa: PLC0415 (deferred: openai loads at the first model call)

    try:
        if config.api == "chat":
            return _chat(client, config, instructions, messages, schema_name, schema)
        return _responses(client, config, instructions, messages, schema_name, schema)
    except openai.OpenAIError as exc:
        raise translate_error(exc) from exc


def _responses(
    client: openai.OpenAI,
    config: ModelConfig,
    instructions: str,
    messages: list[JSONDict],
    schema_name: str,
    schema: JSONDict,
) -> tuple[str, Usage]:
    kwargs: JSONDict = {
        "model": config.model,
        "instructions": instructions,
        "input": messages[0]["content"] if len(messages) == 1 else messages,
        "text": {
            "format": {"type": "json_schema", "name": schema_name, "schema": schema, "strict": True}
        },
        # Rollouts can hold private data: do not keep them on the provider's side.
        "store": False,
    }
    if config.reasoning_effort:
        kwargs["reasoning"] = {"effort": config.reasoning_effort}
    response = client.responses.create(**kwargs)
    usage = usage_of(getattr(response, "usage", None), "input_tokens", "output_tokens")
    texts: list[str] = []
    for item in getattr(response, "output", None) or []:
        if getattr(item, "type", None) != "message":
            continue
        for part in getattr(item, "content", None) or []:
            kind = getattr(part, "type", None)
            if kind == "refusal":
                reason = _short(str(getattr(part, "refusal", "") or ""))
                raise PermanentModelError(f"the model refused: {reason}", usage=usage)
            if kind == "output_text" and isinstance(getattr(part, "text", None), str):
                texts.append(part.text)
    text = "".join(texts)
    if not text.strip():
        status = getattr(response, "status", None)
        details = getattr(response, "incomplete_details", None)
        why = f" (response {status}: {getattr(details, 'reason', '')})" if details else ""
        raise PermanentModelError(f"the model returned empty output{why}", usage=usage)
    return text, usage


def _chat(
    client: openai.OpenAI,
    config: ModelConfig,
    instructions: str,
    messages: list[JSONDict],
    schema_name: str,
    schema: JSONDict,
) -> tuple[str, Usage]:
    response_format: JSONDict
    if config.chat_format == "json_object":
        response_format = {"type": "json_object", "schema": schema}
    else:
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "schema": schema, "strict": True},
        }
    kwargs: JSONDict = {
        "model": config.model,
        "messages": [{"role": "system", "content": instructions}, *messages],
        "response_format": response_format,
    }
    if config.reasoning_effort:
        kwargs["reasoning_effort"] = config.reasoning_effort
    if config.chat_format == "json_object":
        # llama.cpp's server ignores max_completion_tokens and, unbounded, writes until
        # its context is full.
        kwargs["max_tokens"] = CHAT_MAX_TOKENS
    response = client.chat.completions.create(**kwargs)
    usage = usage_of(getattr(response, "usage", None), "prompt_tokens", "completion_tokens")
    choices = getattr(response, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    refusal = getattr(message, "refusal", None)
    if refusal:
        raise PermanentModelError(f"the model refused: {_short(str(refusal))}", usage=usage)
    text = getattr(message, "content", None)
    if not isinstance(text, str) or not text.strip():
        finish = getattr(choices[0], "finish_reason", None) if choices else None
        why = f" (finish_reason {finish})" if finish else ""
        raise PermanentModelError(f"the model returned empty output{why}", usage=usage)
    return text, usage


def usage_of(raw: Any, input_key: str, output_key: str) -> Usage:
    """The tokens a response's ``usage`` reports under the API's keys (the Responses API's
    ``input_tokens``/``output_tokens``, Chat Completions' ``prompt_tokens``/...); 0 where
    a server leaves them out."""

    def count(key: str) -> int:
        value = getattr(raw, key, None) if raw is not None else None
        return value if isinstance(value, int) and value >= 0 else 0

    return Usage(count(input_key), count(output_key))


# --- the output ------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)


def parse_output(text: str, schema: JSONDict) -> JSONDict:
    """The JSON object in ``text`` (fences and chatter around it tolerated), checked
    against ``schema``. Raises _InvalidOutput with the first problem."""
    value = _load_json(text)
    error = best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise _InvalidOutput(f"{error.message}" + (f" (at {where})" if where else ""))
    if not isinstance(value, dict):
        raise _InvalidOutput("the output is not a JSON object")
    return value


def _load_json(text: str) -> Any:
    stripped = text.strip()
    candidates = [stripped]
    fenced = _FENCE_RE.search(stripped)
    if fenced:
        candidates.append(fenced.group(1).strip())
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        candidates.append(stripped[start : end + 1])
    first_error: json.JSONDecodeError | None = None
    for candidate in candidates:
        try:
            # strict=False: grammar-constrained local models (llama.cpp) put raw
            # newlines and tabs inside strings.
            return json.loads(candidate, strict=False)
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
    assert first_error is not None
    raise _InvalidOutput(
        f"not valid JSON ({first_error.msg} at line {first_error.lineno} "
        f"column {first_error.colno})"
    )


# --- errors ----------------------------------------------------------------------------


CHAT_MAX_TOKENS = 4096
_UNSUPPORTED_JSON_SCHEMA = "Input should be 'text' or 'json_object'"


def translate_error(exc: openai.OpenAIError) -> ModelError:
    """Map the client's exceptions onto transient and permanent errors."""
    import openai  # noqa: PLC0415 (deferred: openai loads at the first model call)

    if isinstance(exc, openai.APIStatusError) and _UNSUPPORTED_JSON_SCHEMA in _error_message(exc):
        # llama.cpp answers 500 to OpenAI's json_schema form: retrying cannot help.
        return PermanentModelError(
            "this server does not accept response_format json_schema; set the layout's "
            "API to Chat Completions with json_object + schema"
        )
    if isinstance(exc, openai.APITimeoutError):
        return TransientModelError("the model server did not answer in time")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {_short(str(cause), 120)}" if cause else ""
        return TransientModelError(f"could not connect to the model server{detail}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        reason = _short(f"HTTP {status}: {_error_message(exc)}")
        if status == 429 and _error_code(exc) == "insufficient_quota":
            return PermanentModelError(reason)  # out of credit: waiting will not help
        if status in (408, 409, 429) or status >= 500:
            return TransientModelError(reason, retry_after=parse_retry_after(exc.response.headers))
        return PermanentModelError(reason)
    return PermanentModelError(_short(str(exc) or type(exc).__name__))


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    elif isinstance(body, str) and body.strip():
        return body.strip()
    return exc.message


def _error_code(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    return str(body.get("code")) if isinstance(body, Mapping) and body.get("code") else None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP
    date; None when absent or unreadable."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(header)
        if value is None:
            continue
        try:
            seconds = float(value.strip()) / divisor
        except ValueError:
            continue
        if seconds >= 0 and seconds != float("inf"):
            return seconds
    value = lowered.get("retry-after")
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError):
            return None
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    return None


def _short(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# --- cost ------------------------------------------------------------------------------

# USD per 1M tokens (input, output), OpenAI's list prices; an estimate for the run page.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
}
_SNAPSHOT_SUFFIX_RE = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def estimate_cost(model: str, usage: Usage) -> float | None:
    """Estimated USD for ``usage`` on ``model`` (dated snapshots priced as their base
    model); None when the model's price is unknown (local models, other providers)."""
    name = _SNAPSHOT_SUFFIX_RE.sub("", model.strip().lower().removeprefix("openai/"))
    price = PRICES.get(name)
    if price is None:
        return None
    return (usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000
