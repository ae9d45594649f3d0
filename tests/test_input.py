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
from memoryui.importer import import_workspace
from memoryui.models import Comment, Layout
from tests import routes
from tests.factories import make_user
from tests.routes import MD, World, all_routes

pytestmark = pytest.mark.django_db
world = routes.world
shared_world = routes.shared_world

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
PATH_FUZZ = {
    "str": ["%00", "a%00b", "%FF%FE", "x" * 5_000],
    "int": ["9" * 30],
    "path": ["%00", "a%00b", "%FF%FE", "x" * 5_000, "../../MEMORY.md", "a/../../b"],
}


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


def sensible(values: dict[str, str], keys: set[str]) -> dict[str, str]:
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


class TestEveryRoute:
    """The route fuzz: every route of the URLconf on one world, made once."""

    def test_no_route_answers_bad_parameters_with_a_server_error(
        self, shared_world, monkeypatch, settings, tmp_path
    ):
        world = shared_world
        settings.MEMORYUI_SNAPSHOT_BASE_PATH = tmp_path / "snapshots"
        admin = make_user("admin", staff=True)
        client = Client()
        recorder = Recorder(monkeypatch)
        failures = []
        routes = all_routes()
        assert len(routes) > 30
        for route in routes:
            path = reverse(route.name, kwargs=world.kwargs(route))
            for method in ("GET", "POST"):
                values = plausible(world, admin)  # once per route: it reads the database
                recorder.seen.clear()
                send(client, admin, method, path, {})
                done: set[str] = set()
                while True:  # some parameters are read only once others are right
                    send(client, admin, method, path, sensible(values, recorder.seen))
                    todo = recorder.seen - done
                    if not todo:
                        break
                    for key in sorted(todo):
                        done.add(key)
                        for label, value in FUZZ.items():
                            params = sensible(values, recorder.seen)
                            params[key] = value
                            status = send(client, admin, method, path, params)
                            if not isinstance(status, int) or status >= 500:
                                failures.append((method, route.name, key, label, status))
        assert not failures, "\n".join(map(str, failures))

    def test_no_route_answers_bad_path_arguments_with_a_server_error(
        self, shared_world, settings, tmp_path
    ):
        world = shared_world
        settings.MEMORYUI_SNAPSHOT_BASE_PATH = tmp_path / "snapshots"
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


# --- sizes and the findings' cases, one by one ------------------------------------------


@pytest.fixture
def layout(db, workspace_copy):

    import_workspace(workspace_copy("small-a"), "a")
    return Layout.objects.get(workspace__name="a", memories_dir="memories/engineering")


def staff_client() -> Client:
    client = Client()
    client.force_login(make_user("admin", staff=True))
    return client


def test_an_entry_over_the_size_limit_is_refused_with_a_message_and_nothing_saved(layout):
    client = staff_client()
    url = reverse("memoryui:entry_edit", args=["a", layout.pk, MD])
    before = curation.latest(layout, MD)
    for size in (64 * 1024 + 1, 1024 * 1024):
        text = "# Task Group: big\n\n" + "x" * (size - 19)

        response = client.post(url, {"text": text, "based_on": before.number})

        assert response.status_code == 400
        page = response.content.decode()
        assert f"This entry is {size:,} bytes; the limit is 65,536 bytes (64 KiB" in page
        assert "Nothing was saved." in page and 'name="text"' in page  # the editor, text kept
        assert curation.latest(layout, MD).pk == before.pk

    at_the_limit = "# Task Group: big\n\n" + "x" * (64 * 1024 - 20) + "\n"
    assert client.post(url, {"text": at_the_limit, "based_on": before.number}).status_code == 302
    assert curation.latest(layout, MD).number == before.number + 1


def test_a_comment_over_the_size_limit_is_refused_with_a_message_and_nothing_saved(world):

    url = reverse("memoryui:proposal_comment", args=["a", world.layout.pk, world.proposal.pk])

    response = staff_client().post(url, {"text": "é" * (8 * 1024 + 1)})

    assert response.status_code == 400
    assert "This comment is 16,386 bytes; the limit is 16,384 bytes" in response.content.decode()
    assert not Comment.objects.exists()


