"""The API's endpoints, a module by purpose. Each one checks the same role as the page
that does the same thing, and calls the same functions (curation, pipeline, importer,
write-back, export)."""

# Imported (so registered) in the order the schema and the docs list them.
# isort: off
from . import workspaces, memory, rollouts, proposals, actions  # noqa: F401
# isort: on
