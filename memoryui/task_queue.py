"""Sending a background task from a service, by the task's name.

The tasks (``memoryui.tasks``) sit on top of the services they run: a task calls the
pipeline, the importer, the write-back. A service that must start one (a webhook's
delivery, a notification's mail, a saved version's lint, a sandbox upload's merge) would
otherwise import the module that imports it. Instead it names the task here, and the task
is looked up in the Celery app's registry, which the app's autodiscovery fills from
``memoryui.tasks`` (in a worker at its start, in any other process at its first send).

The lookup returns the task object itself, so ``.delay`` runs eagerly where Celery is
configured to, and a test that replaces a task's ``delay`` sees the call.
"""

import logging
from typing import Any

log = logging.getLogger(__name__)


def task(name: str) -> Any:
    """The task registered under ``name``, its full name as ``memoryui/tasks.py`` gives it
    (``memoryui.tasks.lint_version``); Celery's ``NotRegistered`` names an unknown one."""
    # Deferred: Celery (and its app) load when a task is first sent, not in every
    # process that starts Django (the services that send tasks load with the models).
    from memoryui.celery import app  # noqa: PLC0415

    if name not in app.tasks:
        # A process that has sent no task yet (a web server, a command) has not loaded
        # memoryui.tasks: the app's autodiscovery fills the registry, as a starting
        # worker's does (once; a name still missing then is Celery's NotRegistered).
        app.loader.import_default_modules()
    return app.tasks[name]


def send(name: str, *args: Any) -> None:
    """Send the task now (the caller is past its commit, or has none)."""
    task(name).delay(*args)


def send_on_commit(name: str, *args: Any) -> None:
    """Send the task once the current transaction commits (at once outside one)."""
    task(name).delay_on_commit(*args)


def send_best_effort(name: str, *args: Any, what: str) -> bool:
    """Send the task now, where failing to reach the broker costs only work done ahead
    (a lint the page or the write-back would otherwise do itself): logged as a warning,
    naming ``what`` was not queued. False when the broker could not be reached."""
    # Deferred with Celery: a process that never sends a task does not load kombu.
    from kombu.exceptions import OperationalError  # noqa: PLC0415

    try:
        send(name, *args)
    except OperationalError as exc:
        log.warning("could not queue %s: %s", what, exc)
        return False
    return True
