import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
application = get_wsgi_application()


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
