"""Phase two as an agent on a big tree, against the test server's demo model.

One run, for the default layout (``memories``) of a tree from ``bench/generate_tree.py``:

1. reads the layout's memory folder from disk (``MEMORY.md``, ``memory_summary.md``,
   ``skills/``, ``phase_two_selection.json``, every raw memory and rollout summary);
2. adds ``--new`` raw memories (20), newer than every other: copies of the oldest ones
   under new rollout ids, as new rollouts that repeat old work, so that the selection adds
   them (and, on a tree with more than 256, forgets as many of the oldest): the work a
   consolidation after a busy day has;
3. plans phase two exactly as a run does (``phase_two.plan_phase_two``: the SDK's
   selection of ``max_raw_memories_for_consolidation`` = 256, ``raw_memories.md``
   rebuilt) and builds the staging copy as a run does (the selected and removed rollouts'
   summaries, skills, the selection file);
4. times ``phase_two_agent.run_agent`` with memoryui's prompt set over the Responses API
   against ``tests.scripted_model.FakeOpenAI`` (the offline demo model edits incrementally), and
   reports turns, tokens sent and received (the server's estimate: 4 characters a
   token, what it bills), the largest single request and answer, wall time and the
   process's peak RSS (``ru_maxrss``; the test server runs in this process too);
5. with ``--one-shot``, also asks the one-shot design (``phase_two.run_phase_two``: the
   whole current files and raw memories in, both whole files out) on the same input and
   reports its tokens, for a tree small enough for that to be possible.

    .venv/bin/python bench/generate_tree.py /tmp/tree-10k --rollouts 10000 --seed 7
    .venv/bin/python bench/bench_phase_two.py /tmp/tree-10k
    .venv/bin/python bench/bench_phase_two.py /tmp/tree-300 --one-shot --json
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

from generation import llm, phase_two, phase_two_agent, prompts, review, tree  # noqa: E402
from tests.scripted_model import FakeOpenAI  # noqa: E402

_UPDATED_RE = re.compile(r"^updated_at: .*$", re.MULTILINE)


def read_layout(root: Path, memories_dir: str) -> tuple[dict[str, bytes], list[str]]:
    """The memory folder's files (relative paths) and its raw memory texts."""
    base = root / memories_dir
    files: dict[str, bytes] = {}
    for name in ("MEMORY.md", "memory_summary.md", "phase_two_selection.json"):
        if (base / name).is_file():
            files[name] = (base / name).read_bytes()
    for sub in ("rollout_summaries", "skills"):
        for path in sorted((base / sub).rglob("*")):
            if path.is_file():
                files[path.relative_to(base).as_posix()] = path.read_bytes()
    raws = [p.read_text() for p in sorted((base / "raw_memories").glob("*.md"))]
    return files, raws


def new_rollouts(raws: list[str], count: int) -> tuple[list[str], dict[str, bytes]]:
    """``count`` new raw memories, newer than all others (copies of the oldest ones under
    new rollout ids, as rollouts that repeat old work), and their rollout summaries."""
    ranked = tree.select_for_consolidation(raws, len(raws))
    by_id = {tree.read_headers(t, ("rollout_id",)).get("rollout_id", ""): t for t in raws}
    added, summaries = [], {}
    for n, item in enumerate(ranked[-count:] if count else []):
        rid = f"bench-new-{n:04d}"
        summary = f"rollout_summaries/{rid}_repeat.md"
        text = by_id[item.rollout_id]
        text = _UPDATED_RE.sub(f"updated_at: 2099-01-01T00:{n % 60:02d}:00+00:00", text, 1)
        text = text.replace(f"rollout_id: {item.rollout_id}\n", f"rollout_id: {rid}\n", 1)
        text = re.sub(
            r"^rollout_summary_file: .*$",
            f"rollout_summary_file: {summary}",
            text,
            count=1,
            flags=re.MULTILINE,
        )
        added.append(text)
        summaries[summary] = f"session_id: bench\n\n# repeat of {item.rollout_id}\n".encode()
    return [*raws, *added], summaries


