"""Phase one: one rollout in, one raw memory and one rollout summary out.

``render_rollout`` turns a parsed rollout into the transcript the model reads (only the
items the SDK keeps, the terminal metadata first, cut to a token budget);
``run_phase_one`` asks for the three fields and applies the SDK's rules to the answer;
``phase_one_files`` writes them with the SDK's exact header lines and file names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from generation import prompts, tree
from generation.llm import ModelCall, PermanentModelError, Usage

PHASE_ONE_SCHEMA_NAME = "rollout_memory"
PHASE_ONE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "rollout_slug": {"type": "string"},
        "rollout_summary": {"type": "string"},
        "raw_memory": {"type": "string"},
    },
    "required": ["rollout_slug", "rollout_summary", "raw_memory"],
    "additionalProperties": False,
}
FIELDS = ("rollout_slug", "rollout_summary", "raw_memory")
MAX_ROLLOUT_TOKENS = 150_000

# What the SDK writes into a rollout (agents/sandbox/memory/rollouts.py); re-checked here
# because a rollout on disk may come from elsewhere.
MESSAGE_ROLES = frozenset({"user", "assistant", "tool"})
DROPPED_ROLES = frozenset({"system", "developer"})
DROPPED_TYPES = frozenset({"reasoning", "compaction", "image_generation_call"})
TOOL_TYPES = frozenset(
    {
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "shell_call",
        "shell_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "computer_call",
        "computer_call_output",
        "mcp_call",
        "mcp_approval_request",
        "mcp_approval_response",
        "web_search_call",
        "tool_search_call",
        "tool_search_output",
        "program",
        "program_output",
    }
)
_HEADER_KEYS = ("type", "role", "id", "status", "name", "call_id")


# --- rendering -------------------------------------------------------------------------

# The SDK's counting (agents/sandbox/util/token_truncation.py): a token is 4 UTF-8
# bytes, rounded up; a rollout over the budget keeps as many bytes of its head and of its
# tail as fit around a "…N tokens truncated…" marker, cut on character boundaries.
BYTES_PER_TOKEN = 4


@dataclass
class RenderedRollout:
    text: str  # the transcript as the model reads it: whole, or the SDK's head + marker + tail
    original_tokens: int
    kept_tokens: int
    truncated: bool
    original_chars: int = 0


def approx_tokens(byte_count: int) -> int:
    """Tokens as the SDK counts them: UTF-8 bytes / 4, rounded up."""
    return -(-byte_count // BYTES_PER_TOKEN) if byte_count > 0 else 0


def count_tokens(text: str) -> int:
    return approx_tokens(len(_utf8(text)))


def truncation_marker(tokens: int) -> str:
    return f"\u2026{tokens} tokens truncated\u2026"


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate from a JSON escape has no UTF-8 form: counted (and sent) as
        # U+FFFD, as the client would send it.
        return _SURROGATE_RE.sub("\ufffd", text).encode("utf-8")


class _HeadAndTail:
    """Takes a text piece by piece and keeps only what a cut to ``budget`` bytes can
    use: its first ``budget`` bytes and its last ``budget`` bytes, so memory stays
    bounded however long the text is."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.head = bytearray()
        self.tail = bytearray()
        self.size = 0
        self.chars = 0

    def add(self, piece: str) -> None:
        if not piece:
            return
        data = _utf8(piece)
        self.size += len(data)
        self.chars += len(piece)
        if len(self.head) < self.budget:
            self.head += data[: self.budget - len(self.head)]
        self.tail += data[-self.budget :] if self.budget else b""
        if len(self.tail) > 2 * self.budget:
            del self.tail[: len(self.tail) - self.budget]

    def result(self, max_tokens: int) -> RenderedRollout:
        original = approx_tokens(self.size)
        if self.size <= self.budget:  # the head holds the whole text
            text = self.head.decode("utf-8")
            return RenderedRollout(text, original, original, False, self.chars)
        # As the SDK: the marker sized for the whole text decides the room, the marker
        # sent states what was removed.
        room = self.budget - len(truncation_marker(original).encode("utf-8"))
        if room < 0:
            text = (
                truncation_marker(original)
                .encode("utf-8")[: self.budget]
                .decode("utf-8", errors="ignore")
            )
            return RenderedRollout(text, original, count_tokens(text), True, self.chars)
        left, right = room // 2, room - room // 2
        head = bytes(self.head[:left]).decode("utf-8", errors="ignore")  # whole characters
        start = len(self.tail) - right  # the tail buffer ends where the text ends
        while start < len(self.tail) and (self.tail[start] & 0xC0) == 0x80:
            start += 1
        tail = bytes(self.tail[start:]).decode("utf-8")
        removed = self.size - len(head.encode("utf-8")) - (len(self.tail) - start)
        text = head + truncation_marker(approx_tokens(removed)) + tail
        return RenderedRollout(text, original, count_tokens(text), True, self.chars)


