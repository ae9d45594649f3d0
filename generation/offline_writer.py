"""What the offline demo model writes for one model call: phase one's rollout summary
and raw memory for a rollout, and phase two's ``MEMORY.md`` and ``memory_summary.md``
from raw memories (the single-call form; ``generation.offline_agent`` is the agent's).

It reads memoryui's own prompts and writes deterministic, plausible output in the SDK's
shapes, so that the whole pipeline runs without a model (``generation.offline_model``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from generation import prompts, tree
from generation.model_server import JSONDict

_STOPWORDS = frozenset(
    "a an and are as at be but by can could do for from have how i if in into is it its "
    "me my no not of on or our please so that the then this to up us we what when where "
    "which with would you your yes ok okay now just also there here let lets let's".split()
)
_ITEM_HEADER_RE = re.compile(r"^\[(?P<label>[a-z_]+)(?: (?P<rest>[^\]\n]*))?\]$")
_SEGMENT_RE = re.compile(r"^=== Segment \d+ of \d+")
_TERMINAL_RE = re.compile(r'"terminal_state": "([a-z_]+)"')
_OUTCOMES = {
    "completed": "success",
    "interrupted": "partial",
    "cancelled": "partial",
    "failed": "fail",
    "max_turns_exceeded": "fail",
    "guardrail_tripped": "fail",
}


@dataclass
class _Transcript:
    request: str = ""
    final_output: str = ""
    tools: list[str] = field(default_factory=list)
    segments: int = 1
    terminal_state: str = "unknown"


def _read_transcript(prompt: str) -> _Transcript:
    rollout = (prompts.extract_tagged(prompts.ROLLOUT_TAG, prompt) or [prompt])[0]
    found = _Transcript()
    if match := re.search(r"^Run segments: (\d+)$", rollout, re.MULTILINE):
        found.segments = int(match.group(1))
    if match := _TERMINAL_RE.search(rollout):
        found.terminal_state = match.group(1)
    label = ""
    lines: list[str] = []
    items: list[tuple[str, str]] = []
    for line in rollout.splitlines():
        header = _ITEM_HEADER_RE.match(line)
        if header or _SEGMENT_RE.match(line):
            items.append((label, "\n".join(lines).strip()))
            label, lines = (header.group("label"), []) if header else ("", [])
            if header and header.group("rest") and header.group("label").endswith("call"):
                name = header.group("rest").split(" ")[0]
                if name and "=" not in name and name not in found.tools:
                    found.tools.append(name)
        else:
            lines.append(line)
    items.append((label, "\n".join(lines).strip()))
    found.request = next((text for kind, text in items if kind == "user" and text), "")
    finals = [text for kind, text in items if kind == "final_output" and text]
    found.final_output = finals[-1] if finals else ""
    return found


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def content_words(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word not in _STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)


_VERBS = frozenset(
    "add analyse analyze build check clean create debug deploy document explain find fix "
    "investigate make migrate move poll remove rename rotate run set summarise summarize test "
    "update upgrade write".split()
)


def _main_sentence(request: str) -> str:
    """The sentence that asks for something: a polite or imperative one, else the first
    with some substance, else the first."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", request) if s.strip()]
    for sentence in sentences:
        first = sentence.lower().split()[0].strip(",:;")
        if first in _VERBS or first == "please":
            return sentence
    return next((s for s in sentences if len(s.split()) >= 5), sentences[0])


_DURABLE_WORDS = frozenset("always never prefer preference rule rules default remember".split())


def _trivial(found: _Transcript, words: list[str]) -> bool:
    """A short question answered without tools and stating no preference: nothing a
    future agent needs (the SDK's fixtures have such a rollout)."""
    return (
        not found.tools
        and "?" in found.request
        and len(content_words(found.request)) < 6
        and not _DURABLE_WORDS & set(content_words(found.request))
    )


def slug_from(words: list[str]) -> str:
    slug = "-".join(words[:5])[:80].strip("-_")
    return slug if tree.SLUG_RE.fullmatch(slug) else "rollout-notes"


def demo_phase_one(prompt: str) -> JSONDict:
    found = _read_transcript(prompt)
    if not found.request:
        return {"rollout_slug": "", "rollout_summary": "", "raw_memory": ""}
    ask = _main_sentence(found.request)
    words = content_words(ask)
    if _trivial(found, words):
        return {"rollout_slug": "", "rollout_summary": "", "raw_memory": ""}
    slug = slug_from(words)
    title = _one_line(ask, 80)
    description = _one_line(ask, 160)
    group = " ".join(words[1:3] if words and words[0] in _VERBS else words[:2]) or "general"
    outcome = _OUTCOMES.get(found.terminal_state, "uncertain")
    if outcome == "success" and not found.final_output:
        outcome = "uncertain"
    keywords = ", ".join([*words[:6], *found.tools])
    tools = ", ".join(found.tools) or "no tools were used"
    failure = (
        f"the run ended with terminal_state={found.terminal_state}; check why before retrying"
        if outcome == "fail"
        else "none recorded"
    )
    answer = (
        f'- final answer: "{_one_line(found.final_output, 200)}"\n' if found.final_output else ""
    )
    summary = (
        f"# {description}\n\n"
        f'Rollout context: the user asked: "{_one_line(found.request, 300)}" '
        f"({found.segments} run segment(s), terminal state {found.terminal_state}).\n\n"
        f"## Task 1: {title}\n\n"
        f"Outcome: {outcome}\n\n"
        f"Key steps:\n\n- tools: {tools}\n{answer}\n"
        f'References:\n\n- [1] user message: "{_one_line(found.request, 500)}"\n'
    )
    raw_memory = (
        "---\n"
        f"description: {description}\n"
        f"task: {slug}\n"
        f"task_group: {group}\n"
        f"task_outcome: {outcome}\n"
        f"keywords: {keywords}\n"
        "---\n\n"
        f"### Task 1: {title}\n\n"
        f"task: {slug}\ntask_group: {group}\ntask_outcome: {outcome}\n\n"
        f'Preference signals:\n- the user asked: "{_one_line(found.request, 200)}"\n\n'
        f"Reusable knowledge:\n- tools used: {tools}\n\n"
        f"Failures and how to do differently:\n- {failure}\n\n"
        f'References:\n- "{_one_line(found.request, 300)}"\n'
    )
    return {"rollout_slug": slug, "rollout_summary": summary, "raw_memory": raw_memory}


