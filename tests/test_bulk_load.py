"""The import's bulk writes. On PostgreSQL the large tables are loaded with a binary
``COPY``; everywhere else with ``executemany``. Both must leave the very same rows, a
``COPY`` that fails half way must leave nothing, and a sandbox's persist that changed one
file must write rows for that file, not for the whole workspace it is merged into."""

import hashlib
import io
import json
import os
import shutil
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox.util.tar_utils import safe_extract_tarfile
from django.db import connection, models
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryui import bulk, documents, usage
from memoryui.importer import bulk as importer_bulk
from memoryui.importer import import_workspace
from memoryui.models import (
    Blob,
    EntryRead,
    Layout,
    MemoryRead,
    MemoryVersion,
    RawMemory,
    Rollout,
    RolloutSummary,
    SearchDocument,
    Workspace,
    WorkspaceFile,
)
from tests.factories import copy_workspace

FROZEN = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
PARSED = (Rollout, RawMemory, RolloutSummary, SearchDocument)


@pytest.fixture
def frozen_clock(monkeypatch):
    """One "now" for every import, so that two imports' timestamps can be compared."""
    monkeypatch.setattr(timezone, "now", lambda: FROZEN)


def rows_of(name: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the import of workspace ``name`` wrote, table by table, with the ids
    (which differ from one import to the next) replaced by what they point at: a file by
    its path, a layout by its memories folder, a blob by its digest."""
    workspace = Workspace.objects.get(name=name)
    layouts = dict(Layout.objects.filter(workspace=workspace).values_list("pk", "memories_dir"))
    files = dict(WorkspaceFile.objects.filter(workspace=workspace).values_list("pk", "path"))

    def values(model: type[models.Model], **where: Any) -> list[tuple[Any, ...]]:
        fields = [f for f in model._meta.concrete_fields if not f.primary_key]
        out = []
        for row in model.objects.filter(**where).values_list(*(f.attname for f in fields)):
            named = []
            for field, value in zip(fields, row, strict=True):
                if field.attname == "layout_id":
                    value = layouts.get(value)
                elif field.attname == "file_id":
                    value = files[value]
                elif field.attname == "workspace_id":
                    value = name
                elif isinstance(value, memoryview):
                    value = bytes(value)
                named.append(value)
            out.append(tuple(named))
        return sorted(out, key=repr)

    digests = WorkspaceFile.objects.filter(workspace=workspace).values("blob_id")
    tables = {
        "files": values(WorkspaceFile, workspace=workspace),
        "blobs": sorted(
            (sha, size, bytes(data))
            for sha, size, data in Blob.objects.filter(sha256__in=digests).values_list(
                "sha256", "size", "data"
            )
        ),
        "versions": sorted(
            MemoryVersion.objects.filter(layout__workspace=workspace).values_list(
                "layout__memories_dir", "document", "number", "blob_id", "author_kind", "reason"
            )
        ),
    }
    for model in PARSED:
        tables[model._meta.db_table] = values(model, layout__workspace=workspace)
    return tables


def forget(name: str) -> None:
    """Remove a workspace and the blobs only it held, as if it had never been imported."""
    workspace = Workspace.objects.get(name=name)
    digests = list(
        WorkspaceFile.objects.filter(workspace=workspace)
        .exclude(blob=None)
        .values_list("blob_id", flat=True)
    )
    workspace.delete()
    Blob.objects.filter(sha256__in=digests).delete()


@pytest.mark.postgresql
def test_copy_and_the_ordinary_insert_leave_identical_rows(
    db, fixtures_dir, frozen_clock, monkeypatch
):
    tree = fixtures_dir / "medium-300" / "workspace"
    copied = []
    real_copy = bulk._copy_rows
    monkeypatch.setattr(
        bulk, "_copy_rows", lambda model, *a: (copied.append(model), real_copy(model, *a))
    )
    import_workspace(tree, "bulk")
    assert {WorkspaceFile, Blob, *PARSED} <= set(copied)  # the large tables went by COPY
    by_copy = rows_of("bulk")
    forget("bulk")

    monkeypatch.setattr(bulk, "_copy_rows", bulk._execute_rows)
    import_workspace(tree, "bulk")
    by_insert = rows_of("bulk")

    assert by_copy.keys() == by_insert.keys()
    for table, rows in by_copy.items():
        assert rows == by_insert[table], table
    assert len(by_copy["files"]) > 900 and len(by_copy[Rollout._meta.db_table]) == 300


@pytest.mark.postgresql
def test_a_copy_failing_half_way_leaves_no_workspace_and_no_rows(
    transactional_db, fixtures_dir, monkeypatch
):
    real_copy = bulk._copy_rows

    def fails_half_way(model, columns, rows, ignore):
        if model is Rollout:  # the files and blobs are in by now; half the rollouts go
            middle, column = len(rows) // 2, columns.index("segment_count")
            bad = list(rows[middle])
            bad[column] = "not a number"
            rows = [*rows[:middle], tuple(bad), *rows[middle + 1 :]]
        real_copy(model, columns, rows, ignore)

    monkeypatch.setattr(bulk, "_copy_rows", fails_half_way)
    with pytest.raises(Exception):  # noqa: B017 (whichever error the driver raises)
        import_workspace(fixtures_dir / "medium-300" / "workspace", "halfway")

    assert not Workspace.objects.filter(name="halfway").exists()
    assert WorkspaceFile.objects.count() == 0
    assert Blob.objects.count() == 0
    for model in PARSED:
        assert model.objects.count() == 0, model.__name__

    monkeypatch.setattr(bulk, "_copy_rows", real_copy)  # and the next import goes through
    result = import_workspace(fixtures_dir / "medium-300" / "workspace", "halfway")
    assert result.imported_anything
    assert Rollout.objects.filter(layout__workspace__name="halfway").count() == 300


@pytest.mark.postgresql
def test_blobs_another_import_stored_meanwhile_are_skipped_not_an_error(
    db, fixtures_dir, frozen_clock, monkeypatch
):
    """New blobs go straight into their table; one that another import stored after
    this one looked (here: every one, the lookup made to see none) is skipped as
    before, and the import goes through with the same rows."""
    tree = fixtures_dir / "medium-300" / "workspace"
    import_workspace(tree, "first")
    blobs = Blob.objects.count()
    monkeypatch.setattr(bulk, "_not_stored", lambda model, index, key, rows: list(rows))

    result = import_workspace(tree, "second")

    assert result.imported_anything and not result.errors
    assert Blob.objects.count() == blobs
    first, second = rows_of("first"), rows_of("second")
    assert first["blobs"] == second["blobs"]
    assert [row[1:] for row in first["files"]] == [row[1:] for row in second["files"]]


def rows_written() -> int:
    """Rows this connection inserted, updated or deleted so far (in this transaction, on
    PostgreSQL): what a write costs, counted by the database itself."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT total_changes()")
        else:
            cursor.execute(
                "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)"
                " FROM pg_stat_xact_user_tables"
            )
        return int(cursor.fetchone()[0])


