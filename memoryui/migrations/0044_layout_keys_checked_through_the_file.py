import django.db.models.deletion
from django.db import migrations, models

# The layout of a rollout, raw memory, rollout summary and search document is a copy of
# its file's, whose key the database checks: these four keys are no longer checked by
# the database, one look-up per row when an import commits. Django's own cascade still
# deletes the rows with their layout (memoryui/models/rollouts.py).


class Migration(migrations.Migration):

    dependencies = [
        ('memoryui', '0043_search_vectors_after_the_import'),
    ]

    operations = [
        migrations.AlterField(
            model_name='rawmemory',
            name='layout',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='raw_memories', to='memoryui.layout'),
        ),
        migrations.AlterField(
            model_name='rollout',
            name='layout',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollouts', to='memoryui.layout'),
        ),
        migrations.AlterField(
            model_name='rolloutsummary',
            name='layout',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollout_summaries', to='memoryui.layout'),
        ),
        migrations.AlterField(
            model_name='searchdocument',
            name='layout',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='search_documents', to='memoryui.layout'),
        ),
    ]
