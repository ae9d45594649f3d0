"""A workspace's admins manage its members on the dashboard; every change is audited and
a workspace keeps an admin."""

import pytest
from django.test import Client
from django.urls import reverse

from memoryui.importer import import_workspace
from memoryui.models import AuditEvent, Membership, Role, Workspace
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace(fixtures_dir) -> Workspace:
    return import_workspace(fixtures_dir / "small-a" / "workspace", "a").run.workspace


def member(workspace: Workspace, username: str, role: Role) -> Client:
    user = make_user(username)
    Membership.objects.create(workspace=workspace, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


def roles(workspace: Workspace) -> dict[str, str]:
    return dict(workspace.members.values_list("user__username", "role"))


def members_url() -> str:
    return reverse("memoryui:members", args=["a"])


def member_url(username: str) -> str:
    user = Membership.objects.get(user__username=username).user
    return reverse("memoryui:member", args=["a", user.pk])


def test_an_admin_sees_the_members_and_their_roles(workspace):
    admin = member(workspace, "ada", Role.ADMIN)
    Membership.objects.create(workspace=workspace, user=make_user("bob"), role=Role.EDITOR)

    page = admin.get(members_url()).content.decode()

    rows = page[page.index('id="member-list"') :]
    assert "ada" in rows and "bob" in rows
    bob = rows[rows.index("bob") :]
    assert 'value="editor" selected' in bob[: bob.index("</tr>")]
    assert "Members</a>" in admin.get("/w/a/").content.decode()  # linked from the workspace


def test_an_admin_adds_an_existing_account_with_a_role(workspace):
    admin = member(workspace, "ada", Role.ADMIN)
    make_user("carol")

    response = admin.post(members_url(), {"username": "carol", "role": "reviewer"})

    assert response.status_code == 302
    assert roles(workspace)["carol"] == "reviewer"
    event = AuditEvent.objects.get(action="member.add")
    assert (event.actor, event.target, event.detail) == ("ada", "carol", {"role": "reviewer"})


def test_adding_an_unknown_account_says_so_and_changes_nothing(workspace):
    admin = member(workspace, "ada", Role.ADMIN)

    response = admin.post(members_url(), {"username": "nobody", "role": "viewer"})

    assert response.status_code == 400
    assert "There is no account named &#x27;nobody&#x27;" in response.content.decode()
    assert roles(workspace) == {"ada": "admin"}
    assert not AuditEvent.objects.exists()


def test_an_admin_changes_a_role_and_removes_a_member(workspace):
    admin = member(workspace, "ada", Role.ADMIN)
    member(workspace, "bob", Role.VIEWER)

    assert admin.post(member_url("bob"), {"role": "editor"}).status_code == 302
    assert roles(workspace)["bob"] == "editor"
    assert admin.post(member_url("bob"), {"remove": "1"}).status_code == 302

    assert roles(workspace) == {"ada": "admin"}
    assert [(e.action, e.target, e.detail) for e in AuditEvent.objects.order_by("pk")] == [
        ("member.role", "bob", {"before": "viewer", "role": "editor"}),
        ("member.remove", "bob", {"role": "editor"}),
    ]


def test_the_last_admin_cannot_be_demoted_or_removed_except_by_staff(workspace):
    admin = member(workspace, "ada", Role.ADMIN)

    demoted = admin.post(member_url("ada"), {"role": "viewer"})
    removed = admin.post(member_url("ada"), {"remove": "1"})

    for response in (demoted, removed):
        assert response.status_code == 400
        assert "ada is the last admin of a" in response.content.decode()
    assert roles(workspace) == {"ada": "admin"}
    assert not AuditEvent.objects.exists()

    staff = Client()
    staff.force_login(make_user("root", staff=True))
    assert staff.post(member_url("ada"), {"role": "viewer"}).status_code == 302
    assert roles(workspace) == {"ada": "viewer"}


def test_one_of_two_admins_may_step_down(workspace):
    admin = member(workspace, "ada", Role.ADMIN)
    member(workspace, "bob", Role.ADMIN)

    assert admin.post(member_url("ada"), {"role": "editor"}).status_code == 302

    assert roles(workspace) == {"ada": "editor", "bob": "admin"}


@pytest.mark.parametrize("role", [Role.VIEWER, Role.REVIEWER, Role.EDITOR])
def test_members_below_admin_cannot_see_or_change_members(workspace, role):
    client = member(workspace, "rita", role)
    member(workspace, "bob", Role.VIEWER)
    make_user("carol")
    before = roles(workspace)

    responses = [
        client.get(members_url()),
        client.post(members_url(), {"username": "carol", "role": "admin"}),
        client.post(member_url("bob"), {"role": "admin"}),
        client.post(member_url("rita"), {"role": "admin"}),
        client.post(member_url("bob"), {"remove": "1"}),
    ]

    assert [r.status_code for r in responses] == [403] * 5
    assert roles(workspace) == before
    assert not AuditEvent.objects.exists()


def test_an_unknown_role_is_refused_with_a_message(workspace):
    admin = member(workspace, "ada", Role.ADMIN)
    member(workspace, "bob", Role.VIEWER)

    response = admin.post(member_url("bob"), {"role": "owner"})

    assert response.status_code == 400
    assert "owner is not one of the available choices" in response.content.decode()
    assert roles(workspace)["bob"] == "viewer"