def archive_of(
    root: Path,
    target: Path,
    changed: dict[str, bytes],
    mtime: int = 1_790_000_000,
    mode: int = 0o644,
) -> Path:
    """``root`` as one ``.tar`` at ``target``, the way a sandbox persists its workspace,
    with the files of ``changed`` replaced by new bytes."""
    with tarfile.open(target, "w") as tar:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            name = path.relative_to(root).as_posix()
            data = changed.get(name, path.read_bytes())
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode, info.mtime = len(data), mode, mtime
            tar.addfile(info, io.BytesIO(data))
    return target


def test_a_one_file_persist_writes_rows_for_that_file_not_for_the_workspace(
    db, fixtures_dir, tmp_path
):
    """A sandbox of a 300-rollout workspace persists again after one run: only that
    run's rollout changed (one line appended). Its merge reads the whole upload but
    writes the rows of that one file (its file row, blob, rollout and search text) and
    the import's own record, whatever the workspace's size."""
    root = fixtures_dir / "medium-300" / "workspace"
    rollout = next((root / "sessions" / "engineering").glob("*.jsonl"))
    name = rollout.relative_to(root).as_posix()
    first = archive_of(root, tmp_path / "first.tar", {})
    before = rows_written()
    import_workspace(first, "big", merge="sandbox-1")
    whole = rows_written() - before

    grown = rollout.read_bytes() + rollout.read_bytes().splitlines(keepends=True)[-1]
    second = archive_of(root, tmp_path / "second.tar", {name: grown})
    before = rows_written()
    result = import_workspace(second, "big", merge="sandbox-1")
    one_file = rows_written() - before

    assert result.imported_anything
    assert Rollout.objects.get(layout__workspace__name="big", file__path=name).segment_count >= 1
    assert whole > 2000  # the first persist wrote the workspace
    print(f"rows written: first persist {whole}, one-file persist {one_file}")
    assert one_file <= 15, f"a one-file persist wrote {one_file} rows ({whole} for the first)"


