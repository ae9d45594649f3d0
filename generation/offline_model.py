"""The offline demo model: a deterministic stand-in for a model that knows memoryui's
prompts, so that generation runs with no API key and no model server (``bin/start``
uses it when no model is configured; ``MEMORYUI_DEMO_MODEL=offline``).

Every process that calls it (the web server, a Celery worker, a command) serves it
itself on a free local port (``in_process_demo_url``), and ``python -m
generation.offline_model --port 8765`` serves it in the foreground. What it answers is
written by ``generation.offline_writer`` (phase one; phase two in one call) and
``generation.offline_agent`` (phase two as an agent); ``generation.model_server`` speaks
the OpenAI API around it.
"""

from __future__ import annotations

import argparse
import os
import threading

from generation import phase_one, prompts, tree
from generation.model_server import DEMO_MODEL, AgentTurn, JSONDict, ModelServer, request_parts
from generation.offline_agent import demo_phase_two_agent, is_agent_request
from generation.offline_writer import demo_phase_one, demo_phase_two

PHASE_ONE_KEYS = frozenset({"rollout_slug", "rollout_summary", "raw_memory"})
PHASE_TWO_KEYS = frozenset({"memory_md", "memory_summary"})


def demo_responder(path: str, body: JSONDict) -> JSONDict | AgentTurn:
    """A deterministic stand-in for a model that knows memoryui's two prompts."""
    if is_agent_request(body):
        return demo_phase_two_agent(path, body)
    parts = request_parts(path, body)
    required = set(parts.schema.get("required") or parts.schema.get("properties") or ())
    if PHASE_ONE_KEYS <= required:
        if f"<{prompts.ROLLOUT_TAG}>" not in parts.prompt:
            return demo_phase_one(_render_sdk_rollout(parts.prompt))
        return demo_phase_one(parts.prompt)
    if PHASE_TWO_KEYS <= required:
        return demo_phase_two(parts.prompt)
    return {key: "" for key in sorted(required)}


def _render_sdk_rollout(prompt: str) -> str:
    """The SDK's phase-one prompt carries the rollout's JSONL lines: render them as
    memoryui renders a rollout, so the demo reads either prompt set alike."""
    lines = [line for line in prompt.splitlines() if line.startswith('{"')]
    rendered = phase_one.render_rollout(tree.parse_rollout("\n".join(lines).encode()))
    return prompts.phase_one_prompt(rendered.text)


_in_process: tuple[int, ModelServer] | None = None  # (the process it serves, the server)
_in_process_lock = threading.Lock()


def in_process_demo_url() -> str:
    """The base URL of the offline demo model served in this process (a daemon thread on
    a free port of 127.0.0.1, started on first use), so that any process (the web server,
    a Celery worker, a management command) can run generation offline with nothing else
    running. A forked child starts its own: the parent's thread is not in it."""
    global _in_process
    with _in_process_lock:
        if _in_process is None or _in_process[0] != os.getpid():
            _in_process = (os.getpid(), ModelServer(demo_responder).start())
        return _in_process[1].base_url


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the offline demo model.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = ModelServer(demo_responder, host=args.host, port=args.port)
    print(f"offline demo model ({DEMO_MODEL}) at {server.base_url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
