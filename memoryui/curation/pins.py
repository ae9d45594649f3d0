"""What people tell later consolidations: the entries they pin (kept as written, and
following their entry through edits), the raw memories they protect (kept in the
selection) and the entries they rejected (not to be proposed again)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from generation import review

from ..models import AuditEvent, Layout, MemoryVersion, Pin, ProtectedRawMemory, RejectedEntry
from .versions import latest, text_of

Document = MemoryVersion.Document


@dataclass(frozen=True)
class PinImpact:
    pin: Pin
    what: str  # "dropped", "altered", "renamed", "merged", "split"
    into: str = ""  # the title it has after the change, for a paired entry


def pins_affected_by(layout: Layout, document: str, before: str, after: str) -> list[PinImpact]:
    """The pinned entries that replacing ``before`` by ``after`` drops or alters (a
    renamed, merged or split one says what it becomes)."""
    pins = list(Pin.objects.filter(layout=layout, document=document).order_by("pk"))
    if not pins:
        return []
    after_entries = {e.key: e for e in review.entries(after)}
    paired = {
        old_key: change
        for change in review.compare(before, after)
        if change.previous
        for old_key in change.previous
    }
    impacts = []
    for pin in pins:
        entry = after_entries.get(pin.key)
        if entry is not None:
            if not review.same_text(entry.text, pin.text):
                impacts.append(PinImpact(pin, "altered"))
        elif pin.key in paired:
            change = paired[pin.key]
            impacts.append(PinImpact(pin, change.pairing or "renamed", change.title))
        else:
            impacts.append(PinImpact(pin, "dropped"))
    return impacts


def set_pin(layout: Layout, document: str, key: str, pinned: bool, *, user: Any) -> Pin | None:
    """Pin or unpin an entry. Doing what is already done changes nothing, so two
    people clicking Pin at once get one pin and one audit event. Raises KeyError when
    pinning an entry the current version does not have."""
    if not pinned:
        deleted, _ = Pin.objects.filter(layout=layout, document=document, key=key).delete()
        if deleted:
            AuditEvent.record(layout.workspace, "entry.unpin", user=user, layout=layout, target=key)
        return None
    entry = next(
        (e for e in review.entries(text_of(latest(layout, document))) if e.key == key), None
    )
    if entry is None:
        raise KeyError(key)
    with transaction.atomic():
        # get_or_create inserts in a savepoint and, when a concurrent click inserted
        # first (the unique constraint), reads that pin instead.
        pin, created = Pin.objects.get_or_create(
            layout=layout,
            document=document,
            key=key,
            defaults={
                "title": entry.title[:500],
                "text": entry.text,
                "pinned_by": user if getattr(user, "pk", None) else None,
            },
        )
        if created:
            AuditEvent.record(layout.workspace, "entry.pin", user=user, layout=layout, target=key)
    return pin


def pinned_texts(layout: Layout, memory_md: str) -> list[str]:
    """The pinned MEMORY.md entries as they are in ``memory_md`` (the version a
    consolidation starts from), so a pin keeps the entry's latest text, not the text
    it had when pinned. A pin whose entry is missing there keeps its stored text."""
    current = {e.key: e.text for e in review.entries(memory_md)}
    return [
        current.get(key, text)
        for key, text in Pin.objects.filter(layout=layout, document=Document.MEMORY_MD)
        .order_by("pk")
        .values_list("key", "text")
    ]


def follow_pins(
    layout: Layout, document: str, text: str, moved: dict[str, str | None], *, user: Any
) -> None:
    """Pins follow their entry in a new version: they take its text, move with it when
    an edit renames it (``moved``: old key -> new key) and end when a person deletes
    it (new key None)."""
    pins = list(Pin.objects.filter(layout=layout, document=document))
    if not pins:
        return
    entries = {e.key: e for e in review.entries(text)}
    taken = {p.key for p in pins}
    before = {p.pk: (p.key, p.title, p.text) for p in pins}
    for pin in pins:
        if pin.key in moved and moved[pin.key] != pin.key:
            new_key = moved[pin.key]
            if new_key is None or new_key in taken:
                pin.delete()
                AuditEvent.record(
                    layout.workspace,
                    "entry.unpin",
                    user=user,
                    layout=layout,
                    target=pin.key,
                    reason="entry deleted" if new_key is None else f"merged into {new_key}",
                )
                continue
            taken.discard(pin.key)
            taken.add(new_key)
            pin.key = new_key
        entry = entries.get(pin.key)
        if entry is not None:
            pin.title, pin.text = entry.title[:500], entry.text
        if (pin.key, pin.title, pin.text) != before[pin.pk]:
            pin.save(update_fields=["key", "title", "text"])


def rejected_texts(layout: Layout) -> list[str]:
    return list(RejectedEntry.objects.filter(layout=layout).values_list("text", flat=True))


def set_protected(layout: Layout, rollout_id: str, protected: bool, *, user: Any) -> bool:
    """Protect a raw memory (keep it in the next selections) or stop protecting it.
    Doing what is already done changes nothing, so two clicks at once are one."""
    if not protected:
        deleted, _ = ProtectedRawMemory.objects.filter(
            layout=layout, rollout_id=rollout_id
        ).delete()
        if deleted:
            AuditEvent.record(
                layout.workspace,
                "raw_memory.unprotect",
                user=user,
                layout=layout,
                target=rollout_id,
            )
        return False
    with transaction.atomic():
        _, created = ProtectedRawMemory.objects.get_or_create(
            layout=layout,
            rollout_id=rollout_id,
            defaults={"protected_by": user if getattr(user, "pk", None) else None},
        )
        if created:
            AuditEvent.record(
                layout.workspace, "raw_memory.protect", user=user, layout=layout, target=rollout_id
            )
    return True