def run(root: Path, memories_dir: str, new: int, one_shot: bool) -> dict[str, Any]:
    files, raws = read_layout(root, memories_dir)
    previous = tree.parse_selection(files["phase_two_selection.json"])
    raws, summaries = new_rollouts(raws, new)
    files.update(summaries)
    plan = phase_two.plan_phase_two(raws, previous, 256)
    wanted = {i.rollout_summary_file for i in [*plan.selected, *plan.removed_items]}
    staged = {
        rel: data
        for rel, data in files.items()
        if not rel.startswith("rollout_summaries/") or rel in wanted
    }
    staged["raw_memories.md"] = plan.raw_memories_md.encode()
    memory_md = files.get("MEMORY.md", b"")
    result: dict[str, Any] = {
        "tree": str(root),
        "layout": memories_dir,
        "memory_md_bytes": len(memory_md),
        "raw_memories_md_bytes": len(staged["raw_memories.md"]),
        "selected": len(plan.selected),
        "added": len(plan.diff.added),
        "removed": len(plan.removed_items),
    }
    with FakeOpenAI() as server:
        config = llm.ModelConfig(model="demo", base_url=server.base_url)
        client = llm.make_client(config)
        with phase_two_agent.Staging(staged, root_name=memories_dir) as staging:
            start = time.perf_counter()
            outcome = phase_two_agent.run_agent(
                client=client,
                config=config,
                instructions=prompts.phase_two_agent_instructions(),
                prompt=prompts.phase_two_agent_prompt(
                    selection_lines=phase_two.selection_lines(plan), pinned=[], rejected=[]
                ),
                staging=staging,
            )
            wall = time.perf_counter() - start
        new_md = outcome.changes.get("MEMORY.md", (memory_md, memory_md))[1] or b""
        result["agent"] = {
            "status": outcome.status,
            "reason": outcome.reason,
            "turns": outcome.turns,
            "tool_calls": sum(
                1 for r in server.responses for i in r.get("output", []) if i["type"] != "message"
            ),
            "input_tokens": outcome.usage.input_tokens,
            "output_tokens": outcome.usage.output_tokens,
            "largest_request_bytes": max(len(json.dumps(r)) for r in server.requests),
            "largest_answer_bytes": max(len(json.dumps(r)) for r in server.responses),
            "files_changed": sorted(outcome.changes),
            "memory_md_entries": _entries(memory_md, new_md),
            "wall_seconds": round(wall, 2),
        }
        if one_shot:
            call = llm.make_call(config, client)
            start = time.perf_counter()
            shot = phase_two.run_phase_two(
                plan=plan,
                current_memory_md=memory_md.decode(),
                current_summary=files.get("memory_summary.md", b"").decode(),
                pinned=[],
                rejected=[],
                extra_prompt="",
                call=call,
            )
            result["one_shot"] = {
                "input_tokens": shot.usage.input_tokens,
                "output_tokens": shot.usage.output_tokens,
                "wall_seconds": round(time.perf_counter() - start, 2),
                "memory_md_entries": _entries(memory_md, shot.memory_md.encode()),
            }
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return result


def _entries(old: bytes, new: bytes) -> dict[str, int]:
    """The MEMORY.md entries a reviewer sees, by what happened to them."""
    counts: dict[str, int] = {}
    for change in review.compare(old.decode(), new.decode()):
        counts[change.status] = counts.get(change.status, 0) + 1
    return dict(sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tree", type=Path, help="a workspace from bench/generate_tree.py")
    parser.add_argument("--layout", default="memories")
    parser.add_argument("--new", type=int, default=20, help="raw memories made newest (20)")
    parser.add_argument("--one-shot", action="store_true", help="also the one-shot design")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.tree, args.layout, args.new, args.one_shot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
