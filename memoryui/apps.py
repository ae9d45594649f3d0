from typing import Any

from django.apps import AppConfig
from django.core import checks


class MemoryuiConfig(AppConfig):
    name = "memoryui"
    verbose_name = "memoryui"

    def ready(self) -> None:
        # Light on purpose: every command and process runs this. The Celery app, which
        # recovers interrupted write-backs when a worker starts, lives in memoryui.celery.
        from . import webhooks  # noqa: F401  (its signal receivers)

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
