"""Bad input is refused with a 400 and a message, never a server error: every route of
the URLconf is sent NUL bytes, invalid UTF-8, huge and non-numeric values in each
parameter it reads (found by watching which ones it reads) and in its path."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.db import transaction
from django.http import QueryDict
from django.test import Client
from django.urls import reverse

from memoryui import curation
from tests import routes
from tests.factories import make_user
from tests.routes import MD, World, all_routes

pytestmark = pytest.mark.django_db
world = routes.world

# Already percent-encoded, as a browser (or anyone) could send them.
FUZZ = {
    "NUL": "%00",
    "NUL inside": "a%00b",
    "invalid UTF-8": "%FF%FEx",
    "1 MB": "x" * 1_000_000,
    "huge number": "9" * 30,
    "negative": "-1",
    "not a number": "abc",
    "unicode digit": quote("²"),
    "line break": "a%0D%0Ab",
}
PATH_FUZZ = {"str": ["%00", "a%00b", "%FF%FE", "x" * 5_000], "int": ["9" * 30]}


def plausible(world: World, admin) -> dict[str, str]:
    """A sensible value for each parameter name the views read, so that the one being
    fuzzed gets past the others (an empty value leaves the parameter out)."""
    current = curation.latest(world.layout, MD)
    return {
        "document": MD,
        "decision": "accept",
        "key": world.entry_key(),
        "text": "# Task Group: fuzz\n\nscope: fuzz\n",
        "edited_text": "",
        "based_on": str(current.number) if current else "",
        "rollout_id": world.rollout_id,
        "reviewer": str(admin.pk),
        "action": "dry_run",
        "snapshot_id": "fuzz-1",
        "destination": "server",
        "username": "someone",
        "password": "wrong",
        "role": "viewer",
        "anchor": "entry-1",
        "q": "fuzz",
        "page": "1",
        "version": "1",
        "a": "1",
        "b": "1",
        "actor": "admin",
    }


def sensible(world: World, admin, keys: set[str]) -> dict[str, str]:
    values = plausible(world, admin)
    return {k: quote(values[k]) for k in sorted(keys) if values.get(k)}


class Recorder:
    """Which parameters the views read (QueryDict lookups), per route and method."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: set[str] = set()
        for method in ("get", "getlist", "__getitem__", "__contains__"):
            original = getattr(QueryDict, method)
            monkeypatch.setattr(QueryDict, method, self._wrap(original))

    def _wrap(self, original):  # type: ignore[no-untyped-def]
        def recording(qd, key, *args, **kwargs):  # type: ignore[no-untyped-def]
            if isinstance(key, str) and key != "csrfmiddlewaretoken":
                self.seen.add(key)
            return original(qd, key, *args, **kwargs)

        return recording


def send(client: Client, admin, method: str, path: str, params: dict[str, str]):
    """``params`` are percent-encoded already."""
    client.force_login(admin)
    encoded = "&".join(f"{quote(k)}={v}" for k, v in params.items())
    try:
        with transaction.atomic():  # a failed query must not abort the test's transaction
            return _send(client, method, path, encoded)
    except Exception as exc:  # the test client re-raises a view's exception
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def _send(client: Client, method: str, path: str, encoded: str) -> int:
    if method == "GET":
        return client.get(path + ("?" + encoded if encoded else "")).status_code
    return client.post(path, encoded, content_type="application/x-www-form-urlencoded").status_code


def test_no_route_answers_bad_parameters_with_a_server_error(world, monkeypatch):
    admin = make_user("admin", staff=True)
    client = Client()
    recorder = Recorder(monkeypatch)
    failures = []
    routes = all_routes()
    assert len(routes) > 30
    for route in routes:
        path = reverse(route.name, kwargs=world.kwargs(route))
        for method in ("GET", "POST"):
            recorder.seen.clear()
            send(client, admin, method, path, {})
            done: set[str] = set()
            while True:  # some parameters are read only once others are right
                send(client, admin, method, path, sensible(world, admin, recorder.seen))
                todo = recorder.seen - done
                if not todo:
                    break
                for key in sorted(todo):
                    done.add(key)
                    for label, value in FUZZ.items():
                        params = sensible(world, admin, recorder.seen)
                        params[key] = value
                        status = send(client, admin, method, path, params)
                        if not isinstance(status, int) or status >= 500:
                            failures.append((method, route.name, key, label, status))
    assert not failures, "\n".join(map(str, failures))


def test_no_route_answers_bad_path_arguments_with_a_server_error(world):
    admin = make_user("admin", staff=True)
    client = Client()
    failures = []
    for route in all_routes():
        kwargs = world.kwargs(route)
        for key, kind in route.converters.items():
            for value in PATH_FUZZ[kind]:
                marker = "zz-marker-zz" if kind == "str" else 987654321
                path = reverse(route.name, kwargs={**kwargs, key: marker})
                path = path.replace(str(marker), value)
                for method in ("GET", "POST"):
                    status = send(client, admin, method, path, {})
                    if not isinstance(status, int) or status >= 500:
                        failures.append((method, path[:120], status))
    assert not failures, "\n".join(map(str, failures))
