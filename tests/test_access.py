"""Who may reach what: one decorator guards every route under w/<name>/ (a route without
it fails the system check and these tests), outsiders cannot tell a hidden workspace from
a missing one, redirects stay on the site, and comments need the reviewer role."""

from __future__ import annotations

import sys
import types

import pytest
from django.core import checks
from django.http import HttpResponse
from django.test import Client
from django.urls import include, path, resolve, reverse

from memoryui.apps import check_workspace_routes
from memoryui.importer import import_workspace
from memoryui.models import (
    AuditEvent,
    Comment,
    Layout,
    Membership,
    MemoryVersion,
    Pin,
    Proposal,
    ProtectedRawMemory,
    Role,
    SkillFileVersion,
)
from tests import routes
from tests.factories import make_user
from tests.routes import all_routes

pytestmark = pytest.mark.django_db
world = routes.world

V, R, E, A = Role.VIEWER, Role.REVIEWER, Role.EDITOR, Role.ADMIN
ORDER = [V, R, E, A]

# Every route that names a workspace, and the role each method needs. A new route fails
# test_every_workspace_route_is_in_the_table... until it is added here, with its role.
ROUTE_ROLES: dict[str, dict[str, Role]] = {
    "memoryui:workspace_detail": {"GET": V},
    "memoryui:workspace_reimport": {"POST": A},
    "memoryui:import_detail": {"GET": V},
    "memoryui:workspace_sync": {"POST": A},
    "memoryui:workspace_known_hosts": {"POST": A},
    "memoryui:layout_detail": {"GET": V},
    "memoryui:rollout_list": {"GET": V},
    "memoryui:rollout_detail": {"GET": V},
    "memoryui:rollout_item": {"GET": V},
    "memoryui:memory_md": {"GET": V},
    "memoryui:memory_summary": {"GET": V},
    "memoryui:layout_usage": {"GET": V},
    "memoryui:propose_forgetting": {"POST": A},
    "memoryui:summary_edit": {"GET": E, "POST": E},
    "memoryui:summary_preview": {"POST": E},
    "memoryui:citation": {"GET": V},
    "memoryui:generation": {"GET": V, "POST": A},
    "memoryui:generation_start": {"POST": A},
    "memoryui:run_detail": {"GET": V},
    "memoryui:run_cancel": {"POST": A},
    "memoryui:proposal_list": {"GET": V},
    "memoryui:proposal_review": {"GET": V},
    "memoryui:proposal_decide": {"POST": R},
    "memoryui:proposal_approve": {"GET": R, "POST": R},
    "memoryui:proposal_reject": {"GET": R, "POST": R},
    "memoryui:proposal_request_changes": {"POST": R},
    "memoryui:proposal_undo": {"POST": R},
    "memoryui:proposal_duplicate": {"POST": R},
    "memoryui:proposal_result": {"GET": V},
    "memoryui:proposal_viewed": {"POST": V},
    "memoryui:proposal_pin": {"POST": E},
    "memoryui:proposal_entry": {"GET": V},
    "memoryui:proposal_edit": {"GET": R},
    "memoryui:proposal_comment_form": {"GET": R},
    "memoryui:proposal_evidence": {"GET": V},
    "memoryui:proposal_comment": {"POST": R},
    "memoryui:proposal_assign": {"POST": R},
    "memoryui:proposal_live": {"GET": V},
    "memoryui:proposal_live_card": {"GET": V},
    "memoryui:proposal_live_leave": {"POST": V},
    "memoryui:proposal_reserve": {"POST": R},
    "memoryui:proposal_forget_decide": {"POST": R},
    "memoryui:entry_edit": {"GET": E, "POST": E},
    "memoryui:entry_pin": {"POST": E},
    "memoryui:versions": {"GET": V},
    "memoryui:version_restore": {"GET": E, "POST": E},
    "memoryui:agent_change": {"POST": R},
    "memoryui:protect": {"POST": E},
    "memoryui:audit_log": {"GET": V},
    "memoryui:members": {"GET": A, "POST": A},
    "memoryui:member": {"POST": A},
    "memoryui:watch": {"GET": V, "POST": V},
    "memoryui:skill_list": {"GET": V},
    "memoryui:skill_detail": {"GET": V},
    "memoryui:skill_file_new": {"GET": E, "POST": E},
    "memoryui:skill_file_edit": {"GET": E, "POST": E},
    "memoryui:skill_file_delete": {"GET": E, "POST": E},
    "memoryui:skill_file_history": {"GET": V},
    "memoryui:skill_file_restore": {"GET": E, "POST": E},
    "memoryui:skill_file_accept": {"POST": R},
    "memoryui:proposal_skill_decide": {"POST": R},
    "memoryui:layout_writeback": {"GET": V, "POST": A},
    "memoryui:workspace_export": {"GET": V, "POST": A},
    "memoryui:webhook_list": {"GET": A, "POST": A},
    "memoryui:webhook_delete": {"POST": A},
    "memoryui:webhook_redeliver": {"POST": A},
    "memoryui:snapshot_store_policy": {"POST": A},
}


