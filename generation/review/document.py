"""A document's entries: splitting MEMORY.md or memory_summary.md into the entries a
reviewer decides on, their keys and titles, task numbers, and joining entries back."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from .. import memory_md, shared_results


@dataclass(frozen=True)
class Entry:
    key: str
    kind: str
    title: str
    text: str
    group: str = ""  # the key of the task group holding a task or section ("" at the top)


@lru_cache(maxsize=16)
def interned(text: str) -> str:
    """``text``, or the equal string this process saw before: the one object for it.
    The caches keyed by a document's text (here and in ``comparison``) compare a key
    with an equal string of another object byte by byte on every lookup (~3 ms for a
    27 MB ``MEMORY.md``, several lookups a request); with one object, identity answers.
    Making it costs one hash of a new object's text (~15 ms for 27 MB), once."""
    return text


def entries(text: str) -> list[Entry]:
    """The entries of a document; joined back they give the text exactly."""
    return list(_entries(text))


@lru_cache(maxsize=32)
def _entries(text: str) -> tuple[Entry, ...]:
    # A large document's entries are shared by the deployment's processes.
    return shared_results.through("entries", (text,), lambda: _parsed_entries(text))


def _parsed_entries(text: str) -> tuple[Entry, ...]:
    root = memory_md.parse(text)
    grouped = any(block.kind == "task_group" for block in root.children)
    unique = numbering()
    result: list[Entry] = []
    for block in root.children:
        if not (grouped and block.kind == "task_group"):
            key = unique(f"{block.kind}:{normalize(block.title)}")
            result.append(Entry(key, block.kind, block.title, block.dump()))
            continue
        add_group(result, _group_parts(block), unique)
    return tuple(result)


def numbering() -> Callable[[str], str]:
    """A document's keys in order: a key taken again gets "#2", "#3", ..."""
    seen: dict[str, int] = {}

    def unique(base: str) -> str:
        seen[base] = seen.get(base, 0) + 1
        return base if seen[base] == 1 else f"{base}#{seen[base]}"

    return unique


# A task group as its entries need it: its title, its head (the heading with the
# bullets and paragraphs under it) and each task or section as (kind, title, the
# rollout summaries it cites, text).
GroupParts = tuple[str, str, tuple[tuple[str, str, tuple[str, ...], str], ...]]


def _group_parts(block: memory_md.Block) -> GroupParts:
    lead = 0  # bullets and paragraphs under the group's heading belong to its head
    while lead < len(block.children) and block.children[lead].level == 0:
        lead += 1
    head = block.text + "".join(child.dump() for child in block.children[:lead])
    members = tuple(
        (child.kind, child.title, tuple(child.citations), child.dump())
        for child in block.children[lead:]
    )
    return block.title, head, members


def add_group(result: list[Entry], parts: GroupParts, unique: Callable[[str], str]) -> None:
    title, head, members = parts
    group = unique(f"task_group:{normalize(title)}")
    result.append(Entry(group, "task_group", title, head))
    for kind, name, citations, text in members:
        key = unique(member_key(kind, name, group, list(citations)))
        result.append(Entry(key, kind, name, text, group))


_GROUP_START_RE = re.compile(r"(?m)^(?=# Task Group: )")


def grouped_entries(text: str) -> list[Entry] | None:
    """``entries(text)`` for a text made of task groups alone (what a review's result
    narrowed to some groups is), each group parsed once and kept by its text: from one
    decision to the next most groups are the same. ``None`` when ``text`` is not
    plainly that (text before the first group, a group that does not parse as one
    task group on its own, one ending inside a code fence)."""
    chunks = _GROUP_START_RE.split(text)
    if chunks[0] or len(chunks) < 2:
        return None
    unique = numbering()
    result: list[Entry] = []
    for chunk in chunks[1:]:
        parts = chunk_parts(chunk)
        if parts is None:
            return None
        add_group(result, parts, unique)
    return result


def entry_starts(text: str, *, kept: bool = False) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The first line (from 1) and the key of each of ``entries(text)``. ``kept``: from
    ``entries``, whose parse this process keeps (for a text small enough). Else nothing
    is kept: a text made of task groups alone (a large ``MEMORY.md``) is parsed one
    group at a time, so no more than a group's parse is held at once (a 27 MB text's
    whole parse is several times its size); any other text through ``entries``."""
    if not kept:
        try:
            return _starts(_group_by_group(text))
        except _NotGroups:
            pass
    return _starts(entries(text))


class _NotGroups(Exception):
    """A text not made of task groups alone, found while going through it."""


def _group_by_group(text: str) -> Iterator[Entry]:
    """``entries(text)`` for a text made of task groups alone, one group parsed at a
    time (each sliced when parsed: no list of them all, a second copy of the text)."""
    bounds = [m.start() for m in _GROUP_START_RE.finditer(text)]
    if not bounds or bounds[0] != 0:
        raise _NotGroups
    unique = numbering()
    for at, end in zip(bounds, [*bounds[1:], len(text)], strict=True):
        parts = chunk_parts.__wrapped__(text[at:end])
        if parts is None:
            raise _NotGroups
        group: list[Entry] = []
        add_group(group, parts, unique)
        yield from group


def _starts(found: Iterable[Entry]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    starts: list[int] = []
    keys: list[str] = []
    line = 1
    for entry in found:
        starts.append(line)
        keys.append(entry.key)
        line += entry.text.count("\n")
    return tuple(starts), tuple(keys)


@lru_cache(maxsize=8192)
def chunk_parts(chunk: str) -> GroupParts | None:
    root, open_fence = memory_md.parse_open(chunk)
    if open_fence or len(root.children) != 1 or root.children[0].kind != "task_group":
        return None
    return _group_parts(root.children[0])


def with_members(document: str, entry_key: str, text: str) -> str:
    """A task group's head with the tasks and sections under it in ``document`` (what
    the group as a whole cites); any other entry's ``text`` as it is."""
    return _group_texts(document).get(entry_key, text)