def test_a_sandbox_restored_by_the_sdk_and_persisted_unchanged_rewrites_no_file_row(
    db, fixtures_dir, tmp_path
):
    """The SDK's restore writes every file anew, with its mode but not its time, so a
    sandbox's next persist brings every file with a new mtime. Its merge leaves the
    rows of unchanged files as they were: rows in proportion to what changed (here one
    file made executable, whose new mode is taken), not a rewrite of the file list."""
    root = fixtures_dir / "medium-300" / "workspace"
    first = archive_of(root, tmp_path / "first.tar", {})
    before = rows_written()
    import_workspace(first, "big", merge="sandbox-1")
    whole = rows_written() - before
    restored = tmp_path / "sandbox"
    with tarfile.open(first) as tar:
        safe_extract_tarfile(tar, root=restored, allow_external_symlink_targets=False)
    files = sorted(p for p in restored.rglob("*") if p.is_file())
    assert min(p.stat().st_mtime for p in files) > 1_790_000_000  # every time is new
    script = files[0]
    script.chmod(0o755)
    second = tmp_path / "second.tar"
    with tarfile.open(second, "w") as tar:
        for path in files:
            tar.add(path, arcname=path.relative_to(restored).as_posix())

    before = rows_written()
    result = import_workspace(second, "big", merge="sandbox-1")
    persist = rows_written() - before

    assert result.run.changed == 0  # the same bytes: nothing to review or parse again
    rows = WorkspaceFile.objects.filter(workspace__name="big").exclude(blob=None)
    made_executable = script.relative_to(restored).as_posix()
    assert rows.get(path=made_executable).mode == 0o755
    assert set(rows.exclude(path=made_executable).values_list("mode", "mtime_ns")) == {
        (0o644, 1_790_000_000 * 10**9)
    }
    print(f"rows written: first persist {whole}, the restored sandbox's persist {persist}")
    assert whole > 2000
    assert persist <= 10, f"the persist wrote {persist} rows ({whole} for the first)"


def test_a_sync_of_a_folder_whose_files_were_all_touched_records_their_times_at_once(
    db, fixtures_dir, tmp_path
):
    """A directory's files all touched, their bytes the same: a sync reads them again
    (their times no longer vouch for them), finds nothing changed, and records their
    new times (what lets the next sync trust them unread). On PostgreSQL in one
    statement for the lot, not one per file."""
    root = copy_workspace(fixtures_dir, "medium-300", tmp_path / "ws")
    import_workspace(root, "big")
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        os.utime(path, ns=(1_800_000_000 * 10**9, 1_800_000_000 * 10**9))
    with CaptureQueriesContext(connection) as queries:
        result = import_workspace(root, "big")

    assert result.run.changed == 0
    rows = WorkspaceFile.objects.filter(workspace__name="big").exclude(blob=None)
    assert rows.count() == len(files) > 900
    assert set(rows.values_list("mtime_ns", flat=True)) == {1_800_000_000 * 10**9}
    table = connection.ops.quote_name(WorkspaceFile._meta.db_table)
    updates = [q for q in queries if q["sql"].startswith(f"UPDATE {table}")]
    if connection.vendor == "postgresql":
        assert len(updates) == 1, [q["sql"][:120] for q in updates]


