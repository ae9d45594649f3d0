"""The offline demo model as phase two's agent: it edits the memory folder with the
agent's tools as a careful model would, in a few turns. It finds each added rollout's
raw memory and reads it; drops the citations of removed rollouts; puts each new task
under its task group when the group exists, else appends a new group at the end; adds
the new tasks to the summary's index; writes a skill when one task group gets three or
more new tasks (a procedure that repeats). Everything else stays byte for byte.

It keeps no state: each request carries the conversation, and its call ids
("demo-<step>-<key>") say which steps are done.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from generation import prompts
from generation.model_server import AgentTurn, JSONDict, ToolCall, content_text, request_parts
from generation.offline_writer import (
    content_words,
    demo_summary,
    read_raw_memories,
    slug_from,
    task_group_block,
)

_RETAINED_CHECKED = 50  # retained rollouts whose citations the demo checks
AGENT_TOOL_NAMES = frozenset({"read_file", "replace_in_file", "apply_patch"})
_SELECTED_RE = re.compile(
    r"^- \[(?P<status>added|retained|removed)\] rollout_id=(?P<id>[^,\s]+), "
    r"rollout_summary_file=(?P<file>[^,\s]+)"
)
_REMOVED_RE = re.compile(r"^- rollout_id=(?P<id>[^,\s]+), rollout_summary_file=(?P<file>[^,\s]+)")
_HIT_RE = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): (?P<text>.*)$")
_NUMBERED_RE = re.compile(r"^(\d+): ?(.*)$")


def is_agent_request(body: JSONDict) -> bool:
    names = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            names.add(tool.get("name") or (tool.get("function") or {}).get("name"))
    return AGENT_TOOL_NAMES <= names


@dataclass
class _Conversation:
    prompt: str
    calls: dict[str, tuple[str, JSONDict]]  # call id -> (tool, arguments)
    outputs: dict[str, str]  # call id -> tool output


def _conversation(path: str, body: JSONDict) -> _Conversation:
    prompt = request_parts(path, body).prompt
    calls: dict[str, tuple[str, JSONDict]] = {}
    outputs: dict[str, str] = {}

    def arguments(raw: Any) -> JSONDict:
        try:
            value = json.loads(raw or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    if path.endswith("/chat/completions"):
        for message in body.get("messages") or []:
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                calls[str(call.get("id"))] = (
                    str(function.get("name")),
                    arguments(function.get("arguments")),
                )
            if message.get("role") == "tool":
                outputs[message.get("tool_call_id")] = content_text(message.get("content"))
    else:
        for item in body.get("input") or [] if isinstance(body.get("input"), list) else []:
            if item.get("type") == "function_call":
                calls[item.get("call_id")] = (item.get("name"), arguments(item.get("arguments")))
            elif item.get("type") == "function_call_output":
                outputs[item.get("call_id")] = str(item.get("output") or "")
    return _Conversation(prompt, calls, outputs)


@dataclass
class _Selection:
    added: list[tuple[str, str]] = field(default_factory=list)
    retained: list[tuple[str, str]] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)


def _selection(prompt: str) -> _Selection:
    found = _Selection()
    in_removed = False
    for line in prompt.splitlines():
        if line.startswith("Removed from the last successful Phase 2 selection"):
            in_removed = True
        if match := _SELECTED_RE.match(line):
            if match.group("status") == "added":
                found.added.append((match.group("id"), match.group("file")))
            elif match.group("status") == "retained":
                found.retained.append((match.group("id"), match.group("file")))
            elif match.group("status") == "removed":
                found.removed.append((match.group("id"), match.group("file")))
        elif in_removed and (match := _REMOVED_RE.match(line)):
            found.removed.append((match.group("id"), match.group("file")))
    return found


def _unnumbered(output: str) -> list[str]:
    """The file lines of a read_file output (its line numbers and note dropped)."""
    return [m.group(2) for line in output.splitlines() if (m := _NUMBERED_RE.match(line))]


def _hits(output: str) -> list[tuple[int, str]]:
    if output.startswith("error:"):
        return []
    return [
        (int(m.group("line")), m.group("text"))
        for m in map(_HIT_RE.match, output.splitlines())
        if m
    ]


def _call(step: int, key: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments, call_id=f"demo-{step}-{key}")


def _new_task(memory: dict[str, str], number: int) -> str:
    block = task_group_block(memory)
    task = block[block.index("## Task 1: ") :]
    return task.replace("## Task 1: ", f"## Task {number}: ", 1).replace(
        "[Task 1]", f"[Task {number}]"
    )


def demo_phase_two_agent(path: str, body: JSONDict) -> AgentTurn:
    talk = _conversation(path, body)
    done = {call_id.split("-")[1] for call_id in talk.outputs if call_id.startswith("demo-")}
    out = talk.outputs
    selection = _selection(talk.prompt)
    if not (selection.added or selection.removed or selection.retained):
        return AgentTurn(text="Nothing worth saving: no rollout was selected.")
    if "1" not in done:
        return AgentTurn(_look_around(selection))
    if "2" not in done:
        calls = _read_and_forget(selection, out)
        if calls:
            return AgentTurn(calls)
    memories = _not_rejected(_read_memories(selection, out), talk.prompt)
    groups = sorted({m.get("task_group") or m["rollout_id"] for m in memories})
    if "3" not in done and groups:
        return AgentTurn(
            [
                _call(3, f"g{k}", "search", query=f"# Task Group: {g}", path="MEMORY.md")
                for k, g in enumerate(groups)
            ]
        )
    if "4" not in done and groups:
        calls = _read_groups(groups, out)
        if calls:
            return AgentTurn(calls)
    if "5" not in done and memories:
        return AgentTurn(_edits(groups, memories, out))
    edits = [c for c in talk.calls.values() if c[0] not in ("search", "read_file", "list_dir")]
    if not edits:
        return AgentTurn(text="Nothing worth saving: the memory already holds all of it.")
    return AgentTurn(
        text=f"Memory updated: {len(memories)} new task(s) in {len(groups)} group(s), "
        f"{len(selection.removed)} removed rollout(s) forgotten, {len(edits)} edit(s)."
    )


def _look_around(selection: _Selection) -> list[ToolCall]:
    """Round 1: find each added rollout's raw memory, each removed or retained rollout's
    citations, the handbook's tail, the summary's index and the skills."""
    calls = [
        _call(1, f"a{i}", "search", query=f"rollout_id: {rid}", path="raw_memories.md")
        for i, (rid, _) in enumerate(selection.added)
    ]
    calls += [
        _call(1, f"r{i}", "search", query=f"rollout_id={rid}", path="MEMORY.md")
        for i, (rid, _) in enumerate(selection.removed)
    ]
    calls += [
        _call(1, f"t{i}", "search", query=f"rollout_id={rid}", path="MEMORY.md")
        for i, (rid, _) in enumerate(selection.retained[:_RETAINED_CHECKED])
    ]
    calls += [
        _call(1, "tail", "read_file", path="MEMORY.md", start_line=-3, end_line=None),
        _call(1, "sum", "search", query="## What's in Memory", path="memory_summary.md"),
        _call(1, "skills", "list_dir", path="skills"),
    ]
    return calls


def _read_and_forget(selection: _Selection, out: dict[str, str]) -> list[ToolCall]:
    """Round 2: read each added rollout's raw memory, drop the removed rollouts'
    citations, and point a retained rollout's citations at its summary's new name."""
    calls = []
    for i, _ in enumerate(selection.added):
        for line, _text in _hits(out.get(f"demo-1-a{i}", ""))[:1]:
            calls.append(
                _call(
                    2,
                    f"a{i}",
                    "read_file",
                    path="raw_memories.md",
                    start_line=line,
                    end_line=line + 80,
                )
            )
    for i, (rid, _) in enumerate(selection.removed):
        for j, (_line, text) in enumerate(_hits(out.get(f"demo-1-r{i}", ""))):
            if text.lstrip().startswith("- ") and f"rollout_id={rid}" in text:
                calls.append(
                    _call(
                        2, f"r{i}x{j}", "replace_in_file", path="MEMORY.md", old=text + "\n", new=""
                    )
                )
    # A retained rollout whose summary file was written again under another name:
    # its citations follow the new name.
    for i, (rid, file) in enumerate(selection.retained[:_RETAINED_CHECKED]):
        for j, (_line, text) in enumerate(_hits(out.get(f"demo-1-t{i}", ""))):
            cited = re.search(r"rollout_summaries/\S+?\.md", text)
            if f"rollout_id={rid}" in text and cited and cited.group(0) != file:
                new = text.replace(cited.group(0), file)
                calls.append(
                    _call(
                        2,
                        f"t{i}x{j}",
                        "replace_in_file",
                        path="MEMORY.md",
                        old=text + "\n",
                        new=new + "\n",
                    )
                )
    return calls


def _not_rejected(memories: list[dict[str, str]], prompt: str) -> list[dict[str, str]]:
    """The memories whose task group people have not rejected before."""
    rejected = [
        " ".join(r.split()).casefold() for r in prompts.extract_tagged(prompts.REJECTED_TAG, prompt)
    ]
    return [
        m
        for m in memories
        if not any(r and r in " ".join(task_group_block(m).split()).casefold() for r in rejected)
    ]


def _read_groups(groups: list[str], out: dict[str, str]) -> list[ToolCall]:
    """Round 4: read the task groups the new memories belong to, where they exist."""
    calls = []
    for k, group in enumerate(groups):
        for line, text in _hits(out.get(f"demo-3-g{k}", "")):
            if text.strip() == f"# Task Group: {group}":
                read = {"path": "MEMORY.md", "start_line": line, "end_line": line + 60}
                calls.append(_call(4, f"g{k}", "read_file", **read))
                break
    return calls


def _read_memories(selection: _Selection, out: dict[str, str]) -> list[dict[str, str]]:
    memories: list[dict[str, str]] = []
    for i, (rid, _) in enumerate(selection.added):
        lines = _unnumbered(out.get(f"demo-2-a{i}", ""))
        if not lines or lines[0] != f"rollout_id: {rid}":
            continue
        end = next((n for n in range(1, len(lines)) if lines[n].startswith("rollout_id: ")), None)
        found = read_raw_memories("\n".join(lines[:end]) + "\n")
        memories.extend(m for m in found if m["rollout_id"] == rid)
    return memories


def _edits(
    groups: list[str], memories: list[dict[str, str]], out: dict[str, str]
) -> list[ToolCall]:
    calls: list[ToolCall] = []
    new_blocks: list[str] = []
    for k, group in enumerate(groups):
        mine = [m for m in memories if (m.get("task_group") or m["rollout_id"]) == group]
        lines = _unnumbered(out.get(f"demo-4-g{k}", ""))
        if len(lines) >= 3 and lines[2].startswith("scope:"):
            # An existing group: the new tasks go first under its scope line.
            body = []
            for line in lines[1:]:
                if line.startswith("# Task Group:"):
                    break
                body.append(line)
            numbers = [
                int(m.group(1)) for line in body if (m := re.match(r"^## Task (\d+):", line))
            ]
            first = max(numbers, default=0) + 1
            tasks = "\n".join(
                _new_task(m, first + n).rstrip("\n") + "\n" for n, m in enumerate(mine)
            )
            old = "\n".join(lines[:3]) + "\n"
            calls.append(
                _call(
                    5, f"g{k}", "replace_in_file", path="MEMORY.md", old=old, new=old + "\n" + tasks
                )
            )
        else:
            block = task_group_block(mine[0])
            for n, memory in enumerate(mine[1:], 2):
                block = block.rstrip("\n") + "\n\n" + _new_task(memory, n)
            new_blocks.append(block.rstrip("\n") + "\n")
    tail = out.get("demo-1-tail", "")
    if new_blocks:
        if tail.startswith("error:"):  # no MEMORY.md yet
            calls.append(
                _call(5, "new", "write_file", path="MEMORY.md", content="\n".join(new_blocks))
            )
        else:
            last = _unnumbered(tail)[-1:] or [""]
            added = "\n".join(["", *"\n".join(new_blocks).rstrip("\n").split("\n")])
            patch = (
                "*** Begin Patch\n*** Update File: MEMORY.md\n@@\n"
                + f" {last[0]}\n"
                + "".join(f"+{line}\n" for line in added.split("\n"))
                + "*** End of File\n*** End Patch"
            )
            calls.append(_call(5, "append", "apply_patch", patch=patch))
    summary_hits = _hits(out.get("demo-1-sum", ""))
    if summary_hits:
        index = "".join(
            f"- {m.get('task_group') or m['rollout_id']}: {m.get('keywords') or ''}\n"
            f"  - desc: {m.get('description') or ''}; see {m['rollout_summary_file']}\n"
            for m in memories
        )
        calls.append(
            _call(
                5,
                "sum",
                "replace_in_file",
                path="memory_summary.md",
                old="## What's in Memory\n",
                new=f"## What's in Memory\n\n{index}",
            )
        )
    elif out.get("demo-1-sum", "").startswith("error:"):
        calls.append(
            _call(5, "sum", "write_file", path="memory_summary.md", content=demo_summary(memories))
        )
    existing = out.get("demo-1-skills", "")
    for group in groups:
        mine = [m for m in memories if (m.get("task_group") or m["rollout_id"]) == group]
        name = slug_from(content_words(group)) if content_words(group) else "procedure"
        if len(mine) >= 3 and f"skills/{name}/" not in existing:
            steps = "\n".join(
                f"{n}. {m.get('description') or m['rollout_id']} (see {m['rollout_summary_file']})"
                for n, m in enumerate(mine, 1)
            )
            content = (
                f"---\nname: {name}\ndescription: How this user's {group} tasks are done; "
                f"distilled from {len(mine)} rollouts.\n---\n\n# {group}\n\n"
                f"Done {len(mine)} times. What those runs did, newest first:\n\n{steps}\n"
            )
            calls.append(
                _call(
                    5, f"skill{name}", "write_file", path=f"skills/{name}/SKILL.md", content=content
                )
            )
    return calls or [_call(5, "noop", "list_dir", path=".")]