def workspace_routes() -> list[routes.Route]:
    return [r for r in all_routes() if "<str:name>" in r.path]


def test_every_workspace_route_is_in_the_table_with_the_role_its_view_enforces():
    found = {r.name: r for r in workspace_routes()}
    assert set(found) == set(ROUTE_ROLES), "add new routes to ROUTE_ROLES with their role"
    for name, methods in ROUTE_ROLES.items():
        callback = reverse_callback(found[name])
        assert hasattr(callback, "workspace_roles"), f"{name} has no workspace_view"
        expected = (methods.get("GET") or methods["POST"], methods.get("POST") or methods["GET"])
        assert callback.workspace_roles == expected, name
    assert check_workspace_routes() == []


def reverse_callback(route: routes.Route):  # type: ignore[no-untyped-def]

    return resolve(reverse(route.name, kwargs=dict.fromkeys(route.converters, 1))).func


def test_the_system_check_names_a_workspace_route_whose_view_checks_no_role(settings, monkeypatch):
    def forgetful(request, name):  # type: ignore[no-untyped-def]
        return HttpResponse(name)

    module = types.ModuleType("unguarded_urls")
    module.urlpatterns = [  # type: ignore[attr-defined]
        path("", include("memoryui.urls")),
        path("w/<str:name>/forgotten/", forgetful),
    ]
    monkeypatch.setitem(sys.modules, "unguarded_urls", module)
    settings.ROOT_URLCONF = "unguarded_urls"

    errors = checks.run_checks(tags=[checks.Tags.urls])  # as manage.py check runs it

    assert [e.id for e in errors] == ["memoryui.E001"]
    assert "w/<str:name>/forgotten/" in errors[0].msg


def below(role: Role) -> Role | None:
    index = ORDER.index(role)
    return ORDER[index - 1] if index else None


def state() -> tuple:
    return (
        AuditEvent.objects.count(),
        MemoryVersion.objects.count(),
        SkillFileVersion.objects.count(),
        Pin.objects.count(),
        Comment.objects.count(),
        Membership.objects.count(),
        ProtectedRawMemory.objects.count(),
        list(Proposal.objects.values_list("status", flat=True)),
    )


def test_each_workspace_route_hides_the_workspace_from_outsiders_and_refuses_lower_roles(
    world, settings, django_capture_on_commit_callbacks
):
    settings.MEMORYUI_DEFAULT_ROLE = "none"
    workspace = world.layout.workspace
    clients: dict[Role | None, Client] = {}
    for role in [None, *ORDER]:
        user = make_user(f"as-{role or 'outsider'}")
        if role:
            Membership.objects.create(workspace=workspace, user=user, role=role)
        clients[role] = Client()
        clients[role].force_login(user)
    outsider = clients[None]
    for route in workspace_routes():
        kwargs = world.kwargs(route)
        url = reverse(route.name, kwargs=kwargs)
        unknown = reverse(route.name, kwargs={**kwargs, "name": "no-such-workspace"})
        for method, needed in ROUTE_ROLES[route.name].items():
            send = "get" if method == "GET" else "post"
            before = state()
            hidden = getattr(outsider, send)(url)
            missing = getattr(outsider, send)(unknown)
            assert hidden.status_code == missing.status_code == 404, (route.name, method)
            assert hidden.content == missing.content, (route.name, method)
            lower = below(needed)
            if lower is not None:
                refused = getattr(clients[lower], send)(url)
                assert refused.status_code == 403, (route.name, method, lower)
            assert state() == before, (route.name, method)
            with django_capture_on_commit_callbacks(execute=False):
                allowed = getattr(clients[needed], send)(url)
            assert allowed.status_code not in (403, 404), (route.name, method, needed)


