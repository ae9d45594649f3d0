from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryui", "0026_file_blob_without_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="proposal",
            name="duplicate_acks",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="entrycheck",
            name="label_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="entrycheck",
            name="labels_missing",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
