"""People's edits of ``MEMORY.md`` and ``memory_summary.md``: saves, entry edits,
restores, and their word on an agent's own edit. Every change is a new version and an
audit event.

Saves are serialised per layout (a row lock on the layout) and carry the version they
were based on: a save based on anything but the latest version is refused
(``StaleVersion``), so two people editing the same entry never overwrite each other.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from generation import review

from .. import versioning
from ..entry_checks import agent_version_flags
from ..models import AuditEvent, Layout, MemoryVersion
from .pins import follow_pins
from .versions import latest, text_of

Document = MemoryVersion.Document


class StaleVersion(Exception):
    """The document changed since the version the edit was based on."""

    def __init__(self, latest: MemoryVersion | None) -> None:
        super().__init__("the document changed since you opened it")
        self.latest = latest


def save_document(
    layout: Layout,
    document: str,
    text: str,
    *,
    user: Any,
    author_kind: str = MemoryVersion.Author.PERSON,
    reason: str,
    based_on: int | None,
    moved: dict[str, str | None] | None = None,
) -> MemoryVersion:
    """Store ``text`` as the new current version, if ``based_on`` is still the latest
    version number (None: the document had no version). Pins follow their entries
    (``moved``: entries an edit renamed or deleted, see ``pins.follow_pins``)."""
    with transaction.atomic():
        current = versioning.locked_latest(
            MemoryVersion, layout, based_on, StaleVersion, document=document
        )
        version = versioning.create(
            MemoryVersion,
            layout,
            current,
            text.encode("utf-8"),
            user=user,
            author_kind=author_kind,
            reason=reason,
            document=document,
        )
        AuditEvent.record(
            layout.workspace,
            "version.create",
            user=user,
            layout=layout,
            target=f"{layout.memories_dir}/{Document(document).label}",
            version=version.number,
            sha256=version.blob_id,
            reason=reason,
        )
        follow_pins(layout, document, text, moved or {}, user=user)
    return version


def edit_entry(
    layout: Layout, document: str, key: str, new_text: str, *, based_on: int, user: Any
) -> MemoryVersion:
    current = latest(layout, document)
    if current is None or current.number != based_on:
        raise StaleVersion(current)
    if new_text and not new_text.endswith("\n"):
        new_text += "\n"
    text = with_entry_replaced(text_of(current), key, new_text)
    # The edited entry starts where the old one was: the entries before it are unchanged.
    index = [e.key for e in review.entries(text_of(current))].index(key)
    after = review.entries(text)
    new_key = after[index].key if new_text.strip() and index < len(after) else None
    action = "deleted" if not new_text else "edited"
    return save_document(
        layout,
        document,
        text,
        user=user,
        reason=f"{action} entry {key}",
        based_on=based_on,
        moved={key: new_key},
    )


def add_entry(
    layout: Layout, document: str, text: str, *, based_on: int | None, user: Any
) -> MemoryVersion:
    current = latest(layout, document)
    if (current.number if current else None) != based_on:
        raise StaleVersion(current)
    new = with_entry_added(text_of(current), text)
    return save_document(
        layout, document, new, user=user, reason="added an entry", based_on=based_on
    )


def with_entry_replaced(document_text: str, key: str, new_text: str) -> str:
    """The document ``edit_entry`` saves: one entry replaced (removed when empty). The
    edited entry keeps the blank lines that separated the old one from the next, so an
    edit trimmed in a text box does not glue the next heading to it."""
    old = next((e.text for e in review.entries(document_text) if e.key == key), None)
    if new_text and old is not None:
        new_text = new_text.rstrip("\n") + (old[len(old.rstrip("\n")) :] or "\n")
    elif new_text and not new_text.endswith("\n"):
        new_text += "\n"
    return review.replace_entry(document_text, key, new_text)


def with_entry_added(document_text: str, text: str) -> str:
    """The document ``add_entry`` saves: ``text`` appended as a new entry."""
    added = text if text.endswith("\n") else text + "\n"
    return review.join([document_text, added] if document_text else [added])


def restore(layout: Layout, document: str, number: int, *, user: Any) -> MemoryVersion:
    old = MemoryVersion.objects.get(layout=layout, document=document, number=number)
    current = latest(layout, document)
    return save_document(
        layout,
        document,
        text_of(old),
        user=user,
        reason=f"restored version {number}",
        based_on=current.number if current else None,
    )


def accept_agent_change(version: MemoryVersion, *, user: Any) -> None:
    """Accept an agent's own edit; when it holds possible memory poisoning, the audit
    event names the flags the reviewer accepted it with."""

    found = agent_version_flags(version)
    flags: dict[str, Any] = (
        {"poisoning_flags": [f"{f.label}: {f.reason}" for f in found]} if found else {}
    )
    MemoryVersion.objects.filter(pk=version.pk).update(needs_review=False)
    AuditEvent.record(
        version.layout.workspace,
        "agent_change.accept",
        user=user,
        layout=version.layout,
        target=f"{Document(version.document).label} v{version.number}",
        **flags,
    )


def revert_agent_change(version: MemoryVersion, *, user: Any) -> MemoryVersion:
    """Put back the version before the agent's edit (as a new version); an empty
    document when the agent's was the first (a sandbox's upload brought it)."""
    if version.number > 1:
        restored = restore(version.layout, version.document, version.number - 1, user=user)
    else:
        current = latest(version.layout, version.document)
        restored = save_document(
            version.layout,
            version.document,
            "",
            user=user,
            reason="reverted the agent's first version",
            based_on=current.number if current else None,
        )
    MemoryVersion.objects.filter(pk=version.pk).update(needs_review=False)
    AuditEvent.record(
        version.layout.workspace,
        "agent_change.revert",
        user=user,
        layout=version.layout,
        target=f"{Document(version.document).label} v{version.number}",
        restored=restored.number,
    )
    return restored
