"""Entry-level comparison, assembly and three-way merge of MEMORY.md and
memory_summary.md, for reviewing consolidations like pull requests.

An entry is what a reviewer decides on. In a document of the SDK's shape (``# Task
Group:`` blocks) that is the SDK's own unit: a task group's head (its title, ``scope:``
and place) is one entry, and each ``## Task <n>`` and each block-level section inside
it is another. Other documents keep their top-level blocks as entries. Entries are
matched across versions by kind and title (a task also by the first rollout it cites),
never by a task's number: the number is rendered, not reviewed.

Its parts, by purpose (every public name is importable from ``generation.review``):

- ``document``: a document's entries, their keys, titles and task numbers, joining them;
- ``changes``: Change, what happened to an entry; ``comparison``: ``compare``, ``changed``;
- ``pairing``: entries renamed, rewritten, merged or split; ``repeated``: duplicates
  (in a whole document, or in what a review's decisions make of it);
- ``numbering``: the result's order, task numbers and ``[Task n]`` references;
- ``assembly``: the document a review's decisions produce; ``three_way``: ``merge``.
"""

from .assembly import ACCEPT, REJECT, assemble
from .changes import Change
from .comparison import TASK_REF_RE, changed, compare, following
from .document import (
    TASK_HEADING_RE,
    TASK_NUMBER_RE,
    Entry,
    Place,
    contains_entry,
    entries,
    entry_starts,
    group_title,
    interned,
    join,
    member_key,
    normalize,
    numbered_like,
    place_of,
    replace_entry,
    same_text,
    task_title,
    unnumbered,
    with_members,
)
from .numbering import renumber
from .pairing import (
    CANDIDATES,
    CITED_RATIO,
    CITED_SHARE,
    MIN_WORDS,
    PAIR_RATIO,
    PART_CONTAINED,
    PART_RATIO,
    RATIO_BUDGET,
    ROLLOUT_CITED_RE,
    SPLIT_SHARE,
    content_words,
    pair,
)
from .repeated import (
    DUPLICATE_CITED,
    DUPLICATE_WORDS,
    duplicate_scope,
    duplicates,
    key_base,
    scoped_duplicates,
)
from .three_way import Conflict, Merge, merge

__all__ = [
    "ACCEPT",
    "CANDIDATES",
    "CITED_RATIO",
    "CITED_SHARE",
    "Change",
    "Conflict",
    "DUPLICATE_CITED",
    "DUPLICATE_WORDS",
    "Entry",
    "Place",
    "MIN_WORDS",
    "Merge",
    "PAIR_RATIO",
    "PART_CONTAINED",
    "PART_RATIO",
    "REJECT",
    "RATIO_BUDGET",
    "ROLLOUT_CITED_RE",
    "SPLIT_SHARE",
    "TASK_HEADING_RE",
    "TASK_NUMBER_RE",
    "TASK_REF_RE",
    "assemble",
    "changed",
    "compare",
    "contains_entry",
    "content_words",
    "duplicate_scope",
    "duplicates",
    "entries",
    "entry_starts",
    "following",
    "key_base",
    "group_title",
    "interned",
    "join",
    "member_key",
    "merge",
    "normalize",
    "numbered_like",
    "place_of",
    "pair",
    "renumber",
    "replace_entry",
    "same_text",
    "scoped_duplicates",
    "task_title",
    "unnumbered",
    "with_members",
]
