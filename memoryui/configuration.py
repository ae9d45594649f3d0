"""A configuration error (a setting missing or wrong in the environment) is one line that
names the setting, with no traceback, whichever entry point reads the settings first:
``manage.py``, the Celery worker or beat (``memoryui.celery``) or the web server
(``memoryui.wsgi``, as gunicorn loads it). Imports nothing of Django's but its exception."""

import sys

from django.core.exceptions import ImproperlyConfigured


def configuration_error_line(program: str, exc: ImproperlyConfigured) -> str:
    message = " ".join(str(exc).split())  # one line, whoever raised it
    return f"{program}: configuration error: {message}"


def read_settings_or_exit(program: str, status: int = 1) -> None:
    """Read the settings now (``memoryui.settings`` reads the environment as it is
    imported): if they are wrong, say so in one line and exit with ``status``, rather than
    let the process that imported us print a traceback (Celery's command line, gunicorn's
    worker). Nothing happens once the settings are read."""
    from django.conf import settings  # noqa: PLC0415 (the settings module is read here, in the try)

    try:
        settings.SECRET_KEY  # noqa: B018 (the first setting read imports the settings module)
    except ImproperlyConfigured as exc:
        print(configuration_error_line(program, exc), file=sys.stderr, flush=True)
        raise SystemExit(status) from None
