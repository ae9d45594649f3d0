"""Jobs and phase two remember when their task was sent, so that one whose message was
lost with a worker can be sent again."""

from django.db import migrations, models
from django.utils import timezone


def dispatched_now(apps, schema_editor):
    PhaseOneJob = apps.get_model("memoryui", "PhaseOneJob")
    PhaseOneJob.objects.filter(dispatched=True).update(dispatched_at=timezone.now())


def dispatched_flag(apps, schema_editor):
    PhaseOneJob = apps.get_model("memoryui", "PhaseOneJob")
    PhaseOneJob.objects.filter(dispatched_at__isnull=False).update(dispatched=True)


class Migration(migrations.Migration):
    dependencies = [
        ("memoryui", "0009_approved_entries"),
    ]

    operations = [
        migrations.AddField(
            model_name="phaseonejob",
            name="dispatched_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="generationrun",
            name="phase_two_dispatched_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(dispatched_now, dispatched_flag),
        migrations.RemoveIndex(model_name="phaseonejob", name="job_window"),
        migrations.RemoveField(model_name="phaseonejob", name="dispatched"),
        migrations.AddIndex(
            model_name="phaseonejob",
            index=models.Index(fields=["run", "status", "dispatched_at"], name="job_window"),
        ),
    ]
