"""Memory usage from the rollouts: the reads an import finds (``generation.memory_reads``)
recorded against the ``MEMORY.md`` version the agent had then, and each entry's usage
counted across versions, through unchanged entries and the pairs of changed ones
(``generation.review``). A new entry starts at zero."""

from __future__ import annotations

import bisect
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple, Protocol, overload

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, F, Max, Min, OuterRef
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from generation import memory_entries, memory_md, memory_reads, phase_two, review, tree

from . import bulk, charts, documents, entry_lineage, figures
from .models import (
    Blob,
    EntryRead,
    Layout,
    MemoryRead,
    MemoryVersion,
    Rollout,
    RolloutSummary,
)

# Kept per read: the command that read (what the rollout page shows beside it).
COMMAND_CHARS = 2000


# (updated_at, terminal state) of a run segment: when the run that read ended, and how.
SegmentEnd = tuple[datetime | None, str]


@dataclass(slots=True)
class FoundReads:
    """What an import found in one rollout file: the reads of its items, and for each
    the end of its segment (one tuple a segment, shared by its items). An import holds
    these for every rollout until its versions are recorded (100,000 at 100,000
    rollouts): kept small, no list of every segment."""

    file_id: int
    layout_id: int
    items: tuple[memory_reads.ItemReads, ...]
    ends: tuple[SegmentEnd, ...]


def find_reads(
    rollout: tree.ParsedRollout,
    memories_dir: str,
    parse_datetime: Callable[[str], datetime | None],
) -> tuple[tuple[memory_reads.ItemReads, ...], tuple[SegmentEnd, ...]]:
    """The reads of every segment of a parsed rollout (no database), and the end of
    the segment of each."""
    items: list[memory_reads.ItemReads] = []
    ends: list[SegmentEnd] = []
    for number, segment in enumerate(rollout.segments, 1):
        found = list(
            memory_reads.segment_reads(segment.input, segment.generated_items, number, memories_dir)
        )
        if found:
            end = (parse_datetime(segment.updated_at), sys.intern(segment.terminal_state))
            items += found
            ends += [end] * len(found)
    return tuple(items), tuple(ends)


@dataclass
class _Versions:
    """A layout's MEMORY.md versions, oldest first, to find the one of a time."""

    times: list[datetime] = field(default_factory=list)
    versions: list[tuple[int, str]] = field(default_factory=list)  # (pk, blob sha256)

    def at(self, when: datetime | None) -> tuple[int, str] | None:
        """The latest version made by ``when``; before the first one known, the first
        (the agent can only have had that one or an older text memoryui never saw)."""
        if not self.versions:
            return None
        if when is None:
            return self.versions[-1]
        index = bisect.bisect_right(self.times, when) - 1
        return self.versions[max(index, 0)]


def _versions_of(layout_ids: Iterable[int]) -> dict[int, _Versions]:
    found: dict[int, _Versions] = {}
    rows = (
        MemoryVersion.objects.filter(
            layout_id__in=set(layout_ids), document=MemoryVersion.Document.MEMORY_MD
        )
        .order_by("layout_id", "number")
        .values_list("layout_id", "pk", "blob_id", "created_at")
    )
    for layout_id, pk, blob, created in rows:
        versions = found.setdefault(layout_id, _Versions())
        versions.times.append(created)
        versions.versions.append((pk, blob))
    return found


# A MEMORY.md up to this size is kept in this process while reads are mapped to it;
# a larger one is read for the import alone (27 MB at 100,000 rollouts).
KEPT_TEXT_BYTES = 4 << 20

# Reads written a batch at a time: their rows (and their entries') are built for one
# batch, not for every read of a large import at once.
_READS_PER_BATCH = 5000


class Found(Protocol):
    """What an import found, gone through as often as needed (``importer.spool``),
    with the file and layout ids of its rollouts."""

    @property
    def file_ids(self) -> Sequence[int]: ...

    @property
    def layout_ids(self) -> Collection[int]: ...

    def __iter__(self) -> Iterator[FoundReads]: ...

    def __len__(self) -> int: ...


