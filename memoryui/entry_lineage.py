"""An entry's lineage: its keys in the earlier versions of ``MEMORY.md``, found by comparing
each version with the one before it (an entry read under an older key was read all the
same). Usage counts an entry's reads through it (``usage``); forgetting finds what was
never read. Where the review's comparisons are shared (``review_cache``), a worker
compares each new version with the one before it as it is saved (``compare_with_previous``),
so that no page computes that comparison for a large ``MEMORY.md`` while somebody waits."""

from __future__ import annotations

from functools import lru_cache

from generation import review

from . import documents
from .models import Layout, MemoryVersion


@lru_cache(maxsize=64)
def earlier_keys(before: str, after: str) -> dict[str, tuple[str, ...]]:
    """Each entry key of ``after`` -> the keys of ``before`` it is (unchanged, moved,
    changed in place, or paired as renamed, rewritten, merged or split); an added
    entry has none."""
    old_keys = {e.key for e in review.entries(before)}
    result: dict[str, tuple[str, ...]] = {}
    for change in review.compare(before, after):
        if change.status == "removed":
            continue
        olds = set(change.previous)
        if change.status != "added" and change.key in old_keys and not change.pairing:
            olds.add(change.key)
        for _, side, key, _ in change.pieces:
            if side == "old":
                olds.add(key)
        for key in (change.key, *change.also):
            result[key] = tuple(sorted(olds))
    return result


def lineage(
    layout: Layout, version: MemoryVersion, since: int = 1, keys: set[str] | None = None
) -> dict[tuple[int, str], str]:
    """(version pk, key) of every earlier form of each entry of ``version`` (or of the
    entries ``keys`` only), back to version number ``since`` -> the entry's key in
    ``version``."""
    rows = list(
        MemoryVersion.objects.filter(
            layout=layout,
            document=MemoryVersion.Document.MEMORY_MD,
            number__lte=version.number,
            number__gte=since,
        )
        .order_by("-number")
        .values_list("pk", "blob_id")
    )
    if not rows:
        return {}
    current = documents.text(rows[0][1])
    if keys is None:
        keys = {e.key for e in review.entries(current)}
    forms = {key: {key} for key in keys}
    result = {(rows[0][0], key): key for key in forms}
    later = current
    for pk, blob in rows[1:]:
        earlier = documents.text(blob)
        back = earlier_keys(documents.same_text(earlier), documents.same_text(later))
        for key, olds in forms.items():
            forms[key] = {old for k in olds for old in back.get(k, ())}
            for old in forms[key]:
                result[(pk, old)] = key
        later = earlier
    return result


def compare_with_previous(version: MemoryVersion) -> None:
    """Compare ``version`` with the version of its document numbered just before it, as
    ``lineage`` does (kept in this process, and shared where the cache is)."""
    previous = previous_blob_id(version)
    if not previous or version.blob_id is None:  # none before, or a deletion
        return
    earlier = documents.same_text(documents.text(previous))
    earlier_keys(earlier, documents.same_text(documents.text(version.blob_id)))


def previous_blob_id(version: MemoryVersion) -> str | None:
    """The text (blob) of the version of ``version``'s document numbered just before it;
    None when there is none, or it records a deletion."""
    return (
        MemoryVersion.objects.filter(
            layout_id=version.layout_id, document=version.document, number__lt=version.number
        )
        .order_by("-number")
        .values_list("blob_id", flat=True)
        .first()
    )
