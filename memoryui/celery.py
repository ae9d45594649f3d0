"""The Celery app, configured from Django's settings (namespace ``CELERY``). Imported by
the worker (``celery -A memoryui``) and by ``memoryui.tasks``, whose tasks it runs and
sends: never merely by starting Django."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")

app = Celery("memoryui")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["memoryui"])


@worker_ready.connect(weak=False, dispatch_uid="memoryui-recover")
def _recover_at_start(**kwargs: Any) -> None:
    """Write-backs and exports that died are finished or undone when a worker starts
    (here) or the web server does (wsgi.py), never merely on start-up of Django:
    migrations and other management commands must not touch workspaces."""
    from .recovery import recover_at_start  # noqa: PLC0415 (deferred: the app registry is not ready when the Celery app is made)

    recover_at_start(**kwargs)
