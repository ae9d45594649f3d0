"""Rollout summaries (``rollout_summaries/<rollout_id>_<slug>.md``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from .text import read_header_block

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,79}$")


SUMMARY_HEADERS = ("session_id", "updated_at", "rollout_path", "terminal_state")


@dataclass
class RolloutSummary:
    headers: dict[str, str]
    body: str
    rollout_id: str
    slug: str
    problems: list[str]


def parse_rollout_summary(
    filename: str, text: str, known_ids: Iterable[str] = ()
) -> RolloutSummary:
    """Parse ``<rollout_id>_<slug>.md``. Ids and slugs may both contain ``_``, so the id
    comes from the ``rollout_path`` header, else from a known rollout id that prefixes
    the name, else from the first underscore."""
    headers, body = read_header_block(text, SUMMARY_HEADERS)
    stem = filename[:-3] if filename.endswith(".md") else filename
    rollout_id = ""
    rollout_path = headers.get("rollout_path", "")
    if rollout_path:
        candidate = _path_name(rollout_path)
        if candidate.endswith(".jsonl"):
            candidate = candidate[: -len(".jsonl")]
        if stem.startswith(candidate + "_"):
            rollout_id = candidate
    if not rollout_id:
        prefixes = sorted((i for i in known_ids if stem.startswith(i + "_")), key=len)
        rollout_id = prefixes[-1] if prefixes else stem.partition("_")[0]
    slug = stem[len(rollout_id) + 1 :]
    problems = []
    if not text.strip():
        problems.append("empty file")
    elif not headers:
        problems.append("no header lines (session_id, updated_at, rollout_path, terminal_state)")
    return RolloutSummary(headers, body, rollout_id, slug, problems)


def _path_name(path: str) -> str:
    """``PurePosixPath(path).name``, without a path object for a plain path."""
    if path.endswith("/") or "//" in path or "/." in path or path.startswith("."):
        return PurePosixPath(path).name
    return path.rpartition("/")[2]


def dump_rollout_summary(
    *, session_id: str, updated_at: str, rollout_path: str, terminal_state: str, body: str
) -> str:
    return (
        f"session_id: {session_id}\n"
        f"updated_at: {updated_at}\n"
        f"rollout_path: {rollout_path}\n"
        f"terminal_state: {terminal_state}\n\n"
        f"{body.rstrip()}\n"
    )


def normalize_slug(value: str) -> str | None:
    """The SDK's slug rule: strip, drop one trailing ``.md``, then validate."""
    slug = value.strip()
    if slug.endswith(".md"):
        slug = slug[: -len(".md")]
    return slug if SLUG_RE.fullmatch(slug) else None
