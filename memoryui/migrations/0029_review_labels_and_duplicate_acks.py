import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryui", "0028_workspace_known_hosts"),
    ]

    operations = [
        migrations.AddField(
            model_name="proposal",
            name="approvals",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="generationsettings",
            name="required_approvals",
            field=models.PositiveSmallIntegerField(
                default=1,
                help_text="Reviewers who must approve a proposal before it applies (1 or 2): "
                "with 2, the first approval leaves it pending and a second reviewer's applies it.",
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(2),
                ],
            ),
        ),
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
