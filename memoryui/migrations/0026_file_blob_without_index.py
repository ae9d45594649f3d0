"""The files' index on their blob goes: nothing looks a file up by its content, and an
import writes every index of the table once per file (on PostgreSQL two: the b-tree and
its ``varchar_pattern_ops`` twin). Dropped by name, so that SQLite does not rebuild the
whole table as Django's AlterField of a foreign key would."""

import django.db.models.deletion
from django.db import migrations, models

INDEXES = ["memoryui_workspacefile_blob_id_580b7656", "memoryui_workspacefile_blob_id_580b7656_like"]


def drop(apps, schema_editor):
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def create(apps, schema_editor):
    table = schema_editor.quote_name("memoryui_workspacefile")
    schema_editor.execute(f'CREATE INDEX {schema_editor.quote_name(INDEXES[0])} ON {table} ("blob_id")')
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f'CREATE INDEX {schema_editor.quote_name(INDEXES[1])} ON {table} ("blob_id" varchar_pattern_ops)'
        )


class Migration(migrations.Migration):
    dependencies = [
        ("memoryui", "0025_uploaded_snapshot_member_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="workspacefile",
                    name="blob",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        to="memoryui.blob",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop, create)],
        ),
    ]
