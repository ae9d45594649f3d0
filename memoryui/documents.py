"""How ``MEMORY.md``, ``memory_summary.md`` and skill files are shown: parsed entries
with their citations resolved against the layout's rollout summaries."""

from __future__ import annotations

import codecs
import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from django.db import connection
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import RFC3986_SUBDELIMS
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from generation import memory_md, review, tree
from generation.summary import Injection, injected_summary

from .models import Blob, Layout, WorkspaceFile
from .rendering import render_markdown

# Pages show the head and tail of a file larger than this.
SHOWN_BYTES = 200_000


# Documents are content addressed (by sha256), so these per-process caches are never
# stale. A 2,000-entry MEMORY.md takes ~0.1 s to parse and 2.7 MB to load.


@lru_cache(maxsize=16)
def content(sha256: str) -> bytes:
    return bytes(Blob.objects.values_list("data", flat=True).get(pk=sha256))


@lru_cache(maxsize=16)
def text(sha256: str) -> str:
    """A document's text, decoded once and the same object on every call."""
    return review.interned(content(sha256).decode("utf-8", errors="replace"))


# ``text_once`` reads a larger document this many bytes at a time.
READ_PIECE = 4 * 1024 * 1024


def text_once(sha256: str, size: int | None = None) -> str:
    """A document's text, read for one use and left out of this process's caches (an
    import maps its reads to a large ``MEMORY.md`` once; ``text`` would keep it). A
    large one is read and decoded a piece at a time: read whole, PostgreSQL's answer
    spelled its 27 MB in hex, held with its bytes and its text (~110 MB at once).
    ``size``: its bytes, where the caller has read them already."""
    if size is None:
        size = Blob.objects.values_list("size", flat=True).get(pk=sha256)
    if size <= READ_PIECE:
        data = Blob.objects.values_list("data", flat=True).get(pk=sha256)
        return str(data, "utf-8", "replace")  # bytes or a memoryview: decoded without a copy
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    table = connection.ops.quote_name(Blob._meta.db_table)
    parts = []
    with connection.cursor() as cursor:
        for start in range(0, size, READ_PIECE):
            cursor.execute(
                f"SELECT substr(data, %s, %s) FROM {table} WHERE sha256 = %s",
                [start + 1, READ_PIECE, sha256],
            )
            (piece,) = cursor.fetchone()
            parts.append(decoder.decode(piece, final=start + READ_PIECE >= size))
    return "".join(parts)


def same_text(text: str) -> str:
    """``text``, or the equal string seen before (``generation.review.interned``): the
    caches keyed by a document's text then find it by identity. A proposal read from
    the database has its texts so already (``Proposal.from_db``)."""
    return review.interned(text)


@lru_cache(maxsize=16)
def parsed(sha256: str) -> memory_md.Block:
    return memory_md.parse(content(sha256).decode("utf-8", errors="replace"))


@dataclass(frozen=True)
class EntrySearch:
    """What "find an entry" matches, every top-level entry's in one string, NUL between
    them (a query holds no NUL: forms refuse it), and where each starts: a find is one
    ``str.find`` per entry found rather than a test of each of ~95,000 entries."""

    joined: str
    starts: array[int]

    def matching(self, needle: str) -> list[int]:
        """The indexes of the entries whose text holds ``needle`` (lower case; an empty
        one is in every entry, found at each one's start)."""
        found: list[int] = []
        at = self.joined.find(needle)
        while at != -1:
            index = bisect_right(self.starts, at) - 1
            found.append(index)
            if index + 1 == len(self.starts):
                break
            at = self.joined.find(needle, self.starts[index + 1])
        return found


@lru_cache(maxsize=16)
def entry_search(sha256: str) -> EntrySearch:
    starts, at = array("q"), 0
    texts = [search_text(block).replace("\0", " ") for block in parsed(sha256).children]
    for text in texts:
        starts.append(at)
        at += len(text) + 1
    return EntrySearch("\0".join(texts), starts)


@lru_cache(maxsize=16)
def injection(sha256: str) -> Injection:
    return injected_summary(content(sha256))


@dataclass(frozen=True)
class Section:
    """A top-level entry of memory_summary.md as its page shows it; ``key`` is its
    review key (generation.review), which its editor takes."""

    key: str
    title: str
    html: SafeString


@lru_cache(maxsize=16)
def rendered_sections(sha256: str) -> tuple[Section, ...]:
    """Every top-level entry, text before the first heading included (blank ones aside)."""

    return tuple(
        Section(
            e.key, e.title or memory_md.KIND_LABELS.get(e.kind, e.kind), render_markdown(e.text)
        )
        for e in review.entries(content(sha256).decode("utf-8", "replace"))
        if e.text.strip()
    )


@lru_cache(maxsize=16)
def entry_keys(sha256: str) -> tuple[str, ...]:
    """The review keys (generation.review) of the top-level entries, in order: one per
    block of ``parsed`` (a task group's own key, not those of the tasks under it)."""

    text = content(sha256).decode("utf-8", "replace")
    return tuple(e.key for e in review.entries(text) if not e.group)


@lru_cache(maxsize=16)
def selection(sha256: str) -> tree.Selection:
    return tree.parse_selection(content(sha256))


# Entries longer than this (characters) are folded: the head rendered, the whole entry
# as plain text. Rendering markdown costs about 3 s a megabyte; an agent's MEMORY.md
# can hold such an entry (people's entries are capped by MEMORYUI_MAX_ENTRY_BYTES).
FOLD_CHARS = 16_000