def test_an_edit_made_while_reviewing_is_held_to_the_entry_limit(world):
    url = reverse("memoryui:proposal_decide", args=["a", world.layout.pk, world.proposal.pk])

    response = staff_client().post(
        url,
        {
            "document": MD,
            "decision": "accept",
            "key": world.entry_key(),
            "edited_text": "x" * (64 * 1024 + 1),
        },
    )

    assert response.status_code == 400
    assert "This entry is 65,537 bytes" in response.content.decode()
    assert not world.proposal.decisions.exists()


def test_nul_bytes_and_bad_numbers_get_a_400_that_says_what_is_wrong(layout):
    client = staff_client()
    audit = client.get(reverse("memoryui:audit_log", args=["a"]) + "?actor=%00")
    pin = client.post(reverse("memoryui:entry_pin", args=["a", layout.pk, MD]), {"key": "a\0b"})

    for response in (audit, pin):
        assert response.status_code == 400
        assert "Null characters are not allowed." in response.content.decode()


def test_assigning_a_reviewer_that_is_not_a_number_is_a_400(world):
    url = reverse("memoryui:proposal_assign", args=["a", world.layout.pk, world.proposal.pk])

    response = staff_client().post(url, {"reviewer": "abc"})

    assert response.status_code == 400
    assert "No such person." in response.content.decode()


def test_a_huge_entry_an_agent_wrote_is_folded_on_the_memory_page(workspace_copy, db):

    ws = workspace_copy("small-a")
    memory = ws / "memories" / "engineering" / "MEMORY.md"
    memory.chmod(0o644)
    lines = "".join(f"- step {i}: the agent kept writing and writing\n" for i in range(25_000))
    memory.write_text("# Task Group: runaway\n\nscope: all of it\n\n" + lines)
    import_workspace(ws, "a")
    layout = Layout.objects.get(workspace__name="a", memories_dir="memories/engineering")

    response = staff_client().get(reverse("memoryui:memory_md", args=["a", layout.pk]))

    page = response.content.decode()
    assert response.status_code == 200
    assert '<details class="folded"><summary>This entry is 1,' in page
    assert "<li>step 0: the agent kept writing and writing</li>" in page  # the head, rendered
    assert "- step 24999: the agent kept writing" in page  # the rest, as plain text
    assert "<li>step 24999:" not in page


def test_every_page_that_reads_a_page_number_refuses_one_that_is_not(world, monkeypatch):
    """``?page=abc`` (or 0, or ²) is a 400 saying what is wrong wherever pages are
    numbered, found by watching which GET routes read a ``page...`` parameter."""
    admin = make_user("admin", staff=True)
    client = Client()
    recorder = Recorder(monkeypatch)
    readers: dict[str, list[str]] = {}
    for route in all_routes():
        path = reverse(route.name, kwargs=world.kwargs(route))
        recorder.seen.clear()
        send(client, admin, "GET", path, {})
        send(client, admin, "GET", path, sensible(plausible(world, admin), recorder.seen))
        pages = sorted(k for k in recorder.seen if k.startswith("page"))
        if pages:
            readers[route.name] = pages
    assert {
        "memoryui:rollout_list",
        "memoryui:rollout_detail",
        "memoryui:memory_md",
        "memoryui:audit_log",
        "memoryui:proposal_review",
    } <= set(readers), readers

    wrong = []
    for name, pages in readers.items():
        route = next(r for r in all_routes() if r.name == name)
        path = reverse(name, kwargs=world.kwargs(route))
        for key in pages:
            for bad in ("abc", "0", quote("²")):
                client.force_login(admin)
                response = client.get(f"{path}?{key}={bad}")
                said = response.content.decode()
                if response.status_code != 400 or not ("Enter" in said or "Ensure" in said):
                    wrong.append((name, key, bad, response.status_code))
    assert not wrong, wrong
