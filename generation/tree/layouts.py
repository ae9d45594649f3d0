"""Layouts: the (memories dir, sessions dir) pairs of a workspace, and which layout and
file kind each path belongs to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from generation.kinds import FileKind

from .entries import Entry, normalize_member_name
from .text import header_value

DEFAULT_MEMORIES_DIR = "memories"
DEFAULT_SESSIONS_DIR = "sessions"


@dataclass(frozen=True)
class LayoutDirs:
    memories_dir: str
    sessions_dir: str


_MARKER_DIRS = ("raw_memories", "rollout_summaries")
_MARKER_FILES = ("memory_summary.md", "phase_two_selection.json", "raw_memories.md")
_LAYOUT_SUBDIRS = ("raw_memories", "rollout_summaries", "skills")


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def rollout_folder(rollout_path: str) -> str:
    """All ``find_layouts`` reads of a raw memory's ``rollout_path`` header: the folder
    of the rollout it names, as a value it reads alike ("" for none). An import keeps
    this, not the header, until the layouts are found: one layout's raw memories share
    it (100,000 headers held 9 MB)."""
    parent = _parent(rollout_path.strip())
    return f"{parent}/" if parent else ""


def discover_layouts(entries: Iterable[Entry]) -> list[LayoutDirs]:
    """Find every (memories_dir, sessions_dir) pair among read entries."""
    entries = list(entries)
    return find_layouts(
        (e.path for e in entries if e.is_dir),
        (e.path for e in entries if not e.is_dir),
        (
            (e.path, header_value(e.data, "rollout_path"))
            for e in entries
            if e.data is not None and is_raw_memory_path(e.path)
        ),
    )


def is_raw_memory_path(path: str) -> bool:
    return path.endswith(".md") and _parent(path).rpartition("/")[2] == "raw_memories"


def find_layouts(
    dir_paths: Iterable[str], file_paths: Iterable[str], rollout_paths: Iterable[tuple[str, str]]
) -> list[LayoutDirs]:
    """Find every (memories_dir, sessions_dir) pair in a workspace.

    A memories dir is any directory holding the SDK's markers. Its sessions dir comes
    from the ``rollout_path`` headers of its raw memories (``rollout_paths``: each raw
    memory's path with that header, or its ``rollout_folder``), else from the naming
    convention (``memories/x`` pairs with ``sessions/x``). A directory of rollouts that
    no memories dir claims becomes a layout of its own by the same convention.
    """
    dirs = set(dir_paths)
    files = list(file_paths)
    for f in files:  # archives and partial trees may omit directory members
        parent = _parent(f)
        while parent and parent not in dirs:
            dirs.add(parent)
            parent = _parent(parent)

    candidates: set[str] = set()
    for d in dirs:
        if d.rpartition("/")[2] in _MARKER_DIRS:
            candidates.add(_parent(d))
    for f in files:
        if f.rpartition("/")[2] in _MARKER_FILES:
            candidates.add(_parent(f))
    # A directory inside another layout's own subdirectories is data, not a layout.
    candidates = {
        c
        for c in candidates
        if c
        and not any(
            c == f"{o}/{sub}" or c.startswith(f"{o}/{sub}/")
            for o in candidates
            for sub in _LAYOUT_SUBDIRS
        )
    }

    header_sessions: dict[str, Counter[str]] = {c: Counter() for c in candidates}
    for path, rollout_path in rollout_paths:
        memories_dir = _parent(_parent(path))
        if memories_dir not in candidates or not rollout_path:
            continue
        sessions_dir = normalize_member_name(_parent(rollout_path.strip()))
        if sessions_dir and ".." not in sessions_dir.split("/"):
            header_sessions[memories_dir][sessions_dir] += 1

    layouts: dict[str, str] = {}
    for c in sorted(candidates):
        if header_sessions[c]:
            layouts[c] = header_sessions[c].most_common(1)[0][0]
        else:
            layouts[c] = _convention_sessions_dir(c)

    claimed_sessions = set(layouts.values())
    rollout_dirs = {_parent(f) for f in files if f.endswith(".jsonl") and _parent(f)}
    for d in sorted(rollout_dirs - claimed_sessions):
        conventional = _convention_memories_dir(d)
        if conventional and conventional not in layouts:
            layouts[conventional] = d
    return [LayoutDirs(m, s) for m, s in sorted(layouts.items())]


def _convention_sessions_dir(memories_dir: str) -> str:
    parts = memories_dir.split("/")
    if DEFAULT_MEMORIES_DIR in parts:
        i = parts.index(DEFAULT_MEMORIES_DIR)
        parts[i] = DEFAULT_SESSIONS_DIR
        return "/".join(parts)
    return f"{memories_dir}_sessions"


def _convention_memories_dir(sessions_dir: str) -> str | None:
    parts = sessions_dir.split("/")
    if DEFAULT_SESSIONS_DIR in parts:
        i = parts.index(DEFAULT_SESSIONS_DIR)
        parts[i] = DEFAULT_MEMORIES_DIR
        return "/".join(parts)
    return None


class Placement(NamedTuple):
    """Where a workspace file belongs: its layout (None outside every layout) and kind.
    (A tuple: an import makes one per file.)"""

    layout: LayoutDirs | None
    kind: FileKind


_TOP_LEVEL_KINDS = {
    "MEMORY.md": FileKind.MEMORY_INDEX,
    "memory_summary.md": FileKind.MEMORY_SUMMARY,
    "raw_memories.md": FileKind.RAW_MEMORIES_MERGED,
    "phase_two_selection.json": FileKind.SELECTION,
}


def classify(path: str, layouts: list[LayoutDirs], *, is_dir: bool = False) -> Placement:
    """Assign a path to the layout with the longest matching directory prefix."""
    # Once per file of an import: no string built per layout to compare with.
    best: LayoutDirs | None = None
    best_len = -1
    is_memories = False
    for layout in layouts:
        base = layout.memories_dir
        n = len(base)
        if n > best_len and path.startswith(base) and path[n : n + 1] == "/":
            best, best_len, is_memories = layout, n, True
        base = layout.sessions_dir
        n = len(base)
        if n > best_len and path.startswith(base) and path[n : n + 1] == "/":
            best, best_len, is_memories = layout, n, False
    if is_dir:
        return Placement(best, FileKind.DIRECTORY)
    if best is None:
        return Placement(None, FileKind.WORKSPACE_FILE)
    layout = best
    rel = path[best_len + 1 :]
    parts = rel.split("/")
    if not is_memories:
        kind = FileKind.ROLLOUT if len(parts) == 1 and rel.endswith(".jsonl") else None
    elif len(parts) == 1:
        kind = _TOP_LEVEL_KINDS.get(rel)
    elif parts[0] == "skills":
        kind = FileKind.SKILL
    elif len(parts) == 2 and rel.endswith(".md") and parts[0] == "raw_memories":
        kind = FileKind.RAW_MEMORY
    elif len(parts) == 2 and rel.endswith(".md") and parts[0] == "rollout_summaries":
        kind = FileKind.ROLLOUT_SUMMARY
    else:
        kind = None
    return Placement(layout, kind or FileKind.WORKSPACE_FILE)


def skill_name(layout_relative_path: str) -> str:
    """``skills/<name>/...`` -> ``<name>``."""
    parts = layout_relative_path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "skills" else ""
