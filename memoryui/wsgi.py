import gc
import os
from contextlib import suppress
from typing import Any

from django.core.wsgi import get_wsgi_application

from memoryui.configuration import read_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
# A wrong setting is one line naming it, not a traceback in gunicorn's worker; the status
# is gunicorn's "App failed to load", which stops gunicorn rather than boot the worker again.
read_settings_or_exit("memoryui.wsgi", status=4)
django_application = get_wsgi_application()


def application(environ: dict[str, Any], start_response: Any) -> Any:
    """Django's application, with the client's socket (gunicorn's) given a timeout of
    ``MEMORYUI_CLIENT_STALL_SECONDS``: a client that stops reading a restore or stops
    sending an upload for that long is cut off, and the thread it held (gunicorn's
    gthread workers, as compose runs them) goes back to work. A slow client that keeps
    moving, however slowly, is never cut."""
    from django.conf import settings  # noqa: PLC0415 (Django is set up above)

    client = environ.get("gunicorn.socket")
    if client is not None and settings.MEMORYUI_CLIENT_STALL_SECONDS:
        with suppress(OSError):
            client.settimeout(settings.MEMORYUI_CLIENT_STALL_SECONDS)
    return django_application(environ, start_response)


def _recover() -> None:
    """Write-backs and exports that died are finished or undone before the first request
    (runserver loads this module too)."""
    from memoryui.recovery import recover_at_start  # noqa: PLC0415 (deferred: Django is set up first)

    recover_at_start()


def _load_routes() -> None:
    """Every route now, as the worker process starts (gunicorn forks its workers before
    they import this module): the dashboard's views, the admin and the API with
    django-ninja and pydantic, which commands never load. Otherwise each worker's
    first request, a sandbox's restore say, would wait a second for them."""
    from django.urls import get_resolver  # noqa: PLC0415 (deferred: Django is set up first)

    get_resolver().url_patterns  # noqa: B018 (the property imports the URLconf)


_recover()
_load_routes()
# What start-up made (Django, the routes, the API's schemas) lives as long as the process:
# kept out of the garbage collector's passes, which otherwise walk it all again and again
# while a request streams tens of thousands of archive members.
gc.freeze()
