"""Bulk loading: rows written without building model instances.

An import writes tens of thousands of rows for a large tree (its files and parsed rows,
and the memory reads of its rollouts), so they go in with ``COPY`` on PostgreSQL and
``executemany`` elsewhere rather than through the ORM: the ORM's per-object cost was
most of the import time (see ``bench/README.md``). Knows no model of its own: callers
give the model and its columns.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from psycopg.errors import UniqueViolation

CHUNK = 1000
# On SQLite, a value of ``insert_many``'s ``large`` column at least this long is written
# into its row a piece of this size at a time (``_insert_in_pieces``).
LARGE_VALUE_BYTES = 1024 * 1024


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def insert_many(
    model: type[models.Model],
    columns: list[str],
    rows: Sequence[tuple[Any, ...]],
    ignore: str = "",
    large: str = "",
) -> None:
    """Insert rows fast: ``COPY`` on PostgreSQL, ``executemany`` elsewhere. With
    ``ignore``, rows whose ``ignore`` column already exists are skipped. Both ways write
    the same rows (tests/test_bulk_load.py compares them table by table). Values go as
    the database takes them (datetimes adapted by the caller where it matters).
    ``large``: a bytes column whose values may be large (files' contents); on SQLite
    those go into their row a piece at a time."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        _copy_rows(model, columns, rows, ignore)
        return
    if large and connection.vendor == "sqlite":
        at = columns.index(large)
        pieces = [row for row in rows if len(row[at]) >= LARGE_VALUE_BYTES]
        if pieces:
            rows = [row for row in rows if len(row[at]) < LARGE_VALUE_BYTES]
            for row in pieces:
                _insert_in_pieces(model, columns, row, at, ignore)
    _execute_rows(model, columns, rows, ignore)


def _insert_in_pieces(
    model: type[models.Model], columns: list[str], row: tuple[Any, ...], at: int, ignore: str
) -> None:
    """One row whose column ``at`` holds a large value, written as SQLite's incremental
    blob I/O allows: the row with that many zero bytes, then the value a piece at a
    time. Bound whole, SQLite took two copies of it (the bound value and the record):
    54 MB more, for a moment, for a 27 MB ``MEMORY.md`` (bench/README.md)."""
    qn = connection.ops.quote_name
    table = model._meta.db_table
    data = memoryview(row[at])
    marks = ["zeroblob(%s)" if i == at else "%s" for i in range(len(columns))]
    names = ", ".join(qn(c) for c in columns)
    sql = f"INSERT INTO {qn(table)} ({names}) VALUES ({', '.join(marks)})"
    if ignore:
        sql += f" ON CONFLICT ({qn(ignore)}) DO NOTHING"
    with connection.cursor() as cursor:
        cursor.execute(sql, [len(data) if i == at else v for i, v in enumerate(row)])
        if cursor.rowcount != 1:
            return  # stored already
        rowid = cursor.lastrowid
    with connection.connection.blobopen(table, columns[at], rowid) as blob:
        for start in range(0, len(data), LARGE_VALUE_BYTES):
            blob.write(data[start : start + LARGE_VALUE_BYTES])


def _copy_rows(
    model: type[models.Model], columns: list[str], rows: Sequence[tuple[Any, ...]], ignore: str
) -> None:
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    if not ignore:
        _copy(model, table, columns, rows)
        return
    # COPY cannot skip conflicts. The rows whose key is stored already are left out
    # first (one index lookup each), and the rest go straight into the table; only if
    # another transaction stored one of them meanwhile are they staged, then inserted
    # where new. Staging every row cost a second copy of them all (a quarter of the
    # server's time for the blobs of a large tree).
    rows = _not_stored(model, columns.index(ignore), ignore, rows)
    if not rows:
        return
    try:
        with transaction.atomic():
            _copy(model, table, columns, rows)
        return
    except UniqueViolation:  # psycopg's own error: a COPY is not wrapped in Django's
        pass
    with connection.cursor() as cursor:
        staging = qn(f"staging_{model._meta.db_table}")
        cursor.execute(f"CREATE TEMPORARY TABLE {staging} (LIKE {table} INCLUDING DEFAULTS)")
        _copy(model, staging, columns, rows)
        cursor.execute(
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {staging} "
            f"ON CONFLICT ({qn(ignore)}) DO NOTHING"
        )
        cursor.execute(f"DROP TABLE {staging}")


def _not_stored(
    model: type[models.Model], index: int, key: str, rows: Sequence[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """``rows`` without those whose ``key`` (column ``index``) the table holds already,
    and without repeats of a key."""
    qn = connection.ops.quote_name
    stored: set[Any] = set()
    with connection.cursor() as cursor:
        for chunk in chunks([row[index] for row in rows], 10 * CHUNK):
            cursor.execute(
                f"SELECT {qn(key)} FROM {qn(model._meta.db_table)} WHERE {qn(key)} = ANY(%s)",
                [list(chunk)],
            )
            stored.update(value for (value,) in cursor.fetchall())
    new = []
    for row in rows:
        if row[index] not in stored:
            stored.add(row[index])
            new.append(row)
    return new


def _copy(
    model: type[models.Model], target: str, columns: list[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    cols = ", ".join(connection.ops.quote_name(c) for c in columns)
    with connection.cursor() as cursor:
        # Binary: contents go as their bytes and text as UTF-8, where the text format
        # spelled every byte of a blob in hex and escaped every text (a quarter of the
        # client's CPU for the rows of a large tree, and the server's parsing of it).
        with cursor.cursor.copy(f"COPY {target} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_column_types(model, tuple(columns)))
            for row in rows:
                copy.write_row(row)


def _execute_rows(
    model: type[models.Model], columns: list[str], rows: Sequence[tuple[Any, ...]], ignore: str
) -> None:
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    sql = f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(columns))})"
    if ignore:
        sql += f" ON CONFLICT ({qn(ignore)}) DO NOTHING"
    with connection.cursor() as cursor:
        for chunk in chunks(rows, CHUNK):
            cursor.executemany(sql, chunk)


@functools.cache
def _column_types(model: type[models.Model], columns: tuple[str, ...]) -> list[str]:
    """The PostgreSQL type of each of ``model``'s ``columns`` (``varchar(64)`` as
    ``varchar``), for a binary ``COPY``."""
    fields = {f.column: f for f in model._meta.concrete_fields}
    return [re.sub(r"\(.*\)$", "", fields[column].db_type(connection) or "") for column in columns]


def update_many(
    model: type[models.Model],
    columns: str | list[str],
    rows: Sequence[tuple[Any, ...]],
    key: str = "id",
) -> None:
    """``UPDATE ... SET columns = row[:-1] WHERE key = row[-1]`` for every row.

    On PostgreSQL each chunk is one statement joined to its values as arrays
    (``unnest``): a statement per row, even pipelined, cost a merge 200 ms for the
    4,000 files of a sandbox's upload whose mtimes all moved (``bench/README.md``)."""
    if not rows:
        return
    qn = connection.ops.quote_name
    cols = [columns] if isinstance(columns, str) else columns
    if connection.vendor == "postgresql":
        _update_unnested(model, cols, rows, key)
        return
    adapt = connection.ops.adapt_datetimefield_value
    rows = [tuple(adapt(v) if isinstance(v, datetime) else v for v in row) for row in rows]
    sql = (
        f"UPDATE {qn(model._meta.db_table)} SET {', '.join(f'{qn(c)} = %s' for c in cols)} "
        f"WHERE {qn(key)} = %s"
    )
    with connection.cursor() as cursor:
        for chunk in chunks(rows, CHUNK):
            cursor.executemany(sql, chunk)


def _update_unnested(
    model: type[models.Model], cols: list[str], rows: Sequence[tuple[Any, ...]], key: str
) -> None:
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    types = _column_types(model, (*cols, key))
    names = [f"c{i}" for i in range(len(cols))]
    arrays = ", ".join(f"%s::{kind}[]" for kind in types)
    assigned = ", ".join(f"{qn(column)} = v.c{i}" for i, column in enumerate(cols))
    sql = (
        f"UPDATE {table} SET {assigned} "
        f"FROM unnest({arrays}) AS v({', '.join(names)}, k) WHERE {table}.{qn(key)} = v.k"
    )
    with connection.cursor() as cursor:
        for chunk in chunks(rows, 10 * CHUNK):
            cursor.execute(sql, [list(column) for column in zip(*chunk, strict=True)])


def insert_with_ids(
    model: type[models.Model], columns: list[str], rows: Sequence[tuple[Any, ...]]
) -> list[int]:
    """Insert rows and return their new ids, in the rows' order. On PostgreSQL the ids
    are taken from the table's sequence first (one query) and the rows, ids included,
    go in with ``COPY``. On SQLite the rows go in with one prepared statement
    (``executemany``, a third of the time of multi-row ``INSERT ... RETURNING``), inside
    a transaction: it holds the database's only write lock, so nothing else inserts
    between them and an ``AUTOINCREMENT`` key gives them consecutive ids, the last of
    which ``last_insert_rowid()`` names."""
    if not rows:
        return []
    qn = connection.ops.quote_name
    table = model._meta.db_table
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                [table, len(rows)],
            )
            ids = [row[0] for row in cursor.fetchall()]
        _copy_rows(
            model, ["id", *columns], [(i, *row) for i, row in zip(ids, rows, strict=True)], ""
        )
        return ids
    if connection.vendor != "sqlite":
        raise NotImplementedError(f"insert_with_ids on {connection.vendor}")
    sql = (
        f"INSERT INTO {qn(table)} ({', '.join(qn(c) for c in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)
        cursor.execute("SELECT last_insert_rowid()")
        last = cursor.fetchone()[0]
    return list(range(last - len(rows) + 1, last + 1))


def values_by(
    model: type[models.Model], key: str, value: str, keys: Sequence[Any]
) -> dict[Any, Any]:
    """``{row.key: row.value}`` for the rows whose ``key`` column is one of ``keys``
    (an import's ten thousand file ids): the keys go as one array a chunk, not one
    placeholder each (``= ANY`` on PostgreSQL, ``json_each`` on SQLite), and no
    queryset is built (a third of the time of ``filter(key__in=...)``)."""
    qn = connection.ops.quote_name
    select = f"SELECT {qn(key)}, {qn(value)} FROM {qn(model._meta.db_table)} WHERE {qn(key)} "
    if connection.vendor == "postgresql":
        select += "= ANY(%s)"
    else:
        select += "IN (SELECT value FROM json_each(%s))"
    found: dict[Any, Any] = {}
    with connection.cursor() as cursor:
        for chunk in chunks(keys, 10 * CHUNK):
            values = list(chunk)
            cursor.execute(
                select, [values if connection.vendor == "postgresql" else json.dumps(values)]
            )
            found.update(cursor.fetchall())
    return found