@dataclass(frozen=True)
class RolloutFacts:
    """What phase one needs to know of a rollout besides its transcript: its segments'
    terminal states and the last segment's timestamp and metadata."""

    states: tuple[str, ...]
    last_updated_at: str
    last_terminal_metadata: dict[str, Any]

    @property
    def count(self) -> int:
        return len(self.states)


Source = tree.ParsedRollout | bytes


def _segments(source: Source) -> Iterator[tree.Segment]:
    if isinstance(source, tree.ParsedRollout):
        yield from source.segments
    else:
        yield from (s for s in tree.iter_segments(source) if isinstance(s, tree.Segment))


def rollout_facts(source: Source) -> RolloutFacts:
    """The facts of a parsed rollout, or of a rollout file read one segment at a time
    (nothing but the last segment's metadata is kept)."""
    states: list[str] = []
    updated_at, metadata = "", {}
    for segment in _segments(source):
        states.append(segment.terminal_state)
        updated_at, metadata = segment.updated_at, segment.terminal_metadata
    return RolloutFacts(tuple(states), updated_at, metadata)


def keeps_item(item: Any) -> bool:
    """The SDK's filter: user/assistant/tool messages and tool items; never system or
    developer messages, reasoning, compaction or generated images."""
    if not isinstance(item, dict):
        return False
    role = item.get("role")
    if role in DROPPED_ROLES:
        return False
    if role in MESSAGE_ROLES:
        return True
    return item.get("type") in TOOL_TYPES  # so never DROPPED_TYPES


def render_rollout(source: Source, *, max_tokens: int = MAX_ROLLOUT_TOKENS) -> RenderedRollout:
    """The transcript the model reads, cut as the SDK cuts a rollout: over
    ``max_tokens`` (4 bytes a token), its head and its tail around a marker. ``source``
    is a parsed rollout or the rollout file's bytes; from bytes the transcript is
    rendered one item at a time and only the bytes a cut can keep are held."""
    return _render(source, rollout_facts(source), max_tokens)


def _render(source: Source, facts: RolloutFacts, max_tokens: int) -> RenderedRollout:
    cutter = _HeadAndTail(max(0, max_tokens) * BYTES_PER_TOKEN)
    for piece in iter_rendered(source, facts):
        cutter.add(piece)
    return cutter.result(max_tokens)


def iter_rendered(source: Source, facts: RolloutFacts | None = None) -> Iterator[str]:
    """The whole transcript, in pieces: the metadata, then every segment's items."""
    facts = facts or rollout_facts(source)
    yield render_metadata(facts)
    for number, segment in enumerate(_segments(source), 1):
        yield "\n\n"
        yield from _iter_segment(segment, number, facts.count)
    yield "\n"


def render_metadata(source: Source | RolloutFacts) -> str:
    facts = source if isinstance(source, RolloutFacts) else rollout_facts(source)
    count = facts.count
    lines = [f"Run segments: {count}"]
    if count > 1:
        states = ", ".join(f"{i}: {s}" for i, s in enumerate(facts.states, 1))
        lines.append(f"Terminal state of each segment: {states}")
    label = "Terminal metadata of the last segment" if count > 1 else "Terminal metadata"
    metadata = facts.last_terminal_metadata
    lines.append(f"{label}: {json.dumps(metadata, ensure_ascii=False, sort_keys=True)}")
    return "\n".join(lines)


