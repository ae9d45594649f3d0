from django.db import migrations

# PostgreSQL: the documents' tsvector (migration 0003) was a generated column, computed
# inside every import's transaction, where it was half of the database's work. It becomes
# a plain column, filled after the import commits (memoryui/search.py, index_pending); the
# vectors already computed are kept. A partial index finds the documents still without
# one, and a trigger clears the vector of a document whose body changes, so that it is
# computed again. Other databases have no such column.
FORWARD = [
    "ALTER TABLE memoryui_searchdocument ALTER COLUMN search DROP EXPRESSION",
    "CREATE INDEX memoryui_searchdocument_unindexed ON memoryui_searchdocument (layout_id) "
    "WHERE search IS NULL",
    """
    CREATE FUNCTION memoryui_searchdocument_body_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        NEW.search := NULL;
        RETURN NEW;
    END
    $$
    """,
    "CREATE TRIGGER memoryui_searchdocument_body_changed "
    "BEFORE UPDATE OF body ON memoryui_searchdocument FOR EACH ROW "
    "WHEN (OLD.body IS DISTINCT FROM NEW.body) "
    "EXECUTE FUNCTION memoryui_searchdocument_body_changed()",
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS memoryui_searchdocument_body_changed ON memoryui_searchdocument",
    "DROP FUNCTION IF EXISTS memoryui_searchdocument_body_changed()",
    "DROP INDEX IF EXISTS memoryui_searchdocument_unindexed",
    "DROP INDEX IF EXISTS memoryui_searchdocument_search",
    "ALTER TABLE memoryui_searchdocument DROP COLUMN search",
    "ALTER TABLE memoryui_searchdocument ADD COLUMN search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', body)) STORED",
    "CREATE INDEX memoryui_searchdocument_search ON memoryui_searchdocument USING gin (search)",
]


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in FORWARD:
            schema_editor.execute(sql)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in BACKWARD:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("memoryui", "0042_workspace_rows_written_at")]
    operations = [migrations.RunPython(forward, backward)]