# --- the import report of the finding --------------------------------------------------


@pytest.fixture
def layout(db, workspace_copy):
    import_workspace(workspace_copy("small-a"), "a")
    return Layout.objects.select_related("workspace").get(
        workspace__name="a", memories_dir="memories/engineering"
    )


def test_an_import_report_is_a_plain_404_for_someone_without_access(layout, settings):
    settings.MEMORYUI_DEFAULT_ROLE = "none"
    run = layout.workspace.imports.get()
    client = Client()
    client.force_login(make_user("outsider"))

    report = client.get(reverse("memoryui:import_detail", args=["a", run.pk]))
    nothing = client.get(reverse("memoryui:import_detail", args=["nope", run.pk]))

    assert report.status_code == nothing.status_code == 404
    assert report.content == nothing.content
    assert b"memories/engineering" not in report.content


def test_a_workspace_name_with_a_nul_byte_is_a_404():
    client = Client()
    client.force_login(make_user("someone"))
    assert client.get("/w/%00/").status_code == 404
    assert client.get("/w/a%00b/audit/").status_code == 404


# --- redirects ---------------------------------------------------------------------------


def protect(client: Client, layout: Layout, rollout_id: str, next_url: str):
    return client.post(
        reverse("memoryui:protect", args=["a", layout.pk]),
        {"rollout_id": rollout_id, "next": next_url},
    )


@pytest.mark.parametrize(
    "next_url",
    [
        "https://evil.example/phish",
        "//evil.example/x",
        "javascript:alert(1)",
        "/\\evil.example/x",
        "http://testserver@evil.example/",
    ],
)
def test_protect_goes_back_only_to_a_page_of_this_site(layout, next_url):
    client = Client()
    client.force_login(make_user("staff", staff=True))
    rollout_id = layout.rollouts.values_list("rollout_id", flat=True)[0]
    back = reverse("memoryui:proposal_list", args=["a", layout.pk]) + "#ledger"

    response = protect(client, layout, rollout_id, next_url)

    assert response.status_code == 302
    assert response["Location"] == reverse("memoryui:layout_detail", args=["a", layout.pk])
    assert ProtectedRawMemory.objects.filter(layout=layout, rollout_id=rollout_id).exists()
    assert protect(client, layout, rollout_id, back)["Location"] == back  # unprotects


def test_protect_refuses_a_rollout_id_the_layout_does_not_have(layout):
    client = Client()
    client.force_login(make_user("staff", staff=True))

    response = protect(client, layout, "not-a-rollout", "")

    assert response.status_code == 400
    assert "not-a-rollout is not a rollout of memories/engineering" in response.content.decode()
    assert not ProtectedRawMemory.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="raw_memory.").exists()


# --- comments need the reviewer role --------------------------------------------------------


def test_viewers_read_comments_but_only_reviewers_may_write_them(world):
    workspace = world.layout.workspace
    url = reverse("memoryui:proposal_comment", kwargs=world.kwargs(routes_named("comment")))
    review = reverse("memoryui:proposal_review", kwargs=world.kwargs(routes_named("review")))
    viewer, reviewer = Client(), Client()
    viewer.force_login(world.member)  # a viewer
    user = make_user("rita")
    Membership.objects.create(workspace=workspace, user=user, role=Role.REVIEWER)
    reviewer.force_login(user)

    refused = viewer.post(url, {"text": "a viewer's opinion"})
    done = reviewer.post(url, {"text": "a reviewer's opinion"})

    assert refused.status_code == 403 and done.status_code == 302
    assert list(Comment.objects.values_list("text", flat=True)) == ["a reviewer's opinion"]
    page = viewer.get(review).content.decode()
    assert "a reviewer&#x27;s opinion" in page
    assert "Comment on the proposal" not in page  # no form a viewer could not use
    assert "Comment on the proposal" in reviewer.get(review).content.decode()


def routes_named(suffix: str) -> routes.Route:
    return next(r for r in all_routes() if r.name == f"memoryui:proposal_{suffix}")
