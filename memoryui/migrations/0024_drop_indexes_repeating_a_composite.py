"""Drop the single-column foreign-key indexes that repeat the first column of a
composite index on the same table (layout on rollouts, raw memories, rollout summaries
and files; workspace on files): every query they served uses the
composite one, and an import of a large tree paid for each of them on every row."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memoryui', '0023_operation_stats'),
    ]

    operations = [
        migrations.AlterField(
            model_name='rawmemory',
            name='layout',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='raw_memories', to='memoryui.layout'),
        ),
        migrations.AlterField(
            model_name='rollout',
            name='layout',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollouts', to='memoryui.layout'),
        ),
        migrations.AlterField(
            model_name='rolloutsummary',
            name='layout',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollout_summaries', to='memoryui.layout'),
        ),
        migrations.AlterField(
            model_name='workspacefile',
            name='layout',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='files', to='memoryui.layout'),
        ),
        migrations.AlterField(
            model_name='workspacefile',
            name='workspace',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='files', to='memoryui.workspace'),
        ),
    ]
