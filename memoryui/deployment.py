"""What a deployment must provide, read from the settings: the modules they name (so an
install that lacks one fails a check, not a worker at start) and the directories that one
process writes and another reads (so web, workers and beat must share them, unless they
are in object storage).

``python manage.py check_deployment`` prints both and exits 1 when a module is missing;
the production test runs it in the runtime-only environment the Dockerfile builds."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from kombu.transport import TRANSPORT_ALIASES

from . import object_storage
from .writeback import journal_base


def _import(path: str) -> None:
    """Import a module, or the module of ``module.attribute`` and check the attribute;
    ImportError naming what is missing otherwise."""
    try:
        importlib.import_module(path)
        return
    except ModuleNotFoundError as exc:
        if exc.name != path:  # the module exists but needs one that is not installed
            raise
    module, _, attribute = path.rpartition(".")
    if not hasattr(importlib.import_module(module), attribute):
        raise ImportError(f"{module} has no {attribute}")


def named_modules() -> list[str]:
    """Every module the settings name: apps, middleware, backends, callables, the
    database engine, the storages, the log handlers and the broker's transport."""
    names: list[str] = list(settings.INSTALLED_APPS)
    names += settings.MIDDLEWARE + settings.AUTHENTICATION_BACKENDS
    names += [s["BACKEND"] for s in settings.STORAGES.values()]
    templates = cast(list[dict[str, Any]], settings.TEMPLATES)
    logging_config = cast(dict[str, Any], settings.LOGGING)
    beat = cast(dict[str, dict[str, Any]], settings.CELERY_BEAT_SCHEDULE)
    for template in templates:
        names += [template["BACKEND"], *template.get("OPTIONS", {}).get("context_processors", [])]
    names += [db["ENGINE"] + ".base" for db in settings.DATABASES.values()]
    names += [h["class"] for h in logging_config.get("handlers", {}).values() if "class" in h]
    names += [settings.EMAIL_BACKEND, settings.ROOT_URLCONF, settings.WSGI_APPLICATION]
    names.append(getattr(settings, "AXES_HANDLER", ""))
    for name in dir(settings):
        if name.startswith("AXES_") and name.endswith("_CALLABLE"):
            names.append(getattr(settings, name))
    names += [entry["task"] for entry in beat.values()]
    return sorted({n for n in names if isinstance(n, str) and n})


def broker_transport() -> str:
    """The kombu transport module the broker URL needs (kombu imports it lazily, when a
    worker starts: a missing dependency shows only then)."""

    scheme = settings.CELERY_BROKER_URL.partition("://")[0]
    transport = TRANSPORT_ALIASES.get(scheme, f"kombu.transport.{scheme}:Transport")
    return transport.split(":")[0]


def missing_modules() -> dict[str, str]:
    """The named modules (and the broker's transport) that cannot be imported, with why."""
    missing: dict[str, str] = {}
    for name in [*named_modules(), broker_transport()]:
        try:
            _import(name)
        except ImportError as exc:
            missing[name] = str(exc)
    return missing


# What lives in the three named storages (``memoryui.object_storage``), by the names the
# check prints.
STORED = {"snapshots": "exports", "uploads": "uploads", "remote store": "snapshots"}


def shared_directories() -> dict[str, list[Path]]:
    """The directories web, workers and beat must share (the same volume, or one network
    file system), by what lives there: the workspaces (a write-back writes into them) and
    the write-back journal, and the uploads, exports and remote store unless they are in
    object storage (``object_stores``)."""

    shared = {
        "workspaces": list(settings.MEMORYUI_WORKSPACE_ROOTS),
        "journal": [journal_base()],
    }
    for what, alias in STORED.items():
        root = object_storage.local_root(alias)
        if root is not None:
            shared[what] = [root]
    return shared


def object_stores() -> dict[str, str]:
    """What lives in object storage instead of a shared directory, and where (bucket and
    prefix)."""
    stores = {}
    for what, alias in STORED.items():
        if object_storage.local_root(alias) is None:
            options = settings.STORAGES[alias].get("OPTIONS", {})
            stores[what] = f"s3://{options.get('bucket_name', '')}/{options.get('location', '')}"
    return stores