def test_many_rows_updated_at_once_take_their_own_values_nulls_and_times_included(db):
    """``bulk.update_many``, as imports use it: each row takes its own values, a NULL
    and a time included, and rows not named are left alone."""
    workspace = Workspace.objects.create(name="w")
    files = [
        WorkspaceFile.objects.create(
            workspace=workspace, path=f"f{n}", kind="workspace_file", missing_since=FROZEN
        )
        for n in range(5)
    ]
    later = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
    bulk.update_many(
        WorkspaceFile,
        ["missing_since", "problem", "mtime_ns"],
        [(None, "", 7, files[0].pk), (later, "unreadable", 2**40, files[1].pk)],
    )
    bulk.update_many(WorkspaceFile, "missing_since", [(None, files[2].pk), (None, files[3].pk)])

    rows = dict(WorkspaceFile.objects.values_list("path", "missing_since"))
    assert rows == {"f0": None, "f1": later, "f2": None, "f3": None, "f4": FROZEN}
    assert WorkspaceFile.objects.get(path="f1").problem == "unreadable"
    assert WorkspaceFile.objects.get(path="f1").mtime_ns == 2**40


def reads_of(name: str) -> list[tuple[Any, ...]]:
    """The memory reads of workspace ``name`` and the entries each hit, ids replaced by
    the rollout's file path and the version's number."""
    rows = []
    reads = MemoryRead.objects.filter(layout__workspace__name=name).select_related(
        "rollout__file", "version"
    )
    for read in reads.prefetch_related("entries"):
        rows.append(
            (
                read.rollout.file.path,
                read.segment,
                read.item,
                read.kind,
                read.path,
                read.how,
                read.command,
                read.read_at,
                read.terminal_state,
                read.version.number if read.version else None,
                read.entry_count,
                sorted(
                    (
                        e.key,
                        e.segment,
                        e.read_at,
                        e.terminal_state,
                        # the read's own layout, version and rollout
                        (e.layout_id, e.version_id, e.rollout_id)
                        == (read.layout_id, read.version_id, read.rollout_id),
                    )
                    for e in read.entries.all()
                ),
            )
        )
    return sorted(rows, key=repr)


def tree_with_reads(fixtures_dir: Path, tmp_path: Path) -> Path:
    """The small SDK fixture with one more rollout whose run searched MEMORY.md for one
    line (``rg -n``) and printed its first 30 lines (``sed``)."""
    tree = tmp_path / "workspace"
    shutil.copytree(fixtures_dir / "small-a" / "workspace", tree)
    memory = (tree / "memories" / "MEMORY.md").read_text().splitlines()
    calls = [
        ("rg -n rotate-keys memories/MEMORY.md", "27:" + memory[26]),
        ("sed -n 1,30p memories/MEMORY.md", ""),
    ]
    items = []
    for number, (cmd, output) in enumerate(calls):
        call = f"call_{number}"
        items.append(
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": call,
                "arguments": json.dumps({"cmd": cmd}),
            }
        )
        items.append({"type": "function_call_output", "call_id": call, "output": output})
    segment = {
        "updated_at": "2026-11-30T10:00:00+00:00",
        "rollout_id": "reader",
        "input": [{"role": "user", "content": "rotate the keys"}],
        "generated_items": items,
        "terminal_metadata": {"terminal_state": "completed"},
    }
    (tree / "sessions" / "reader.jsonl").write_text(json.dumps(segment) + "\n")

    return tree


