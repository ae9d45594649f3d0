"""Documents (``MEMORY.md``, ``memory_summary.md``: ``MemoryVersion``) and skill files
(``SkillFileVersion``) keep their history the same way, so it is written once here: the
latest version of one file, a save refused unless it was based on that latest version
(checked under the layout's row lock), the next number after it, the content stored once
by its sha256 (no blob: the file was deleted), and no new version for content the latest
version already holds. What each kind audits stays with its caller."""

from __future__ import annotations

from functools import partial
from typing import Any, TypeVar

from django.db import transaction

from generation import shared_results

from . import documents, task_queue
from .models import Blob, Layout, MemoryVersion, SkillFileVersion

Version = TypeVar("Version", MemoryVersion, SkillFileVersion)


def latest(model: type[Version], layout: Layout, **key: str) -> Version | None:
    """The newest version of one file (``document=`` or ``path=``), or None."""
    # No blob join: content() reads through the per-process cache.
    return model.objects.filter(layout=layout, **key).order_by("-number").first()


def content(version: MemoryVersion | SkillFileVersion | None) -> bytes | None:
    """A version's bytes; None when there is no version or it records a deletion."""
    if version is None or version.blob_id is None:
        return None
    return documents.content(version.blob_id)


def unchanged(current: MemoryVersion | SkillFileVersion | None, data: bytes | None) -> bool:
    """``data`` (None: no file) is what the file already is: a save would add nothing."""
    return data is None if current is None else content(current) == data


def locked_latest(
    model: type[Version],
    layout: Layout,
    based_on: int | None,
    stale: type[Exception],
    **key: str,
) -> Version | None:
    """Inside a transaction: take the layout's row lock (saves of a layout are serialised
    until the transaction ends), then the latest version if its number is still
    ``based_on`` (None: the file had no version); else raise ``stale(latest)``."""
    Layout.objects.select_for_update().filter(pk=layout.pk).first()
    current = latest(model, layout, **key)
    if (current.number if current else None) != based_on:
        raise stale(current)
    return current


def create(
    model: type[Version],
    layout: Layout,
    current: Version | None,
    data: bytes | None,
    *,
    user: Any,
    author_kind: str,
    reason: str,
    **key: str,
) -> Version:
    """The version after ``current`` holding ``data`` (None: the file is deleted, which
    only a skill file's version can record)."""
    fields: dict[str, Any] = {"blob_id": Blob.store(data) if data is not None else None, **key}
    version = model.objects.create(
        layout=layout,
        number=(current.number + 1) if current else 1,
        author_kind=author_kind,
        author=user if getattr(user, "pk", None) else None,
        reason=reason[:500],
        **fields,
    )
    if data is not None:
        # A worker lints it now, so that nobody waits on the scan at write-back time.
        transaction.on_commit(partial(_lint_later, model.__name__, version.pk))
        if isinstance(version, MemoryVersion):
            compare_ahead(version, len(data))
    return version


def compare_ahead(version: MemoryVersion, size: int) -> None:
    """Where comparisons are shared, have a worker compare a new ``MEMORY.md`` version of
    ``size`` bytes with the one before it once the transaction commits: usage's lineage
    of its entries then computes none while somebody waits (``entry_lineage``). A small
    document is compared where it is needed."""
    if (
        version.document == MemoryVersion.Document.MEMORY_MD
        and version.number > 1
        and size * 2 >= shared_results.SHARED_FROM
        and shared_results.sharing()
    ):
        transaction.on_commit(partial(_compare_later, version.pk))


def _lint_later(model: str, version_id: int) -> None:
    """Best effort: the save is done; without a broker the write-back lints it itself."""
    task_queue.send_best_effort(
        "memoryui.tasks.lint_version",
        model,
        version_id,
        what=f"the lint of {model} {version_id} ahead of its write-back",
    )


def _compare_later(version_id: int) -> None:
    """Best effort: the page that needs the comparison computes it otherwise."""
    task_queue.send_best_effort(
        "memoryui.tasks.compare_version",
        version_id,
        what=f"the comparison of MEMORY.md version {version_id} with the one before it",
    )