def _iter_segment(segment: tree.Segment, number: int, total: int) -> Iterator[str]:
    yield (
        f"=== Segment {number} of {total} (updated_at {segment.updated_at or 'unknown'}, "
        f"terminal_state {segment.terminal_state}) ==="
    )
    for item in (*segment.input, *segment.generated_items):
        if keeps_item(item):
            yield "\n\n"
            yield render_item(item)
    if segment.interruptions:
        pending = "\n".join(_json(i) for i in segment.interruptions)
        yield f"\n\n[interruptions: waiting for approval]\n{pending}"
    if segment.has_final_output_key and segment.final_output is not None:
        output = segment.final_output
        yield f"\n\n[final_output]\n{output if isinstance(output, str) else _json(output)}"


def render_item(item: dict[str, Any]) -> str:
    role, kind = item.get("role"), item.get("type")
    if role in MESSAGE_ROLES and kind in (None, "message"):
        return f"[{role}]\n{_message_body(item.get('content'))}"
    label = [str(kind or role or "item")]
    if isinstance(item.get("name"), str):
        label.append(item["name"])
    if item.get("call_id"):
        label.append(f"call_id={item['call_id']}")
    lines = [f"[{' '.join(label)}]"]
    for key, value in item.items():
        if key in _HEADER_KEYS or value is None:
            continue
        if isinstance(value, str):
            lines.append(f"{key}:\n{value}" if "\n" in value else f"{key}: {value}")
        else:
            lines.append(f"{key}: {_json(value)}")
    return "\n".join(lines)


