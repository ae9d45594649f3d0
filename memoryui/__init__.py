from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    """``memoryui.celery_app``, created on first use: the Celery app (and Celery itself)
    is for the worker and the code that sends tasks (``memoryui.tasks`` imports it), not
    for every command and page. ``celery -A memoryui`` finds it in ``memoryui.celery``."""
    if name == "celery_app":
        from .celery import app  # noqa: PLC0415 (deferred: Celery loads on first use)

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