def group_title(documents: tuple[str, ...], group: str) -> str:
    """The title of the task group ``group`` (a key) in the first of ``documents``
    that has it."""
    for document in documents:
        title = _group_titles(document).get(group)
        if title is not None:
            return title
    return group.removeprefix("task_group:")


@dataclass(frozen=True)
class Place:
    """Where an entry stands in a document, among the entries of its kind beside it (a
    task among its group's tasks, a task group among the groups): its group's title
    ("" at the top level), its position (from 1) of how many, and the titles of the
    entries just before and after it, without task numbers ("" at an end)."""

    group: str
    position: int
    count: int
    before: str
    after: str


def place_of(document: str, key: str) -> Place | None:
    """Where the entry ``key`` stands in ``document`` (None when it is not there)."""
    found = entries(document)
    entry = next((e for e in found if e.key == key), None)
    if entry is None:
        return None
    beside = [e for e in found if e.group == entry.group and e.kind == entry.kind]
    at = beside.index(entry)
    return Place(
        group=group_title((document,), entry.group) if entry.group else "",
        position=at + 1,
        count=len(beside),
        before=task_title(beside[at - 1].title) if at else "",
        after=task_title(beside[at + 1].title) if at + 1 < len(beside) else "",
    )


@lru_cache(maxsize=8)
def _group_titles(document: str) -> dict[str, str]:
    return {e.key: e.title for e in entries(document) if e.kind == "task_group" and not e.group}


@lru_cache(maxsize=8)
def _group_texts(document: str) -> dict[str, str]:
    texts: dict[str, str] = {}
    for entry in entries(document):
        if entry.kind == "task_group" and not entry.group:
            texts[entry.key] = entry.text
        elif entry.group in texts:
            texts[entry.group] += entry.text
    return texts


TASK_NUMBER_RE = re.compile(r"^Task[ \t]+\d+[ \t]*:[ \t]*", re.IGNORECASE)
TASK_HEADING_RE = re.compile(r"^(#{2,6}[ \t]+Task[ \t]+)(\d+)([ \t]*:)", re.IGNORECASE)


def member_key(kind: str, title: str, group: str, citations: list[str]) -> str:
    """The key of a task or section inside a task group. A task's key is its title
    without the number and the first rollout it cites, so it survives renumbering and
    a move to another group; a section's key names its group."""
    if kind == "task":
        cited = citations[0].rsplit("/", 1)[-1] if citations else ""
        return f"task:{normalize(task_title(title))}" + (f" @{cited}" if cited else "")
    return f"{kind}:{normalize(title)} in {group}"


def task_title(title: str) -> str:
    """A task's title without its ``Task <n>:`` number."""
    return TASK_NUMBER_RE.sub("", title)


def unnumbered(text: str) -> str:
    """An entry's text with a task heading's number taken out (for comparing)."""
    return TASK_HEADING_RE.sub(r"\1#\3", text, count=1)


def numbered_like(text: str, like: str) -> str:
    """``text`` with its first task heading numbered as ``like``'s (to compare the two
    without the number)."""
    number = task_number(like)
    if number is None or task_number(text) in (None, number):
        return text
    return TASK_HEADING_RE.sub(rf"\g<1>{number}\g<3>", text, count=1)


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def same_text(a: str, b: str) -> bool:
    """Whether two entry texts say the same (trailing blank lines and a task's number
    aside)."""
    return unnumbered(a).rstrip() == unnumbered(b).rstrip()


def task_number(text: str) -> int | None:
    """The number of the task heading ``text`` starts with, None without one."""
    match = TASK_HEADING_RE.match(text)
    return int(match.group(2)) if match else None


def join(parts: Iterable[str]) -> str:
    """Concatenate entry texts, each ending in a newline and separated by a blank line."""
    out: list[str] = []
    for part in parts:
        if out:
            previous = out[-1]
            if not previous.endswith("\n"):
                out.append("\n\n")
            elif not previous.endswith("\n\n"):
                out.append("\n")
        out.append(part)
    return "".join(out)


def replace_entry(text: str, key: str, new_text: str) -> str:
    """The document with one entry's text replaced (or removed when ``new_text`` is
    empty); raises KeyError for an unknown entry."""
    parts = entries(text)
    if key not in {e.key for e in parts}:
        raise KeyError(key)
    kept = [new_text if e.key == key else e.text for e in parts]
    return "".join(
        part if part.endswith("\n") or i == len(kept) - 1 else part + "\n"
        for i, part in enumerate(p for p in kept if p)
    )


_WS = re.compile(r"\s+")


def contains_entry(document: str, entry_text: str) -> bool:
    """Whether an entry's text appears in a document, whitespace and case aside."""
    return _WS.sub(" ", entry_text.strip().lower()) in _folded(document)


@lru_cache(maxsize=8)
def _folded(document: str) -> str:
    """``document`` lower-cased with its runs of whitespace made one space: once per
    document, however many entries are looked for in it."""
    return _WS.sub(" ", document.lower())