def _message_body(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return _json(content)
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            parts.append(f"(refused) {part['refusal']}")
        elif isinstance(part, dict) and part.get("type") == "input_image":
            parts.append("[image]")
        elif isinstance(part, dict) and part.get("type") == "input_file":
            parts.append(f"[file {part.get('filename') or ''}]".replace(" ]", "]"))
        else:
            parts.append(_json(part))
    return "\n".join(parts)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def cut_note(rendered: RenderedRollout, max_tokens: int = MAX_ROLLOUT_TOKENS) -> str:
    """What the prompt says before a cut transcript (the SDK puts such a note in front
    of a cut rollout too); empty for a whole one."""
    if not rendered.truncated:
        return ""
    return (
        f"The transcript below is cut: it is {rendered.original_tokens} tokens "
        f"({rendered.original_chars} characters), over the {max_tokens}-token budget, so "
        f"only its beginning and its end are shown ({rendered.kept_tokens} tokens), around "
        "a marker saying how many tokens are missing. Do not assume it is complete."
    )


# --- the model call --------------------------------------------------------------------


@dataclass
class PhaseOneResult:
    status: Literal["memory", "nothing"]
    slug: str
    summary: str
    raw_memory: str
    usage: Usage
    rendered: RenderedRollout
    facts: RolloutFacts | None = None


def sdk_phase_one_prompts(data: bytes, extra_prompt: str = "") -> tuple[str, str]:
    """The SDK's own phase-one instructions and user message for a rollout file, rendered
    by the installed openai-agents package (the ``sdk`` prompt set). The SDK reads the
    whole file and parses every line, so this does not keep memory bounded as memoryui's
    own rendering does."""
    from agents.sandbox.memory.phase_one import render_phase_one_prompt  # noqa: PLC0415 (deferred: the SDK loads when its prompt is rendered)
    from agents.sandbox.memory.prompts import render_rollout_extraction_prompt  # noqa: PLC0415 (deferred: the SDK loads when its prompt is rendered)

    try:
        prompt = render_phase_one_prompt(rollout_contents=data.decode("utf-8", errors="replace"))
    except ValueError as exc:  # a line the SDK cannot parse
        reason = f"the SDK's phase-one prompt refuses this rollout: {exc}"
        raise PermanentModelError(reason) from None
    return render_rollout_extraction_prompt(extra_prompt=extra_prompt or None), prompt


def run_phase_one(
    parsed: Source,
    *,
    call: ModelCall,
    extra_prompt: str = "",
    max_tokens: int = MAX_ROLLOUT_TOKENS,
    prompt_set: str = "memoryui",
) -> PhaseOneResult:
    """Ask the model for the rollout's slug, summary and raw memory. All three empty
    means nothing worth remembering; raises PermanentModelError for a partly empty
    answer or an invalid slug (the SDK's rules). ``prompt_set="sdk"`` sends the SDK's
    own prompts instead of memoryui's (``parsed`` must then be the file's bytes)."""
    facts = rollout_facts(parsed)
    if not facts.count:
        raise PermanentModelError("the rollout has no readable run segment to send")
    if prompt_set == "sdk" and isinstance(parsed, bytes):
        rendered = RenderedRollout("", 0, 0, False)
        instructions, prompt = sdk_phase_one_prompts(parsed, extra_prompt)
    else:
        rendered = _render(parsed, facts, max_tokens)
        instructions = prompts.phase_one_instructions(extra_prompt)
        prompt = prompts.phase_one_prompt(rendered.text, cut_note(rendered, max_tokens))
    output, usage = call(instructions, prompt, PHASE_ONE_SCHEMA_NAME, PHASE_ONE_SCHEMA)
    values = {field: output.get(field) for field in FIELDS}
    if any(not isinstance(v, str) for v in values.values()):
        raise PermanentModelError("the answer lacks one of " + ", ".join(FIELDS), usage=usage)
    slug, summary, raw_memory = (str(values[f]) for f in FIELDS)
    empty = [f for f in FIELDS if not str(values[f]).strip()]
    if len(empty) == len(FIELDS):
        return PhaseOneResult("nothing", "", "", "", usage, rendered, facts)
    if empty:
        raise PermanentModelError(
            f"partly empty answer: {', '.join(empty)} empty while the rest is filled in",
            usage=usage,
        )
    normalized = tree.normalize_slug(slug)
    if normalized is None:
        raise PermanentModelError(
            f"invalid rollout slug {slug.strip()[:100]!r}: it must be 1-80 characters of "
            "a-z, 0-9, '-' or '_', starting with a letter or digit",
            usage=usage,
        )
    return PhaseOneResult("memory", normalized, summary, raw_memory, usage, rendered, facts)


# --- the files -------------------------------------------------------------------------


def summary_file_name(rollout_id: str, slug: str) -> str:
    """The ``rollout_summary_file`` header value, relative to the memories dir."""
    return f"rollout_summaries/{rollout_id}_{slug}.md"


def phase_one_files(
    *,
    rollout_id: str,
    result: PhaseOneResult,
    parsed: Source | None = None,
    rollout_path: str,
    session_id: str,
) -> dict[str, str]:
    """The raw memory and the rollout summary, by path relative to the memories dir;
    empty when there is nothing to remember. Header values come from the last segment,
    as the SDK does."""
    if result.status == "nothing":
        return {}
    if not tree.ROLLOUT_ID_RE.fullmatch(rollout_id):
        raise ValueError(f"invalid rollout id for memory: {rollout_id!r}")
    facts = result.facts if parsed is None and result.facts else None
    if facts is None:
        facts = rollout_facts(parsed if parsed is not None else tree.ParsedRollout())
    updated_at = str(facts.last_updated_at or "unknown")
    state = facts.last_terminal_metadata.get("terminal_state")
    terminal_state = str(state or "unknown")
    summary_file = summary_file_name(rollout_id, result.slug)
    return {
        f"raw_memories/{rollout_id}.md": tree.dump_raw_memory(
            rollout_id=rollout_id,
            updated_at=updated_at,
            rollout_path=rollout_path,
            rollout_summary_file=summary_file,
            terminal_state=terminal_state,
            body=result.raw_memory,
        ),
        summary_file: tree.dump_rollout_summary(
            session_id=session_id,
            updated_at=updated_at,
            rollout_path=rollout_path,
            terminal_state=terminal_state,
            body=result.summary,
        ),
    }