@pytest.mark.postgresql
def test_memory_reads_go_in_by_copy_with_the_rows_the_ordinary_insert_writes(
    db, fixtures_dir, frozen_clock, monkeypatch, tmp_path
):
    tree = tree_with_reads(fixtures_dir, tmp_path)
    copied = []
    real_copy = bulk._copy_rows
    monkeypatch.setattr(
        bulk, "_copy_rows", lambda model, *a: (copied.append(model), real_copy(model, *a))
    )
    import_workspace(tree, "reads")
    assert {MemoryRead, EntryRead} <= set(copied)  # both tables went by COPY
    by_copy = reads_of("reads")
    forget("reads")

    monkeypatch.setattr(bulk, "_copy_rows", bulk._execute_rows)
    import_workspace(tree, "reads")
    by_insert = reads_of("reads")

    assert by_copy == by_insert
    hits = [(read[4], read[5], [key for key, *_ in read[11]]) for read in by_copy]
    rotate = "task:rotate-keys-ledger-sync, outcome fail @ops-ledger-sync-77656c_"
    assert [(path, how, len(keys)) for path, how, keys in hits] == [
        ("MEMORY.md", "search", 1),  # the rg printed one line of one task
        ("MEMORY.md", "range", 6),  # lines 1-30: the first group's entries and the next task
    ]
    assert hits[0][2][0].startswith(rotate)


@pytest.mark.sqlite
def test_entry_reads_made_by_sqlite_from_the_reads_are_the_rows_python_would_write(
    db, fixtures_dir, frozen_clock, monkeypatch, tmp_path
):
    tree = tree_with_reads(fixtures_dir, tmp_path)
    built_by_sql = []
    real = usage._copy_entry_reads
    monkeypatch.setattr(
        usage, "_copy_entry_reads", lambda ids, hits: (built_by_sql.append(ids), real(ids, hits))
    )
    import_workspace(tree, "reads")
    assert built_by_sql  # SQLite made the entry reads' rows itself
    by_sql = reads_of("reads")
    forget("reads")

    def rows_from_python(reads: list[usage.ReadRow], hits: list[tuple[str, ...]]) -> None:
        ids = bulk.insert_with_ids(MemoryRead, list(usage.ReadRow._fields), reads)
        usage._insert_entry_reads(ids, reads, hits)

    monkeypatch.setattr(usage, "_write_reads", rows_from_python)
    import_workspace(tree, "reads")
    assert reads_of("reads") == by_sql
    assert [(read[4], read[5], len(read[11])) for read in by_sql] == [
        ("MEMORY.md", "search", 1),
        ("MEMORY.md", "range", 6),
    ]
    assert all(entry[4] for read in by_sql for entry in read[11])


def test_rows_inserted_with_ids_are_found_by_the_ids_returned(db, fixtures_dir, tmp_path):
    """The ids ``insert_with_ids`` hands back name the rows it inserted, in their order,
    also after the table's newest row was deleted (its id is not given out again)."""
    import_workspace(copy_workspace(fixtures_dir, "small-a", tmp_path / "w"), "ids")
    layout = Layout.objects.get(workspace__name="ids", memories_dir="memories")
    rollout = Rollout.objects.filter(layout=layout).first()
    columns = ["layout_id", "rollout_id", "segment", "item", "kind", "path", "how", "command"]
    columns += ["terminal_state", "entry_count"]

    def row(item: int) -> tuple[Any, ...]:
        read = ("memory_md", "MEMORY.md", "whole", f"cat {item}", "completed", 0)
        return (layout.pk, rollout.pk, 1, item, *read)

    first = bulk.insert_with_ids(MemoryRead, columns, [row(1), row(2)])
    MemoryRead.objects.filter(pk=first[-1]).delete()
    ids = bulk.insert_with_ids(MemoryRead, columns, [row(n) for n in range(3, 8)])

    assert first[-1] not in ids and min(ids) > first[-1]
    commands = dict(MemoryRead.objects.filter(pk__in=ids).values_list("pk", "command"))
    assert [commands[pk] for pk in ids] == [f"cat {n}" for n in range(3, 8)]
    assert bulk.insert_with_ids(MemoryRead, columns, []) == []


