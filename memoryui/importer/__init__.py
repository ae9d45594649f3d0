"""Import a workspace (directory or SDK snapshot tar) into the database.

A re-runnable sync: unchanged files are skipped, changed ones are stored again and
re-parsed, files gone from disk are marked missing (never deleted), and a changed
``MEMORY.md`` / ``memory_summary.md`` becomes a new version attributed to the agent.
Nothing on disk is ever written. Bad input becomes an entry in the report's errors and
the rest of the import goes on.

Its parts, each using only those listed after it:

- ``imports``: the ways in (``import_workspace``, ``sync_paths``), workspace names and
  limits, the workspace's row lock;
- ``syncing``: layouts, file rows, blobs and parsed rows brought to what was read;
- ``versions``: document and skill versions, the agent's proposals;
- ``reports``: the report and the import run (``ImportResult``, ``LayoutCounts``);
- ``parsing``: the rows parsed from each new or changed file;
- ``reading``: the tree read from a directory or an archive;
- ``bulk``: fresh planner statistics after a large import (the bulk loading itself,
  ``COPY`` on PostgreSQL and ``executemany`` elsewhere, is ``memoryui.bulk``).
"""

from .imports import (
    WORKSPACE_NAME_RE,
    default_limits,
    default_name,
    import_workspace,
    sync_paths,
    valid_workspace_name,
)
from .reading import Progress
from .reports import ImportResult, LayoutCounts

__all__ = [
    "WORKSPACE_NAME_RE",
    "ImportResult",
    "LayoutCounts",
    "Progress",
    "default_limits",
    "default_name",
    "import_workspace",
    "sync_paths",
    "valid_workspace_name",
]
