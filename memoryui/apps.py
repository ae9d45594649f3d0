from typing import Any

from django.apps import AppConfig
from django.core import checks


class MemoryuiConfig(AppConfig):
    name = "memoryui"
    verbose_name = "memoryui"

    def ready(self) -> None:
        # Write-backs and exports that died are finished or undone when a worker starts
        # (here) or the web server does (wsgi.py), never merely on start-up of Django:
        # migrations and other management commands must not touch workspaces.
        from celery.signals import worker_ready

        from . import webhooks  # noqa: F401  (its signal receivers and Celery task)
        from .recovery import recover_at_start

        worker_ready.connect(recover_at_start, weak=False, dispatch_uid="memoryui-recover")

        checks.register(check_workspace_routes, checks.Tags.urls)


def check_workspace_routes(app_configs: Any = None, **kwargs: Any) -> list[checks.Error]:
    """A view under ``w/<name>/`` without ``roles.workspace_view`` would serve anyone."""
    from .roles import unguarded_workspace_routes

    return [
        checks.Error(
            f"The view of {route!r} does not check the workspace role.",
            hint="Wrap it in memoryui.roles.workspace_view(Role...).",
            id="memoryui.E001",
        )
        for route in unguarded_workspace_routes()
    ]
