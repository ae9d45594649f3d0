"""The JSON API under ``/api/`` (django-ninja): its schema at ``/api/openapi.json``, its
browsable docs at ``/api/docs`` (Swagger UI served from django-ninja's own static
files, no CDN)."""

from __future__ import annotations

from typing import Any

from . import endpoints, store  # noqa: F401  (registers the endpoints)
from .core import api


def urls() -> tuple[list[Any], str, str]:
    """``api.urls`` with Django's login requirement lifted: the API authenticates each
    request by its bearer token instead of the session."""
    patterns, app_name, namespace = api.urls
    for pattern in _flatten(patterns):
        pattern.callback.login_required = False
    return patterns, app_name, namespace


def _flatten(patterns: list[Any]) -> list[Any]:
    out = []
    for p in patterns:
        if hasattr(p, "url_patterns"):
            out.extend(_flatten(p.url_patterns))
        else:
            out.append(p)
    return out
