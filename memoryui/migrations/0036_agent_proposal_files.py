from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryui", "0035_judge_verdicts"),
    ]

    operations = [
        migrations.AddField(
            model_name="proposal",
            name="forgotten_decisions",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="proposal",
            name="clashes",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="uploadedsnapshot",
            name="own_files",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="uploadedsnapshot",
            name="kept_files",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
