"""The tests' model: an OpenAI-compatible server on 127.0.0.1 (the product's
``generation.model_server``) that tests script. A test queues replies (slow ones, errors
with headers, malformed or schema-violating output, tool calls); when the script runs
out, a responder answers, by default the offline demo model. Every request is recorded,
and answers can be held in flight, as with a model that is still thinking."""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from generation.model_server import (
    MODEL_ROUTES,
    JSONDict,
    ModelServer,
    Responder,
    ToolCall,
    error_body,
)
from generation.offline_model import demo_responder


@dataclass
class Reply:
    """One scripted answer. Give ``json`` (a structured output object) or ``raw_text``
    (the output text as is, e.g. malformed JSON) to have it wrapped in the endpoint's
    envelope, or ``body`` for the whole HTTP body; with none of them, an error body for
    an error status, else the responder's answer."""

    status: int = 200
    json: JSONDict | None = None
    raw_text: str | None = None
    body: JSONDict | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] | None = None  # (input, output) tokens; estimated when None
    # Tool calls, as (name, arguments) pairs: function_call items (Responses) or
    # tool_calls (Chat Completions); ``raw_text`` is the text beside them.
    calls: list[tuple[str, JSONDict]] | None = None

    @classmethod
    def tools(cls, *calls: tuple[str, JSONDict], text: str = "", **kwargs: Any) -> Reply:
        return cls(calls=list(calls), raw_text=text, **kwargs)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        return cls(status=status, body=error_body(status, message, code), headers=headers or {})


class FakeOpenAI(ModelServer):
    """A scripted OpenAI-compatible server on 127.0.0.1, in a daemon thread while used
    as a context manager (``port=0`` picks a free port)."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        use_demo: bool = True,
    ) -> None:
        super().__init__(responder or demo_responder, host=host, port=port)
        # Without one, a request the script does not answer gets a 500 saying so.
        self.has_responder = responder is not None or use_demo
        self.requests: list[JSONDict] = []
        self.responses: list[JSONDict] = []  # the bodies of successful answers
        self.delay = 0.0  # seconds before every answer without a delay of its own
        self.held = 0  # requests waiting for release() after hold()
        self._open = threading.Event()
        self._open.set()
        self._replies: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def hold(self) -> None:
        """Keep every answer from now on until ``release()``: the requests stay in
        flight, as with a model that is still thinking (requests are recorded first)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def record(self, path: str, body: JSONDict) -> None:
        with self._lock:
            self.requests.append({**body, "path": path})

    def get(self, path: str) -> tuple[int, JSONDict]:
        self.record(path, {})
        return super().get(path)

    def answer(self, path: str, body: JSONDict) -> tuple[int, JSONDict, dict[str, str]]:
        """The status, body and headers for one request (runs in a handler thread)."""
        with self._lock:
            self.requests.append({**body, "path": path})
            reply = self._replies.popleft() if self._replies else Reply()
        if not self._open.is_set():
            with self._lock:
                self.held += 1
            self._open.wait()
            with self._lock:
                self.held -= 1
        if reply.delay or self.delay:
            time.sleep(reply.delay or self.delay)
        if reply.body is not None:
            return reply.status, reply.body, reply.headers
        if reply.status >= 400:
            return reply.status, error_body(reply.status), reply.headers
        if not path.endswith(MODEL_ROUTES):
            return 404, error_body(404, f"no route for POST {path}"), reply.headers
        calls = [ToolCall(name, args) for name, args in reply.calls] if reply.calls else None
        if reply.calls is not None:
            text = reply.raw_text or ""
        elif reply.raw_text is not None:
            text = reply.raw_text
        elif reply.json is not None:
            text = json.dumps(reply.json)
        elif not self.has_responder:
            return 500, error_body(500, "no scripted reply left and no responder"), {}
        else:
            try:
                text, calls = self.respond(path, body)
            except Exception as exc:  # a broken responder must not hang the client
                return 500, error_body(500, f"responder failed: {exc!r}"), {}
        payload = self.envelope(path, body, text, calls, usage=reply.usage)
        with self._lock:
            self.responses.append(payload)
        return reply.status, payload, reply.headers

    def close(self) -> None:
        self.release()
        super().close()