@pytest.mark.postgresql
def test_a_large_import_leaves_the_planner_statistics_of_the_tables_it_filled(
    db, fixtures_dir, tmp_path, monkeypatch
):
    """Without fresh statistics the planner takes a table's new rows as absent and picks
    plans that scan (the usage of a page of entries read every read of the layout)."""
    monkeypatch.setattr(importer_bulk, "ANALYZE_AFTER", 0)

    def analyzed() -> dict[str, float]:
        tables = [m._meta.db_table for m in (Rollout, WorkspaceFile, MemoryRead, EntryRead)]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT relname, reltuples FROM pg_class WHERE relname = ANY(%s)", [tables]
            )
            return dict(cursor.fetchall())

    tree = copy_workspace(fixtures_dir, "small-a", tmp_path / "w")
    cmd = "rg -n rotate-keys memories/MEMORY.md"
    segment = {
        "updated_at": "2026-11-30T10:00:00+00:00",
        "rollout_id": "reader",
        "input": [{"role": "user", "content": "rotate the keys"}],
        "generated_items": [
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": "c1",
                "arguments": json.dumps({"cmd": cmd}),
            },
            {"type": "function_call_output", "call_id": "c1", "output": ""},
        ],
        "terminal_metadata": {"terminal_state": "completed"},
    }
    (tree / "sessions" / "reader.jsonl").write_text(json.dumps(segment) + "\n")
    import_workspace(tree, "stats")

    # The counts the planner now has are those of the rows the import wrote (autovacuum
    # would only see them once committed, and later).
    after = analyzed()
    assert after["memoryui_rollout"] == Rollout.objects.count() > 0
    assert after["memoryui_workspacefile"] == WorkspaceFile.objects.count()
    assert after["memoryui_memoryread"] == MemoryRead.objects.count() == 1


@pytest.mark.sqlite
def test_a_large_file_goes_into_sqlite_a_piece_at_a_time_byte_for_byte(
    db, workspace_copy, monkeypatch
):
    """A file's contents past a mebibyte are written into their row a piece at a time
    (SQLite otherwise holds two more copies of them while it writes); the stored bytes
    are the file's, and a second workspace holding the same file shares its blob."""
    ws = workspace_copy("small-a")
    big = ws / "memories" / "MEMORY.md"
    data = big.read_bytes() + b"- a long note\n" * 200_000  # 2.8 MB: three pieces
    big.write_bytes(data)
    pieces = []
    real = bulk._insert_in_pieces
    monkeypatch.setattr(
        bulk, "_insert_in_pieces", lambda *args: (pieces.append(args[2][0]), real(*args))
    )

    first = import_workspace(ws, "first")
    second = import_workspace(ws, "second")

    digest = hashlib.sha256(data).hexdigest()
    assert pieces == [digest, digest]  # the second found it stored: not zeroed, not written
    assert not first.errors and not second.errors
    assert bytes(Blob.objects.get(pk=digest).data) == data
    assert Blob.objects.get(pk=digest).size == len(data)
    for name in ("first", "second"):
        row = WorkspaceFile.objects.get(workspace__name=name, path="memories/MEMORY.md")
        assert row.blob_id == digest


def test_a_large_document_read_a_piece_at_a_time_is_the_text_read_whole(db, monkeypatch):
    """``documents.text_once`` reads a document past its piece size a piece at a time
    (an import's mapping of reads to a 27 MB MEMORY.md): characters split between two
    pieces, and bytes that are not UTF-8, come out as the whole decode gives them."""
    data = (
        "caf\u00e9 \u2603 \U0001f600\n".encode() * 40
        + b"bad \xe9\xff here\n"
        + "\u00e9".encode() * 9
    )
    digest = hashlib.sha256(data).hexdigest()
    Blob.objects.create(sha256=digest, size=len(data), data=data)
    whole = data.decode("utf-8", "replace")
    for piece in (1, 2, 3, 5, 7, 64, len(data) - 1):
        monkeypatch.setattr(documents, "READ_PIECE", piece)
        assert documents.text_once(digest) == whole, piece
