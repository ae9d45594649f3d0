"""The Celery app, configured from Django's settings (namespace ``CELERY``). Imported by
the worker (``celery -A memoryui``) and by ``memoryui.tasks``, whose tasks it runs and
sends: never merely by starting Django."""

import os
from pathlib import Path

from celery import Celery
from celery.schedules import crontab
from django.conf import settings

from .configuration import read_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
# `celery -A memoryui worker` (or beat) reads the settings here first: a wrong one is one
# line naming it, not Celery's "Unable to load celery application" and a traceback.
read_settings_or_exit("celery")

app = Celery("memoryui")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["memoryui"])
# The daily digests of watched workspaces (memoryui/notifications.py), at a fixed hour.
app.conf.beat_schedule = {
    **app.conf.beat_schedule,
    "send-digests": {
        "task": "memoryui.tasks.send_digests",
        "schedule": crontab(hour=settings.MEMORYUI_DIGEST_HOUR, minute=0),
        "options": {"expires": 3600},
    },
}


def _make_folders() -> None:
    """The file-system broker (the development default) reads and writes its folders
    from the first message on, and beat keeps its schedule beside them: made here, in
    every process that sends or runs a task, rather than when the settings are read."""

    folders = [Path(settings.CELERY_BEAT_SCHEDULE_FILENAME).parent]
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        keys = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")
        folders += [Path(str(options[key])) for key in keys]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)


_make_folders()