def record_reads(found: Found, replaced_file_ids: Iterable[int] = ()) -> int:
    """Write the reads an import found; a rollout file read again (``replaced``)
    loses the reads recorded from its earlier text first. Returns the reads written."""
    replaced = list(replaced_file_ids)
    for start in range(0, len(replaced), 500):
        MemoryRead.objects.filter(rollout__file_id__in=replaced[start : start + 500]).delete()
    if not len(found):
        return 0
    rollout_of: dict[int, int] = bulk.values_by(Rollout, "file_id", "id", found.file_ids)
    versions = _versions_of(found.layout_ids)
    lines_of = _entry_lines(found, rollout_of, versions)

    # Then the rows, a batch at a time, each read of MEMORY.md with the keys of the
    # entries it printed in the version the agent had (found again: a look-up in a
    # short list, where keeping it for every read would hold 100,000 of them).
    adapt = _datetime_adapter()
    batch: list[ReadRow] = []
    hits: list[tuple[str, ...]] = []
    written = 0
    for rollout_reads in found:
        rollout_id = rollout_of.get(rollout_reads.file_id)
        if rollout_id is None:
            continue
        layout_id = rollout_reads.layout_id
        layout_versions = versions.get(layout_id)
        adapted: tuple[Any, Any] | None = None  # (segment end, as the database takes it)
        for item, (when, state) in zip(rollout_reads.items, rollout_reads.ends, strict=True):
            if adapted is None or adapted[0] is not when:  # a segment's items share its end
                adapted = (when, adapt(when))
            for read in item.reads:
                version = keys = None
                if read.kind == memory_reads.MEMORY_MD and layout_versions is not None:
                    version = layout_versions.at(when)
                    if version is not None:
                        keys = memory_entries.entry_hits(read, lines_of[version[1]])
                batch.append(
                    ReadRow(  # by position: a tenth of the loop's time by name
                        layout_id,
                        rollout_id,
                        item.segment,
                        item.index,
                        read.kind,
                        read.path[:1024],
                        read.how,
                        item.command[:COMMAND_CHARS],
                        adapted[1],
                        state[:32],
                        None if version is None else version[0],
                        len(keys) if keys else 0,
                    )
                )
                hits.append(keys or ())
                if len(batch) == _READS_PER_BATCH:
                    _write_reads(batch, hits)
                    written += len(batch)
                    batch, hits = [], []
    if batch:
        _write_reads(batch, hits)
        written += len(batch)
    return written


def _datetime_adapter() -> Callable[[datetime | None], Any]:
    """``adapt_datetimefield_value`` of the connection: on SQLite with time zones on, a
    time with one becomes the same text without Django's checks (a third of its time,
    once for every run segment that read memory)."""
    django_adapt = connection.ops.adapt_datetimefield_value
    if connection.vendor != "sqlite" or not settings.USE_TZ or connection.timezone != UTC:
        return django_adapt

    def adapt(value: datetime | None) -> Any:
        if value is None or value.tzinfo is None:
            return django_adapt(value)
        return str(value.astimezone(UTC).replace(tzinfo=None))

    return adapt