@lru_cache(maxsize=4096)
def rendered_entry(sha256: str, index: int) -> SafeString:
    """The HTML of one top-level entry, with its headings' anchors."""
    block = parsed(sha256).children[index]
    text = block.dump()
    anchors = [anchor(b.key) for b in block.walk() if b.level]
    if len(text) <= FOLD_CHARS:
        return render_markdown(text, anchors)
    head = text[:FOLD_CHARS].rsplit("\n", 1)[0]
    return render_markdown(head, anchors) + format_html(
        '<details class="folded"><summary>This entry is {} characters long: the rest is '
        "folded. Show the whole entry as plain text</summary><pre>{}</pre></details>",
        f"{len(text):,}",
        text,
    )


@lru_cache(maxsize=16)
def decode_problem(sha256: str) -> str | None:
    return tree.decode_text(content(sha256))[1]


def search_text(block: memory_md.Block) -> str:
    return (block.title + " " + " ".join(block.keywords) + " " + block.scope).lower()


@dataclass
class Citation:
    path: str  # as written: rollout_summaries/<file>.md
    exists: bool
    url: str
    rollout_id: str = ""
    # Not imported yet, but an approved proposal brings it with its write-back.
    pending: bool = False


def resolve_citations(layout: Layout, cited: set[str]) -> dict[str, Citation]:
    """One query for all citations of a page; a citation to a missing file is flagged."""
    paths = {f"{layout.memories_dir}/{c}": c for c in cited}
    # From the files' side: (workspace, path) is unique and indexed.
    found = dict(
        WorkspaceFile.objects.filter(
            workspace_id=layout.workspace_id,
            path__in=list(paths),
            missing_since__isnull=True,
            rollout_summary__layout=layout,
        )
        .order_by()
        .values_list("path", "rollout_summary__rollout_id")
    )
    # One reverse() for the page: the file name is the URL's last segment, quoted as
    # reverse() would quote it.
    base = reverse(
        "memoryui:citation",
        kwargs={"name": layout.workspace.name, "layout_pk": layout.pk, "filename": "-"},
    ).removesuffix("-/")
    return {
        cited_path: Citation(
            path=cited_path,
            exists=full in found,
            url=f"{base}{quote(cited_path.rpartition('/')[2], safe=RFC3986_SUBDELIMS + '~:@')}/",
            rollout_id=found.get(full, ""),
        )
        for full, cited_path in paths.items()
    }


def anchor(key: str) -> str:
    return "entry-" + re.sub(r"[^a-z0-9~-]+", "-", key.lower()).strip("-")


_INDEXED_KINDS = ("task", "section", "user_preferences", "reusable_knowledge", "failures")


@dataclass
class EntryView:
    block: memory_md.Block
    html: SafeString
    anchor: str
    citations: list[Citation] = field(default_factory=list)
    children: list[tuple[str, str, str]] = field(default_factory=list)  # label, title, anchor
    key: str = ""
    pinned: bool = False
    stale: bool = False
    usage: Any = None  # memoryui.usage.EntryUsage: how often agents read it

    @property
    def unsupported(self) -> bool:
        return self.block.kind in ("task_group", "task") and not self.citations

    @property
    def missing_citations(self) -> list[Citation]:
        return [c for c in self.citations if not c.exists and not c.pending]

    @property
    def pending_citations(self) -> list[Citation]:
        return [c for c in self.citations if c.pending]

    @classmethod
    def build(
        cls, block: memory_md.Block, links: dict[str, Citation], html: SafeString, shape: Outline
    ) -> EntryView:
        return cls(
            block=block,
            html=html,
            anchor=shape.anchor,
            citations=[links[c] for c in shape.citations if c in links],
            children=list(shape.children),
        )


# Titles in a page's index of entries are cut to this many characters.
INDEX_TITLE_CHARS = 60


@dataclass(frozen=True)
class Outline:
    """What a page shows of one top-level entry besides its HTML: its anchor, the rollout
    summaries it cites, and its indexed headings as (label, title cut for the index,
    anchor). Computed once per content and entry, not on every page view."""

    anchor: str
    citations: tuple[str, ...]
    children: tuple[tuple[str, str, str], ...]


@lru_cache(maxsize=4096)
def outline(sha256: str, index: int) -> Outline:
    block = parsed(sha256).children[index]
    return Outline(
        anchor=anchor(block.key),
        citations=tuple(block.citations),
        children=tuple(
            (
                child.label,
                Truncator(child.title or child.label).chars(INDEX_TITLE_CHARS),
                anchor(child.key),
            )
            for child in block.walk()
            if child.level and child is not block and child.kind in _INDEXED_KINDS
        ),
    )


@dataclass
class FileView:
    name: str
    size: int
    html: SafeString | None
    text: str
    cut: bool
    problem: str | None

    @classmethod
    def build(cls, file: WorkspaceFile, prefix: str) -> FileView:
        data = bytes(file.blob.data) if file.blob else b""
        text, problem = tree.decode_text(data)
        cut = len(data) > SHOWN_BYTES
        if cut:
            head, _ = tree.decode_text(data[: SHOWN_BYTES // 2])
            tail, _ = tree.decode_text(data[-SHOWN_BYTES // 4 :])
            text = f"{head}\n\n… {tree.human_size(len(data))} in all; middle not shown …\n\n{tail}"
        name = file.path.removeprefix(prefix)
        html = render_markdown(text) if name.lower().endswith(".md") else None
        return cls(name, file.size, html, text, cut, problem)


def current_selection(layout: Layout) -> tuple[WorkspaceFile | None, tree.Selection | None]:
    """The layout's phase_two_selection.json on disk and what it selects (parsed once
    per content)."""
    file = (
        WorkspaceFile.objects.present()
        .filter(layout=layout, kind=WorkspaceFile.Kind.SELECTION)
        .only("pk", "blob_id", "path")
        .first()
    )
    if file is None or file.blob_id is None:
        return file, None
    return file, selection(file.blob_id)
