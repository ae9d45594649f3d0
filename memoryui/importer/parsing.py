"""Parsing the files found new or changed into their rows: rollouts, raw memories,
rollout summaries and the search text of each, and the problems each file has.

The rows are tuples in column order, written with the bulk loader (``memoryui.bulk``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from generation import tree
from generation.kinds import FileKind

from .. import usage
from ..bulk import CHUNK, chunks, insert_many, update_many
from ..models import EPOCH, RawMemory, Rollout, RolloutSummary, SearchDocument
from .reading import Item, file_name


class KnownIds:
    """A layout's rollout ids, stored or parsed in this import: ids and slugs may both
    hold "_", and these settle how a rollout summary's file name splits."""

    def __init__(self) -> None:
        self.parsed: dict[int, set[str]] = {}
        self.ids: dict[int, set[str]] = {}

    def add(self, layout_id: int, rollout_id: str) -> None:
        self.parsed.setdefault(layout_id, set()).add(rollout_id)
        if layout_id in self.ids:
            self.ids[layout_id].add(rollout_id)

    def of(self, layout_id: int) -> set[str]:
        ids = self.ids.get(layout_id)
        if ids is None:
            stored = Rollout.objects.filter(layout_id=layout_id).values_list(
                "rollout_id", flat=True
            )
            ids = self.ids[layout_id] = set(stored) | self.parsed.get(layout_id, set())
        return ids


