"""The audit log kept webhook receivers' full URLs (a path often carries a secret, and
viewers can download the log): keep their origin only, as new events do."""

from urllib.parse import urlsplit

from django.db import migrations


def origin(url):
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "(invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def forwards(apps, schema_editor):
    AuditEvent = apps.get_model("memoryui", "AuditEvent")
    events = AuditEvent.objects.filter(action__in=["webhook.create", "webhook.delete"])
    for event in events.only("pk", "target").iterator():
        trimmed = origin(event.target)
        if trimmed != event.target:
            AuditEvent.objects.filter(pk=event.pk).update(target=trimmed)


class Migration(migrations.Migration):
    dependencies = [("memoryui", "0021_entry_checks")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