def _entry_lines(
    found: Found, rollout_of: Mapping[int, int], versions: Mapping[int, _Versions]
) -> dict[str, memory_entries.EntryLines]:
    """The entries and lines of each ``MEMORY.md`` text the import's reads had (by its
    sha256), with the lines their searches printed: one pass over the reads for those
    lines, then the texts one at a time. A large text is read for this alone and parsed
    a task group at a time (a 27 MB MEMORY.md at 100,000 rollouts: the per-process
    caches took an import's peak to 785 MB); what is kept of each is its entries'
    first lines and keys, not its text."""
    printed_of: dict[str, set[str]] = {}
    for rollout_reads in found:
        layout_versions = versions.get(rollout_reads.layout_id)
        if layout_versions is None or rollout_reads.file_id not in rollout_of:
            continue
        for item, (when, _) in zip(rollout_reads.items, rollout_reads.ends, strict=True):
            for read in item.reads:
                if read.kind == memory_reads.MEMORY_MD:
                    version = layout_versions.at(when)
                    if version is not None:
                        printed_of.setdefault(version[1], set()).update(read.printed)
    sizes = dict(Blob.objects.filter(pk__in=list(printed_of)).values_list("sha256", "size"))
    lines_of = {}
    for blob, printed in printed_of.items():
        # A text small enough is kept, with its entries' places, for the next import
        # of a workspace whose agents read it (the caches the pages use).
        keep = sizes.get(blob, 0) <= KEPT_TEXT_BYTES
        text = documents.text(blob) if keep else documents.text_once(blob, sizes[blob])
        lines_of[blob] = memory_entries.entry_lines(text, printed, keep=keep)
        del text
        printed.clear()
    return lines_of


def _write_reads(reads: list[ReadRow], hits: list[tuple[str, ...]]) -> None:
    """Insert a batch of reads, then the entries each read of MEMORY.md printed."""
    ids = bulk.insert_with_ids(MemoryRead, list(ReadRow._fields), reads)
    if connection.vendor == "sqlite":
        _copy_entry_reads(ids, hits)
    else:
        _insert_entry_reads(ids, reads, hits)


def _insert_entry_reads(ids: list[int], reads: list[ReadRow], hits: list[tuple[str, ...]]) -> None:
    """The entry reads' rows, each made here from its read's (``COPY`` on PostgreSQL)."""
    bulk.insert_many(
        EntryRead,
        list(EntryRow._fields),
        [
            EntryRow(
                read_id,
                r.layout_id,
                r.version_id,
                key[:1000],
                r.rollout_id,
                r.segment,
                r.read_at,
                r.terminal_state,
            )
            for read_id, r, keys in zip(ids, reads, hits, strict=True)
            if r.version_id is not None
            for key in keys
        ],
    )


