from django.db import migrations

# PostgreSQL keeps a stored tsvector beside each document, indexed with GIN, so that a
# search neither recomputes it for every candidate row nor needs a trigger. Other
# databases search the body itself (see memoryui/search.py).
FORWARD = [
    "ALTER TABLE memoryui_searchdocument ADD COLUMN search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', body)) STORED",
    "CREATE INDEX memoryui_searchdocument_search ON memoryui_searchdocument USING gin (search)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS memoryui_searchdocument_search",
    "ALTER TABLE memoryui_searchdocument DROP COLUMN IF EXISTS search",
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
    dependencies = [("memoryui", "0002_search_documents")]
    operations = [migrations.RunPython(forward, backward)]
