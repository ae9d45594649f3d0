"""The memory reads of one rollout as its page lists them: under the call that made
each, the file it read, how, and the ``MEMORY.md`` entries it printed, each linked to the
entry on the MEMORY.md page of the version read (``memoryui.usage`` records them)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote

from django.urls import reverse

from generation import memory_reads, review

from . import documents
from .models import MemoryRead, Rollout

HOW_LABELS = {
    memory_reads.WHOLE: "the whole file",
    memory_reads.RANGE: "some lines",
    memory_reads.CUT: "the head and tail of a cut output",
    memory_reads.SEARCH: "searched",
    memory_reads.LOAD_SKILL: "load_skill",
}


@dataclass
class ItemRead:
    """One read as the rollout page lists it under the call that made it."""

    kind: str
    path: str
    how: str
    url: str
    entries: list[tuple[str, str]]  # (title, url of the entry on the MEMORY.md page)


@lru_cache(maxsize=4)
def _titles(sha256: str) -> dict[str, str]:
    """Each entry's title by its key, of a stored document (a 100,000-rollout MEMORY.md
    has tens of thousands: made once, not per page)."""
    return {e.key: e.title for e in review.entries(documents.text(sha256))}


def reads_by_item(rollout: Rollout) -> dict[tuple[int, int], list[ItemRead]]:
    """The reads of a rollout by (segment, item), each entry with a link to it on the
    MEMORY.md page (of the version read). Two queries."""
    reads = list(
        MemoryRead.objects.filter(rollout=rollout)
        .select_related("version")
        .prefetch_related("entries")
        .order_by("segment", "item", "pk")
    )
    if not reads:
        return {}
    layout = rollout.layout
    args = [layout.workspace.name, layout.pk]
    memory_url = reverse("memoryui:memory_md", args=args)
    result: dict[tuple[int, int], list[ItemRead]] = {}
    for read in reads:
        url = ""
        entries: list[tuple[str, str]] = []
        if read.kind == MemoryRead.Kind.MEMORY_MD:
            url = memory_url
            if read.version is not None:
                titled = _titles(read.version.blob_id)
                for entry in read.entries.all():
                    title = titled.get(entry.key, entry.key)
                    link = f"{memory_url}?version={read.version.number}&q={quote(title)}"
                    entries.append((title, link))
        result.setdefault((read.segment, read.item), []).append(
            ItemRead(read.kind, read.path, HOW_LABELS.get(read.how, read.how), url, entries)
        )
    return result