def _copy_entry_reads(ids: list[int], hits: list[tuple[str, ...]]) -> None:
    """On SQLite, the entry reads' rows made by the database from their reads' rows
    just written: one statement with each read's id and keys as JSON, where a prepared
    statement took eight values a row from Python (a third more time for the 24,514 of
    the 10,000-rollout tree, bench/README.md). The same rows as
    ``_insert_entry_reads`` (tests/test_bulk_load.py)."""
    per_read = [
        [read_id, [key[:1000] for key in keys]]
        for read_id, keys in zip(ids, hits, strict=True)
        if keys
    ]
    if not per_read:
        return
    qn = connection.ops.quote_name
    columns = ", ".join(qn(c) for c in EntryRow._fields)
    sql = (
        f"INSERT INTO {qn(EntryRead._meta.db_table)} ({columns}) "
        "SELECT r.id, r.layout_id, r.version_id, k.value, r.rollout_id, r.segment, "
        "r.read_at, r.terminal_state "
        f"FROM json_each(%s) AS o CROSS JOIN {qn(MemoryRead._meta.db_table)} AS r "
        "ON r.id = json_extract(o.value, '$[0]') CROSS JOIN json_each(o.value, '$[1]') AS k "
        "WHERE r.version_id IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [json.dumps(per_read)])


class ReadRow(NamedTuple):
    """A ``MemoryRead`` row as record_reads writes it (field names are the columns)."""

    layout_id: int
    rollout_id: int
    segment: int
    item: int
    kind: str
    path: str
    how: str
    command: str
    read_at: Any  # as the database takes it
    terminal_state: str
    version_id: int | None
    entry_count: int


class EntryRow(NamedTuple):
    """An ``EntryRead`` row: one entry a read printed."""

    read_id: int
    layout_id: int
    version_id: int | None
    key: str
    rollout_id: int
    segment: int
    read_at: Any
    terminal_state: str


# --- usage per entry ------------------------------------------------------------------


@dataclass(slots=True)
class EntryUsage:
    """How often agents read one entry (and the entries it was before), or a group of
    entries (a block, a review card's earlier entries): a run that read several of
    them counts once."""

    reads: int = 0
    runs: int = 0
    first_read: datetime | None = None
    last_read: datetime | None = None
    # Runs that read it, per terminal state (completed, failed, interrupted ...).
    states: dict[str, int] = field(default_factory=dict)

    @property
    def read_by_failing_runs(self) -> int:
        return sum(n for state, n in self.states.items() if state in FAILING_STATES)


FAILING_STATES = frozenset(
    {"failed", "interrupted", "cancelled", "max_turns_exceeded", "guardrail_tripped"}
)


# Forms (an entry's key in one version) joined in one query at most: three parameters
# each, under SQLite's limit of 32,766 a statement.
_FORMS_PER_QUERY = 9000


def entry_usage(
    layout: Layout, version: MemoryVersion, keys: Iterable[str] | None = None
) -> dict[str, EntryUsage]:
    """Usage of each entry of ``version`` (a MEMORY.md version), its earlier forms'
    reads included: of the entries ``keys`` alone (their rows found by the index on
    (layout, version, key), in time in proportion to their reads, as a page of cards or
    blocks needs), or of every entry (kept per import with the workspace's figures,
    ``memoryui.figures``)."""
    if keys is None:
        return _totals(layout, version).entries
    return usage_of(layout, version, {key: (key,) for key in keys})


def usage_of(
    layout: Layout, version: MemoryVersion, groups: Mapping[str, Collection[str]]
) -> dict[str, EntryUsage]:
    """The usage of groups of entries of ``version``, by the group's name: each group's
    entries' reads (and their earlier forms'), a run that read several counted once.
    The database adds the rows up: a few rows per group come back, whatever the reads.
    Groups nobody read are left out. Kept until the next import (a page of blocks or
    cards asks for the same groups again)."""
    asked = hashlib.sha256(
        repr(sorted((name, sorted(keys)) for name, keys in groups.items())).encode()
    ).hexdigest()
    return figures.cached(
        layout.workspace,
        f"usage-of:{layout.pk}:{version.pk}:{asked}",
        lambda: _usage_of(layout, version, groups),
    )


def _usage_of(
    layout: Layout, version: MemoryVersion, groups: Mapping[str, Collection[str]]
) -> dict[str, EntryUsage]:
    usage: dict[str, EntryUsage] = {}
    keys = {key for members in groups.values() for key in members}
    if not keys:
        return usage
    oldest = _oldest_read(layout, version)
    if oldest is None:
        return usage
    forms: dict[str, list[tuple[int, str]]] = {}
    for (pk, old), key in entry_lineage.lineage(layout, version, since=oldest, keys=keys).items():
        forms.setdefault(key, []).append((pk, old))
    chunk: list[tuple[int, str, str]] = []
    for name, members in groups.items():
        rows = [(pk, old, name) for key in set(members) for pk, old in forms.get(key, ())]
        if chunk and len(chunk) + len(rows) > _FORMS_PER_QUERY:
            _add_usage(layout, chunk, usage)
            chunk = []
        chunk.extend(rows)
    if chunk:
        _add_usage(layout, chunk, usage)
    return usage


def _oldest_read(layout: Layout, version: MemoryVersion) -> int | None:
    """The number of the oldest version up to ``version`` that agents read."""
    oldest: int | None = (
        MemoryVersion.objects.filter(
            layout=layout,
            document=MemoryVersion.Document.MEMORY_MD,
            number__lte=version.number,
        )
        .filter(Exists(EntryRead.objects.filter(layout=layout, version_id=OuterRef("pk"))))
        .aggregate(oldest=Min("number"))["oldest"]
    )
    return oldest


def _add_usage(
    layout: Layout, forms: list[tuple[int, str, str]], usage: dict[str, EntryUsage]
) -> None:
    """Count the reads of ``forms`` ((version pk, key, group)) into ``usage``, a group
    at a time: every form of a group is in ``forms``. A run ends in one state, so its
    distinct runs per state add up to the group's."""
    qn = connection.ops.quote_name
    table = qn(EntryRead._meta.db_table)
    params: list[Any]
    if connection.vendor == "postgresql":
        # Three arrays: psycopg fills a statement's placeholders in Python, 3.5 ms for
        # the thousand of a page's entries as VALUES.
        forms_sql = "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[])"
        params = [list(column) for column in zip(*forms, strict=True)]
    else:
        forms_sql = "VALUES " + ", ".join(["(%s, %s, %s)"] * len(forms))
        params = [value for form in forms for value in form]
    # A run is (rollout, segment): one number, for a count of distinct runs that both
    # databases take (segments are far fewer than 2**20 a rollout).
    sql = (
        f"WITH f (version_id, old_key, grp) AS ({forms_sql}) "
        "SELECT f.grp, e.terminal_state, COUNT(*), "
        "COUNT(DISTINCT e.rollout_id * 1048576 + e.segment), MIN(e.read_at), MAX(e.read_at) "
        f"FROM {table} e JOIN f ON e.version_id = f.version_id AND e.{qn('key')} = f.old_key "
        "WHERE e.layout_id = %s GROUP BY f.grp, e.terminal_state"
    )
    params.append(layout.pk)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    for name, state, reads, runs, first, last in rows:
        entry = usage.get(name)
        if entry is None:
            entry = usage[name] = EntryUsage()
        _count(entry, state, reads, runs, _when(first), _when(last))


def _count(
    entry: EntryUsage,
    state: str,
    reads: int,
    runs: int,
    first: datetime | None,
    last: datetime | None,
) -> None:
    """Add the reads and runs of one state to ``entry``."""
    entry.reads += reads
    entry.runs += runs
    state = state or "unknown"
    entry.states[state] = entry.states.get(state, 0) + runs
    if first is not None and (entry.first_read is None or first < entry.first_read):
        entry.first_read = first
    if last is not None and (entry.last_read is None or last > entry.last_read):
        entry.last_read = last


def _when(value: Any) -> datetime | None:
    """A ``read_at`` as a raw query gives it: a datetime (PostgreSQL) or SQLite's text
    of one in UTC."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_datetime(str(value))
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


@dataclass
class _Totals:
    """Every entry's usage of one version, kept per import."""

    entries: dict[str, EntryUsage]
    # The non-blank entries (their places in the version's entries), most read first.
    ranked: list[int]


def _totals(layout: Layout, version: MemoryVersion) -> _Totals:
    def compute() -> _Totals:
        if not version.blob_id:
            return _Totals({}, [])
        entries = review.entries(documents.text(version.blob_id))
        per_key = _every_entry(layout, version)

        def rank(i: int) -> tuple[int, int]:
            used = per_key.get(entries[i].key)
            return (-used.reads, -used.runs) if used else (0, 0)

        ranked = sorted((i for i, entry in enumerate(entries) if entry.text.strip()), key=rank)
        return _Totals(per_key, ranked)

    name = f"entry-usage:{layout.pk}:{version.pk}"
    return figures.cached(layout.workspace, name, compute, shared=True)


def _every_entry(layout: Layout, version: MemoryVersion) -> dict[str, EntryUsage]:
    """The usage of every entry of ``version``: the database counts each form's reads
    and distinct runs per state (one pass over the layout's reads, no list of forms
    sent), and the forms are added up here. A run reads one version, so its forms in
    different versions never share a run; an entry that two forms of one version
    became (a merge) is counted by its group, its runs distinct."""
    usage: dict[str, EntryUsage] = {}
    oldest = _oldest_read(layout, version)
    if oldest is None:
        return usage
    forms = entry_lineage.lineage(layout, version, since=oldest)
    per_version = Counter((pk, key) for (pk, _), key in forms.items())
    merged = {key for (_, key), n in per_version.items() if n > 1}
    rows = (
        EntryRead.objects.filter(layout=layout, version_id__in={pk for pk, _ in forms})
        .values("version_id", "key", "terminal_state")
        .annotate(
            n=Count("id"),
            runs=Count(F("rollout_id") * 1048576 + F("segment"), distinct=True),
            first=Min("read_at"),
            last=Max("read_at"),
        )
        .order_by()
        .values_list("version_id", "key", "terminal_state", "n", "runs", "first", "last")
    )
    for version_id, old, state, reads, runs, first, last in rows:
        key = forms.get((version_id, old))
        if key is None or key in merged:
            continue
        entry = usage.get(key)
        if entry is None:
            entry = usage[key] = EntryUsage()
        _count(entry, state, reads, runs, first, last)
    if merged:
        usage.update(_usage_of(layout, version, {key: (key,) for key in merged}))
    return usage


def reads_per_day(layout: Layout) -> dict[date | None, dict[str, int]]:
    """The layout's reads per day and kind (``MemoryRead.Kind``) over the last
    ``charts.MAX_DAYS`` days up to its latest read: what the Usage page charts. Only
    imports write reads: kept until the next one."""

    def compute() -> dict[date | None, dict[str, int]]:
        reads = MemoryRead.objects.filter(layout=layout, read_at__isnull=False)
        latest = reads.aggregate(latest=Max("read_at"))["latest"]
        counts: dict[date | None, dict[str, int]] = {}
        if latest is not None:
            since = latest - timedelta(days=charts.MAX_DAYS)
            per_day = (
                reads.filter(read_at__gte=since)
                .annotate(day=TruncDate("read_at"))
                .values("day", "kind")
                .annotate(n=Count("id"))
            )
            for row in per_day:
                counts.setdefault(row["day"], {})[row["kind"]] = row["n"]
        return counts

    return figures.cached(layout.workspace, f"reads-per-day:{layout.pk}", compute)


def blocks_read(layout: Layout, version: MemoryVersion, which: str) -> tuple[int, ...]:
    """The top-level blocks of ``version`` (by index, in order) that no agent read
    (``never``), or that a failing run read (``failing``): what the MEMORY.md page
    filters by, decided from its entries' usage (a block was read when one of its
    entries was, by a failing run when one of them was). Kept per import."""

    def compute() -> tuple[int, ...]:
        per_key = _totals(layout, version).entries
        found = []
        for index, keys in enumerate(_keys_per_block(version.blob_id)):
            used = [per_key[key] for key in keys if key in per_key]
            if which == "never" and not any(u.reads for u in used):
                found.append(index)
            elif which == "failing" and any(u.read_by_failing_runs for u in used):
                found.append(index)
        return tuple(found)

    # "in-order": a tuple, not the set kept under "blocks-" before (same import's stamp).
    name = f"blocks-in-order-{which}:{layout.pk}:{version.pk}"
    return figures.cached(layout.workspace, name, compute)


def entries_by_reads(layout: Layout, version: MemoryVersion | None) -> Ranked:
    """The non-blank entries of ``version`` with their usage, most read first (what the
    Usage page and the API list, a page at a time)."""
    if version is None or version.blob_id is None:
        return Ranked((), (), {})
    totals = _totals(layout, version)
    return Ranked(review.entries(documents.text(version.blob_id)), totals.ranked, totals.entries)


class Ranked(Sequence[tuple[review.Entry, EntryUsage]]):
    """(entry, usage) pairs in the kept order, made only for the items asked for (a page
    of a MEMORY.md of thousands of entries)."""

    def __init__(
        self,
        entries: Sequence[review.Entry],
        order: Sequence[int],
        used: dict[str, EntryUsage],
    ) -> None:
        self._entries = entries
        self._order = order
        self._used = used

    def __len__(self) -> int:
        return len(self._order)

    def _pair(self, index: int) -> tuple[review.Entry, EntryUsage]:
        entry = self._entries[index]
        return entry, self._used.get(entry.key) or EntryUsage()

    @overload
    def __getitem__(self, item: int) -> tuple[review.Entry, EntryUsage]: ...

    @overload
    def __getitem__(self, item: slice) -> list[tuple[review.Entry, EntryUsage]]: ...

    def __getitem__(
        self, item: int | slice
    ) -> tuple[review.Entry, EntryUsage] | list[tuple[review.Entry, EntryUsage]]:
        if isinstance(item, slice):
            return [self._pair(i) for i in self._order[item]]
        return self._pair(self._order[item])


@lru_cache(maxsize=16)
def _keys_per_block(sha256: str) -> tuple[tuple[str, ...], ...]:
    """The review keys (``generation.review``) inside each top-level block of a
    document (a task group's head and its tasks and sections), by character offset."""
    ends = []
    end = 0
    for block in documents.parsed(sha256).children:
        end += len(block.dump())
        ends.append(end)
    keys: list[list[str]] = [[] for _ in ends]
    offset = 0
    for entry in review.entries(documents.text(sha256)):
        index = bisect.bisect_right(ends, offset)
        if index < len(keys):
            keys[index].append(entry.key)
        offset += len(entry.text)
    return tuple(tuple(k) for k in keys)


def block_usage(
    layout: Layout, version: MemoryVersion, indexes: Iterable[int]
) -> dict[int, EntryUsage]:
    """Usage of the top-level blocks of ``version`` at ``indexes`` (a page of what the
    MEMORY.md page lists), by index: each block's entries' reads, a run that read
    several of them counted once. Blocks nobody read share one empty ``EntryUsage``:
    not to be changed."""
    blocks = _keys_per_block(version.blob_id)
    wanted = [i for i in indexes if 0 <= i < len(blocks)]
    found = usage_of(layout, version, {str(i): blocks[i] for i in wanted})
    unread = EntryUsage()
    return {i: found.get(str(i), unread) for i in wanted}


# --- phase two's selection by usage ----------------------------------------------------


def usage_ranking(layout: Layout, unused_days: int) -> phase_two.UsageRanking:
    """Each rollout's usage for phase two's selection by usage: the reads of the current
    MEMORY.md's entries that cite it (its rollout summary or ``rollout_id=``), and the
    last of them."""
    version = MemoryVersion.objects.filter(
        layout=layout, document=MemoryVersion.Document.MEMORY_MD
    ).first()
    reads: dict[str, int] = {}
    last: dict[str, str] = {}
    if version is not None and version.blob_id is not None:
        used = entry_usage(layout, version)
        summaries = dict(
            RolloutSummary.objects.filter(layout=layout).values_list("file__path", "rollout_id")
        )
        prefix = layout.memories_dir + "/"
        for entry in review.entries(documents.text(version.blob_id)):
            if entry.key not in used or entry.kind == "task_group":
                continue
            cited = set(review.ROLLOUT_CITED_RE.findall(entry.text))
            for path in memory_md.CITATION_RE.findall(entry.text):
                if prefix + path in summaries:
                    cited.add(summaries[prefix + path])
            for rollout_id in cited:
                reads[rollout_id] = reads.get(rollout_id, 0) + used[entry.key].reads
                when = used[entry.key].last_read
                if when is not None:
                    last[rollout_id] = max(last.get(rollout_id, ""), _iso(when))
    cutoff = _iso(timezone.now() - timedelta(days=unused_days))
    return phase_two.UsageRanking(reads=reads, last_read=last, cutoff=cutoff)


def _iso(when: datetime) -> str:
    """As the SDK writes ``updated_at``: UTC, ``isoformat()`` (compared as strings)."""
    return when.astimezone(UTC).isoformat()
