"""The dashboard pages of the foundation: login, workspaces, import reports."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memoryui.importer import import_workspace
from memoryui.models import GenerationRun, ImportRun, Layout, Membership, Proposal, Role
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def imported(fixtures_dir):
    return import_workspace(fixtures_dir / "small-a" / "workspace", "small-a")


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/w/small-a/",
        "/admin/",
    ],
)
def test_anonymous_visitor_is_sent_to_login(client, imported, url):
    response = client.get(url)
    assert response.status_code == 302
    assert "login" in response["Location"]


def test_anonymous_import_report_is_sent_to_login(client, imported):
    response = client.get(reverse("memoryui:import_detail", args=["small-a", imported.run.pk]))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_login_then_workspace_list_shows_counts(client, imported):
    make_user("ada")
    response = client.post(
        reverse("login"), {"username": "ada", "password": "pw-for-tests-9"}, follow=True
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "small-a" in page
    assert "Imported" in page
    row = page[page.index('id="workspace-') :]
    assert ">2</td>" in row and ">6</td>" in row  # layouts, rollouts


def test_workspace_list_runs_a_constant_number_of_queries(
    client, fixtures_dir, django_assert_max_num_queries
):
    for i in range(5):
        import_workspace(fixtures_dir / "small-b" / "workspace", f"b{i}")
    client.force_login(make_user())
    # Session, user, workspaces, memberships, last runs; the add-workspace permission.
    with django_assert_max_num_queries(8):
        response = client.get("/")
    assert response.content.decode().count('<tr id="workspace-') == 5


def test_workspace_list_counts_rollouts_once_per_import(client, workspace_copy):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    client.force_login(make_user())

    def rollouts_shown() -> tuple[str, int]:
        with CaptureQueriesContext(connection) as queries:
            page = client.get("/").content.decode()
        row = page[page.index('<tr id="workspace-') :]
        counted = [q for q in queries.captured_queries if "memoryui_workspacefile" in q["sql"]]
        return row[: row.index("</tr>")], len(counted)

    row, counting = rollouts_shown()
    assert ">6</td>" in row and counting == 1
    row, counting = rollouts_shown()  # the same import: the count is not made again
    assert ">6</td>" in row and counting == 0

    (ws / "sessions" / "prefs-6e64dc.jsonl").unlink()
    import_workspace(ws, "a")  # the file is gone from disk: 5 rollouts present

    row, counting = rollouts_shown()
    assert ">5</td>" in row and counting == 1


def test_workspace_list_points_to_the_oldest_proposal_without_loading_its_texts(client, imported):
    layout = Layout.objects.get(workspace__name="small-a", memories_dir="memories/engineering")
    run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.DONE)
    big = "- an entry the proposal adds\n" * 20_000
    proposal = Proposal.objects.create(
        layout=layout, run=run, memory_md=big, memory_summary=big, raw_memories_md=big
    )
    user = make_user()
    Membership.objects.create(workspace=layout.workspace, user=user, role=Role.REVIEWER)
    client.force_login(user)

    with CaptureQueriesContext(connection) as queries:
        page = client.get("/").content.decode()

    assert f"Review proposal #{proposal.pk}" in page and f"run #{run.pk}" in page
    loaded = [q["sql"] for q in queries.captured_queries if "memoryui_proposal" in q["sql"]]
    assert len(loaded) == 2  # the count, then the oldest one: no deferred field fetched
    assert not any('"memory_md"' in sql for sql in loaded)


def test_workspace_page_lists_layouts_and_imports(client, imported):
    client.force_login(make_user())
    page = client.get("/w/small-a/").content.decode()
    assert "memories/engineering" in page and "sessions/engineering" in page
    assert "Imported" in page


def test_unknown_workspace_is_a_404_not_a_500(client):
    client.force_login(make_user())
    assert client.get("/w/nope/").status_code == 404
    assert client.get("/w/..%2F..%2Fetc/").status_code == 404


def test_import_report_lists_each_problem(client, workspace_copy):
    ws = workspace_copy("small-a")
    (ws / "sessions" / "broken-1.jsonl").write_bytes(b"<script>alert(1)</script>\n")
    result = import_workspace(ws, "a")
    client.force_login(make_user())

    page = client.get(reverse("memoryui:import_detail", args=["a", result.run.pk])).content.decode()

    assert "sessions/broken-1.jsonl" in page
    assert "not valid JSON" in page
    assert "<script>alert(1)</script>" not in page


def test_reimport_is_refused_to_non_admins(client, imported):
    client.force_login(make_user())
    response = client.post(reverse("memoryui:workspace_reimport", args=["small-a"]))
    assert response.status_code == 403
    assert ImportRun.objects.count() == 1


def test_reimport_runs_the_import_task(
    client, imported, settings, fixtures_dir, eager, django_capture_on_commit_callbacks
):
    settings.MEMORYUI_WORKSPACE_ROOTS = [fixtures_dir.resolve()]
    client.force_login(make_user(staff=True))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("memoryui:workspace_reimport", args=["small-a"]))
    assert response.status_code == 302
    runs = ImportRun.objects.order_by("pk")
    assert runs.count() == 2
    assert runs.last().unchanged == imported.added
    assert runs.last().triggered_by.username == "reviewer"


def test_reimport_requires_post_and_csrf(imported):

    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(staff=True))
    assert client.get(reverse("memoryui:workspace_reimport", args=["small-a"])).status_code == 405
    assert client.post(reverse("memoryui:workspace_reimport", args=["small-a"])).status_code == 403


def test_every_model_is_in_the_admin_and_its_pages_open(client, imported):

    models = apps.get_app_config("memoryui").get_models()
    admin_user = make_user("root", staff=True)
    admin_user.is_superuser = True
    admin_user.save()
    client.force_login(admin_user)
    for model in models:
        assert admin.site.is_registered(model), model
        opts = model._meta
        changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        assert client.get(changelist).status_code == 200, changelist
        obj = model.objects.first()
        if obj is not None:
            change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
            assert client.get(change).status_code == 200, change