_FRONT_MATTER_KEYS = ("description", "task", "task_group", "task_outcome", "keywords")


def read_raw_memories(text: str) -> list[dict[str, str]]:
    """Each raw memory of a ``raw_memories.md``: its header and front matter values,
    and the bullets of its preference signals."""
    memories = []
    for chunk in re.split(r"(?m)^(?=rollout_id: )", text):
        fields = tree.read_headers(chunk, (*tree.RAW_MEMORY_HEADERS, *_FRONT_MATTER_KEYS))
        if not fields.get("rollout_id") or not fields.get("rollout_summary_file"):
            continue
        prefs = re.search(r"^Preference signals:\n((?:- .*\n?)+)", chunk, re.MULTILINE)
        fields["preferences"] = prefs.group(1).strip() if prefs else ""
        memories.append(fields)
    return memories


def task_group_block(memory: dict[str, str]) -> str:
    group = memory.get("task_group") or memory.get("task") or memory["rollout_id"]
    description = memory.get("description") or memory.get("task") or memory["rollout_id"]
    outcome = memory.get("task_outcome") or "uncertain"
    block = (
        f"# Task Group: {group}\n\n"
        f"scope: {memory.get('task') or group}\n\n"
        f"## Task 1: {description.rstrip('.')}, outcome {outcome}\n\n"
        "### rollout_summary_files\n\n"
        f"- {memory['rollout_summary_file']} (rollout_id={memory['rollout_id']}, "
        f"updated_at={memory.get('updated_at') or 'unknown'}, "
        f"terminal_state={memory.get('terminal_state') or 'unknown'})\n\n"
        "### keywords\n\n"
        f"- {memory.get('keywords') or group}\n"
    )
    if memory["preferences"]:
        bullets = "\n".join(f"{line} [Task 1]" for line in memory["preferences"].splitlines())
        block += f"\n## User preferences\n\n{bullets}\n"
    return block


def _heading(text: str) -> str:
    first = text.lstrip("\n").split("\n", 1)[0]
    return " ".join(first.split()).casefold() if first.startswith("#") else ""


def demo_phase_two(prompt: str) -> JSONDict:
    raw = (prompts.extract_tagged(prompts.RAW_MEMORIES_TAG, prompt) or [""])[0]
    pinned = prompts.extract_tagged(prompts.PINNED_TAG, prompt)
    rejected = [
        " ".join(r.split()).casefold() for r in prompts.extract_tagged(prompts.REJECTED_TAG, prompt)
    ]
    memories = read_raw_memories(raw)
    pinned_headings = {_heading(p) for p in pinned} - {""}
    blocks = []
    for memory in memories:
        block = task_group_block(memory)
        flat = " ".join(block.split()).casefold()
        if _heading(block) in pinned_headings or any(r and r in flat for r in rejected):
            continue
        blocks.append(block)
    pieces = [b.rstrip("\n") + "\n" for b in blocks] + [
        p if p.endswith("\n") else p + "\n" for p in pinned if p.strip()
    ]
    memory_md = "\n".join(pieces)
    return {"memory_md": memory_md, "memory_summary": demo_summary(memories)}


def demo_summary(memories: list[dict[str, str]]) -> str:
    groups = sorted({m.get("task_group") or m["rollout_id"] for m in memories})
    preferences = [line for m in memories for line in m["preferences"].splitlines()]
    by_date: dict[str, list[dict[str, str]]] = {}
    for memory in memories:
        updated = memory.get("updated_at") or ""
        date = updated[:10] if updated and updated != "unknown" else "undated"
        by_date.setdefault(date, []).append(memory)
    index = []
    for date in sorted(by_date, reverse=True):
        index.append(f"### {date}\n")
        for m in by_date[date]:
            index.append(
                f"- {m.get('task_group') or m['rollout_id']}: {m.get('keywords') or ''}\n"
                f"  - desc: {m.get('description') or ''}\n"
                f"  - outcome {m.get('task_outcome') or 'uncertain'}; "
                f"see {m['rollout_summary_file']}"
            )
        index.append("")
    return (
        "## User Profile\n\n"
        f"Works with this agent on {len(memories)} remembered task(s) in these areas: "
        f"{', '.join(groups) or 'none yet'}.\n\n"
        "## User preferences\n\n"
        + ("\n".join(preferences) if preferences else "- none recorded yet")
        + "\n\n## General Tips\n\n"
        "- Search MEMORY.md by keyword before exploring the workspace.\n"
        "- Open the rollout summary a task cites before repeating that task.\n\n"
        "## What's in Memory\n\n" + "\n".join(index).rstrip("\n") + "\n"
    )