@dataclass
class ParsedRows:
    """Rows parsed from the new and changed files, keyed by the file's path."""

    rollouts: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    raw_memories: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    summaries: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    documents: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # Rollouts that read memory: path -> (reads, their segments' ends) (``memoryui.usage``).
    reads: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = field(default_factory=dict)

    DOCUMENT_COLUMNS = ["layout_id", "rollout_id", "kind", "body"]
    ROLLOUT_COLUMNS = [
        "layout_id",
        "rollout_id",
        "segment_count",
        "item_count",
        "updated_at_raw",
        "updated_at",
        "updated_day",
        "sort_at",
        "terminal_state",
        "title",
    ]
    RAW_COLUMNS = [
        "layout_id",
        "rollout_id",
        "updated_at_raw",
        "rollout_path",
        "rollout_summary_file",
        "terminal_state",
    ]
    SUMMARY_COLUMNS = [
        "layout_id",
        "rollout_id",
        "slug",
        "session_id",
        "updated_at_raw",
        "terminal_state",
    ]

    @classmethod
    def build(cls, items: Sequence[Item], known: KnownIds) -> ParsedRows:
        parsed = cls()
        summaries: list[Item] = []
        adapt_datetime = connection.ops.adapt_datetimefield_value
        epoch = adapt_datetime(EPOCH)
        for item in items:
            if item.data is None:
                continue
            notes: list[str] = []
            kind = item.kind
            if kind == FileKind.ROLLOUT and item.layout_id is not None:
                rollout = tree.parse_rollout(item.data)
                notes.extend(rollout.problems)
                rollout_id = file_name(item.path).removesuffix(".jsonl")
                updated = _parse_datetime(rollout.updated_at)
                updated_value = adapt_datetime(updated)  # ~3 us: once, for two columns
                parsed.rollouts[item.path] = (
                    item.layout_id,
                    rollout_id,
                    len(rollout.segments),
                    rollout.item_count,
                    _clean(rollout.updated_at[:64]),
                    updated_value,
                    connection.ops.adapt_datefield_value(
                        updated.astimezone(UTC).date() if updated else None
                    ),
                    updated_value if updated else epoch,
                    _clean(rollout.terminal_state[:32]),
                    _clean(rollout.title),
                )
                parsed.documents[item.path] = (
                    item.layout_id,
                    rollout_id,
                    SearchDocument.Kind.TRANSCRIPT,
                    tree.rollout_search_text(rollout),
                )
                if item.memories_dir is not None:
                    reads, ends = usage.find_reads(rollout, item.memories_dir, _parse_datetime)
                    if reads:
                        parsed.reads[item.path] = (reads, ends)
            elif kind == FileKind.RAW_MEMORY and item.layout_id is not None:
                text, bad = tree.decode_text(item.data)
                notes.append(bad or "")
                raw = tree.parse_raw_memory(text)
                notes.extend(raw.problems)
                h = raw.headers
                rollout_id = raw.rollout_id or file_name(item.path).removesuffix(".md")
                parsed.raw_memories[item.path] = (
                    item.layout_id,
                    _clean(rollout_id[:128]),
                    _clean(h.get("updated_at", "")[:64]),
                    _clean(h.get("rollout_path", "")[:1024]),
                    _clean(h.get("rollout_summary_file", "")[:1024]),
                    _clean(h.get("terminal_state", "")[:32]),
                )
                parsed.documents[item.path] = (
                    item.layout_id,
                    _clean(rollout_id[:128]),
                    SearchDocument.Kind.RAW_MEMORY,
                    _clean(raw.body[: tree.SEARCH_TEXT_LIMIT]),
                )
            elif kind == FileKind.ROLLOUT_SUMMARY and item.layout_id is not None:
                summaries.append(item)
                continue
            elif kind in (
                FileKind.MEMORY_INDEX,
                FileKind.MEMORY_SUMMARY,
                FileKind.SKILL,
                FileKind.RAW_MEMORIES_MERGED,
            ):
                notes.append(tree.utf8_problem(item.data) or "")
            elif kind == FileKind.SELECTION:
                notes.append(tree.parse_selection(item.data).problem or "")
            item.problem = "; ".join(filter(None, [item.problem, *notes]))

        for row in parsed.rollouts.values():
            known.add(row[0], row[1])
        for item in summaries:
            assert item.data is not None and item.layout_id is not None
            text, bad = tree.decode_text(item.data)
            ids = known.of(item.layout_id)
            summary = tree.parse_rollout_summary(file_name(item.path), text, ids)
            item.problem = "; ".join(filter(None, [item.problem, bad, *summary.problems]))
            parsed.summaries[item.path] = (
                item.layout_id,
                _clean(summary.rollout_id[:128]),
                _clean(summary.slug[:128]),
                _clean(summary.headers.get("session_id", "")[:128]),
                _clean(summary.headers.get("updated_at", "")[:64]),
                _clean(summary.headers.get("terminal_state", "")[:32]),
            )
            parsed.documents[item.path] = (
                item.layout_id,
                _clean(summary.rollout_id[:128]),
                SearchDocument.Kind.SUMMARY,
                _clean(summary.body[: tree.SEARCH_TEXT_LIMIT]),
            )
        return parsed

    def write(self, new: list[Item], changed: list[Item]) -> None:
        file_ids = {i.path: i.file_id for i in new + changed if i.file_id is not None}
        changed_ids = [i.file_id for i in changed]
        for model, rows, columns in (
            (Rollout, self.rollouts, self.ROLLOUT_COLUMNS),
            (RawMemory, self.raw_memories, self.RAW_COLUMNS),
            (RolloutSummary, self.summaries, self.SUMMARY_COLUMNS),
            (SearchDocument, self.documents, self.DOCUMENT_COLUMNS),
        ):
            # Re-parsed files keep their row (and whatever points at it); a file that is
            # no longer of this kind loses it.
            existing: dict[int, int] = {}
            for chunk in chunks(changed_ids, CHUNK):
                existing.update(
                    model.objects.filter(file_id__in=chunk).values_list("file_id", "pk")
                )
            inserts, updates = [], []
            for path, row in rows.items():
                file_id = file_ids[path]
                pk = existing.pop(file_id, None)
                if pk is None:
                    inserts.append((file_id, *row))
                else:
                    updates.append((*row, pk))
            for chunk in chunks(list(existing.values()), CHUNK):
                model.objects.filter(pk__in=chunk).delete()
            update_many(model, columns, updates, key="id")
            insert_many(model, ["file_id", *columns], inserts)


def _clean(text: str) -> str:
    """PostgreSQL text cannot hold NUL characters; model output sometimes does."""
    return text.replace("\x00", "")


def _parse_datetime(value: str) -> datetime | None:
    if not value or value == "unknown":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed
