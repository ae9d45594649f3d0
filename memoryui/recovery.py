"""Write-backs and snapshot exports that died, finished or undone from their journals
(``generation.journal``) when a Celery worker starts (``apps.py``) and when the web
server starts (``wsgi.py``): every layout's journal left behind
(``memoryui.writeback.recover_layout``, which the next write-back of a layout also
runs first), and what interrupted snapshot exports left.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django import db

from generation import journal
from generation.export import ExportError

from .snapshots import recover_exports
from .writeback import (
    Recovery,
    WritebackError,
    journal_base,
    journal_layout,
    recover_layout,
)

logger = logging.getLogger(__name__)


def recover_interrupted() -> list[Recovery]:
    """Finish or undo every write-back that died (its journal left, its lock free), and
    remove what interrupted snapshot exports left. Running write-backs are left alone."""
    done = []

    def handle(directory: Path) -> None:
        record = journal.load(directory)
        if record is not None:
            done.append(recover_layout(journal_layout(record, directory), directory))

    def failed(directory: Path, exc: Exception) -> None:
        logger.error("write-back journal %s not recovered: %s", directory, exc)
        done.append(Recovery(directory, None, f"not recovered: {exc}"))

    journal.recover_each(
        journal_base() / "writeback",
        "layout-*",
        handle,
        errors=(journal.JournalError, WritebackError, ExportError, OSError),
        failed=failed,
    )
    recover_exports()
    return done


def recover_at_start(**_: Any) -> None:
    """``recover_interrupted`` for a starting worker or web server: logged, never raised
    (a database not yet migrated, say, must not stop the start)."""
    try:
        for recovery in recover_interrupted():
            logger.warning(
                "interrupted write-back of %s: %s",
                recovery.layout.memories_dir if recovery.layout else recovery.directory,
                recovery.outcome,
            )
    except Exception:
        logger.exception("recovering interrupted write-backs failed")
    finally:
        db.connections.close_all()
