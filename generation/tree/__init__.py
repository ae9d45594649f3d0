"""The on-disk memory tree of an Agents SDK sandbox workspace.

This package is the only code that knows the file formats: how a workspace directory or a
``LocalSnapshot`` tar is read without following links or leaving the workspace, how
layouts are discovered, and how each kind of memory file is parsed. It never imports
Django. Its parts, by what they read:

- ``entries``: what a read yields (Entry, Member, Link, Problem), its limits and TreeError;
- ``directory``: a workspace directory, and ``read_source`` (a directory or an archive);
- ``archive``: a snapshot tar; ``archive_index``: where its members sit, to copy them;
- ``layouts``: the (memories dir, sessions dir) pairs and each path's file kind;
- ``text``: decoding, the SDK's header lines, lone surrogates in JSON;
- ``rollouts``, ``raw_memories``, ``rollout_summaries``, ``selection``: one file kind each.

Every public name is importable from ``generation.tree`` itself.
"""

from .archive import (
    MAX_EXTENDED_HEADERS,
    SPARSE_REFUSED,
    HeaderLimitExceeded,
    check_tar_archive,
    read_archive,
    read_archive_lazily,
)
from .archive_index import (
    TAG_CHARS,
    ArchiveIndex,
    Blocks,
    IndexedMember,
    IndexMismatch,
    check_indexed,
    copy_indexed,
    indexed_entries,
    indexed_members,
    pack_index,
    unpack_index,
)
from .directory import (
    Listing,
    Stat,
    read_directory,
    read_file,
    read_source,
    scan_directory,
    scan_listing,
)
from .entries import (
    Entry,
    Limits,
    Link,
    Member,
    Problem,
    TreeError,
    human_size,
    link_stays_inside,
    sha256,
    total_exceeded,
)
from .layouts import (
    DEFAULT_MEMORIES_DIR,
    DEFAULT_SESSIONS_DIR,
    LayoutDirs,
    Placement,
    classify,
    discover_layouts,
    find_layouts,
    is_raw_memory_path,
    rollout_folder,
    skill_name,
)
from .raw_memories import (
    RAW_MEMORY_HEADERS,
    RawMemory,
    dump_raw_memory,
    merge_raw_memories,
    parse_raw_memory,
    updated_at_sort_key,
)
from .rollout_summaries import (
    SLUG_RE,
    SUMMARY_HEADERS,
    RolloutSummary,
    dump_rollout_summary,
    normalize_slug,
    parse_rollout_summary,
)
from .rollouts import (
    MAX_JSON_DEPTH,
    ROLLOUT_ID_RE,
    SEARCH_TEXT_LIMIT,
    TERMINAL_STATES,
    ParsedRollout,
    Segment,
    iter_segments,
    message_text,
    parse_rollout,
    rollout_search_text,
)
from .selection import (
    Selection,
    SelectionDiff,
    SelectionItem,
    diff_selection,
    dump_selection,
    parse_selection,
    select_for_consolidation,
)
from .text import (
    decode_text,
    header_value,
    read_header_block,
    read_headers,
    split_header_block,
    utf8_problem,
)

__all__ = [
    "ArchiveIndex",
    "Blocks",
    "DEFAULT_MEMORIES_DIR",
    "DEFAULT_SESSIONS_DIR",
    "Entry",
    "HeaderLimitExceeded",
    "IndexMismatch",
    "IndexedMember",
    "LayoutDirs",
    "Limits",
    "Link",
    "Listing",
    "MAX_EXTENDED_HEADERS",
    "MAX_JSON_DEPTH",
    "Member",
    "ParsedRollout",
    "Placement",
    "Problem",
    "RAW_MEMORY_HEADERS",
    "ROLLOUT_ID_RE",
    "RawMemory",
    "RolloutSummary",
    "SEARCH_TEXT_LIMIT",
    "SLUG_RE",
    "SPARSE_REFUSED",
    "SUMMARY_HEADERS",
    "Segment",
    "Selection",
    "SelectionDiff",
    "SelectionItem",
    "Stat",
    "TAG_CHARS",
    "TERMINAL_STATES",
    "TreeError",
    "check_tar_archive",
    "classify",
    "check_indexed",
    "copy_indexed",
    "indexed_entries",
    "indexed_members",
    "decode_text",
    "diff_selection",
    "discover_layouts",
    "dump_raw_memory",
    "dump_rollout_summary",
    "dump_selection",
    "find_layouts",
    "header_value",
    "human_size",
    "is_raw_memory_path",
    "iter_segments",
    "link_stays_inside",
    "merge_raw_memories",
    "message_text",
    "normalize_slug",
    "pack_index",
    "parse_raw_memory",
    "parse_rollout",
    "parse_rollout_summary",
    "parse_selection",
    "read_archive",
    "read_archive_lazily",
    "read_directory",
    "read_file",
    "read_header_block",
    "read_headers",
    "read_source",
    "rollout_folder",
    "rollout_search_text",
    "scan_directory",
    "scan_listing",
    "select_for_consolidation",
    "sha256",
    "skill_name",
    "split_header_block",
    "total_exceeded",
    "unpack_index",
    "updated_at_sort_key",
    "utf8_problem",
]
