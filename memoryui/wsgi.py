import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
application = get_wsgi_application()


def _recover() -> None:
    """Write-backs and exports that died are finished or undone before the first request
    (runserver loads this module too)."""
    from memoryui.recovery import recover_at_start  # noqa: PLC0415 (deferred: Django is set up first)

    recover_at_start()


_recover()
