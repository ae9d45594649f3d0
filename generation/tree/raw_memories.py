"""Raw memories (``raw_memories/<rollout_id>.md``): phase one's notes on one rollout,
and ``raw_memories.md``, the selected ones merged."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .text import read_header_block

RAW_MEMORY_HEADERS = (
    "rollout_id",
    "updated_at",
    "rollout_path",
    "rollout_summary_file",
    "terminal_state",
)


@dataclass
class RawMemory:
    headers: dict[str, str]
    body: str
    problems: list[str]

    @property
    def rollout_id(self) -> str:
        return self.headers.get("rollout_id", "")

    @property
    def selectable(self) -> bool:
        """Phase two only considers raw memories with both of these headers."""
        return bool(self.headers.get("rollout_id") and self.headers.get("rollout_summary_file"))


def parse_raw_memory(text: str) -> RawMemory:
    headers, body = read_header_block(text, RAW_MEMORY_HEADERS)
    problems = []
    if not text.strip():
        problems.append("empty file")
    else:
        missing = [k for k in ("rollout_id", "rollout_summary_file") if not headers.get(k)]
        if missing:
            problems.append(
                "no " + " or ".join(f"`{k}:`" for k in missing) + " header; phase two "
                "will never select this raw memory"
            )
    return RawMemory(headers=headers, body=body, problems=problems)


def updated_at_sort_key(updated_at: str) -> tuple[int, str]:
    """Phase two's order: a real timestamp first, compared as a string."""
    value = (updated_at or "").strip()
    if not value or value == "unknown":
        return (0, "")
    return (1, value)


def merge_raw_memories(texts_in_order: Iterable[str]) -> str:
    """``raw_memories.md``: the selected raw memories joined by a blank line."""
    return "\n\n".join(text.rstrip("\n") for text in texts_in_order)


def dump_raw_memory(
    *,
    rollout_id: str,
    updated_at: str,
    rollout_path: str,
    rollout_summary_file: str,
    terminal_state: str,
    body: str,
) -> str:
    return (
        f"rollout_id: {rollout_id}\n"
        f"updated_at: {updated_at}\n"
        f"rollout_path: {rollout_path}\n"
        f"rollout_summary_file: {rollout_summary_file}\n"
        f"terminal_state: {terminal_state}\n\n"
        f"{body.rstrip()}\n"
    )
