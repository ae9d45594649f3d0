"""Sign-in with an OpenID Connect identity provider, against a real one: django-oauth-
toolkit's provider in its own process (tests/oidc_provider), reached over HTTP for
discovery, the token, the userinfo and the keys, as a company's provider would be.

The browser's part (the provider's login, its redirect back) is played with an HTTP
session logged in at the provider; memoryui's side is Django's test client."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from memoryui import signin, tokens
from memoryui.models import AuditEvent, GroupRole, Membership, ProviderIdentity, Workspace
from tests.factories import make_user

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
CLIENT_ID = "memoryui-tests"
CLIENT_SECRET = "provider-secret-for-tests"
CALLBACK = "http://testserver/accounts/oidc/callback/"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Provider:
    """The running provider: its issuer, and its /testing/ endpoints."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.issuer = base + "/o"

    def person(self, username: str, groups: list[str], password: str = "provider-pw") -> str:
        answer = requests.post(
            self.base + "/testing/user",
            json={
                "username": username,
                "password": password,
                "email": f"{username}@example.com",
                "groups": groups,
            },
            timeout=10,
        )
        answer.raise_for_status()
        return answer.json()["sub"]

    def misbehave(self, **quirks: object) -> None:
        requests.post(self.base + "/testing/quirks", json=quirks, timeout=10).raise_for_status()

    def browser(self, username: str, password: str = "provider-pw") -> requests.Session:
        """An HTTP session logged in at the provider, as the person's browser would be."""
        session = requests.Session()
        page = session.get(self.base + "/accounts/login/", timeout=10)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text
        done = session.post(
            self.base + "/accounts/login/",
            data={"csrfmiddlewaretoken": token[1], "username": username, "password": password},
            allow_redirects=False,
            timeout=10,
        )
        assert done.status_code == 302, done.text
        return session


def start_provider(tmp: Path, redirect_uris: list[str]) -> Iterator[Provider]:
    port = free_port()
    env = {
        **os.environ,
        "OIDC_PROVIDER_DB": str(tmp / "provider.sqlite3"),
        "OIDC_PROVIDER_CLIENTS": json.dumps(
            [
                {
                    "client_id": CLIENT_ID,
                    "client_secret": CLIENT_SECRET,
                    "redirect_uris": redirect_uris,
                },
                {  # another application of the same provider
                    "client_id": "another-app",
                    "client_secret": "another-secret",
                    "redirect_uris": redirect_uris,
                },
            ]
        ),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = (tmp / "provider.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_provider", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp / "provider.log").read_text()
            try:
                if requests.get(base + "/o/.well-known/openid-configuration", timeout=10).ok:
                    break
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or busy
                pass
            assert time.monotonic() < deadline, "the provider did not start"
            time.sleep(0.2)
        yield Provider(base)
    finally:
        process.terminate()
        process.wait(10)
        log.close()


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> Iterator[Provider]:
    yield from start_provider(tmp_path_factory.mktemp("oidc-provider"), [CALLBACK])


@pytest.fixture
def oidc(provider, settings) -> Provider:
    """memoryui configured to sign in with the provider; the provider well-behaved."""
    settings.MEMORYUI_OIDC_ISSUER = provider.issuer
    settings.MEMORYUI_OIDC_NAME = "Example SSO"
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SCOPES = "openid email profile"
    settings.MEMORYUI_OIDC_GROUP_ROLES = [
        ("memory-reviewers", "alpha", "reviewer"),
        ("memory-editors", "alpha", "editor"),
        ("memory-admins", "*", "admin"),
    ]
    signin.forget_provider()
    provider.misbehave()
    yield provider
    signin.forget_provider()


@pytest.fixture
def workspaces(tmp_path) -> dict[str, Workspace]:
    return {
        name: Workspace.objects.create(
            name=name, source_kind="directory", source_path=str(tmp_path / name)
        )
        for name in ("alpha", "beta", "gamma")
    }


def start(client: Client) -> str:
    """memoryui's sign-in button: where it sends the browser."""
    answer = client.get(reverse("oidc_start"))
    assert answer.status_code == 302
    return answer["Location"]


def sign_in(client: Client, provider: Provider, username: str):
    """The whole round: memoryui -> the provider (logged in there) -> memoryui's callback.
    Returns memoryui's answer to the callback and the callback's address."""
    authorize = start(client)
    answer = provider.browser(username).get(authorize, allow_redirects=False, timeout=10)
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["Location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == CALLBACK
    callback = f"{back.path}?{back.query}"
    return client.get(callback), callback


def roles(user) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("workspace__name", "role"))


def signed_in_as(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    return get_user_model().objects.get(pk=user_id).username if user_id else None


def test_the_first_sign_in_creates_the_account_with_the_roles_its_groups_map_to(oidc, workspaces):
    GroupRole.objects.create(group="ops", workspace=workspaces["beta"], role="viewer")
    subject = oidc.person("ada", ["memory-reviewers", "ops", "unmapped"])
    client = Client()

    authorize = start(client)
    query = parse_qs(urlsplit(authorize).query)
    assert authorize.startswith(oidc.issuer + "/authorize/")
    assert query["client_id"] == [CLIENT_ID] and query["response_type"] == ["code"]
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert query["nonce"][0] and query["state"][0]

    answer, _ = sign_in(client, oidc, "ada")

    assert answer.status_code == 302 and answer["Location"] == reverse("memoryui:workspace_list")
    assert signed_in_as(client) == "ada"
    ada = get_user_model().objects.get(username="ada")
    assert ada.email == "ada@example.com" and not ada.has_usable_password()
    assert ProviderIdentity.objects.get(user=ada).subject == subject
    assert roles(ada) == {"alpha": "reviewer", "beta": "viewer"}
    assert client.get(reverse("memoryui:workspace_list")).status_code == 200
    added = AuditEvent.objects.filter(action="member.add", target="ada", actor="sign-in")
    assert sorted(added.values_list("workspace__name", flat=True)) == ["alpha", "beta"]


def test_a_changed_group_changes_the_role_at_the_next_sign_in_and_a_removed_one_removes_it(
    oidc, workspaces
):
    oidc.person("bob", ["memory-reviewers", "memory-admins"])
    sign_in(Client(), oidc, "bob")
    bob = get_user_model().objects.get(username="bob")
    assert roles(bob) == {"alpha": "admin", "beta": "admin", "gamma": "admin"}
    # A membership an admin made by hand is the admin's, not the provider's.
    Membership.objects.filter(user=bob, workspace=workspaces["gamma"]).delete()
    identity = ProviderIdentity.objects.get(user=bob)
    del identity.granted[str(workspaces["gamma"].pk)]
    identity.save()
    Membership.objects.create(user=bob, workspace=workspaces["gamma"], role="viewer")

    oidc.person("bob", ["memory-editors"])  # left the admins, moved to the editors
    answer, _ = sign_in(Client(), oidc, "bob")

    assert answer.status_code == 302
    assert roles(bob) == {"alpha": "editor", "gamma": "viewer"}
    assert AuditEvent.objects.filter(action="member.role", target="bob").count() == 1
    assert AuditEvent.objects.filter(action="member.remove", target="bob").count() == 1

    oidc.person("bob", [])  # left every group
    sign_in(Client(), oidc, "bob")
    assert roles(bob) == {"gamma": "viewer"}
    assert get_user_model().objects.filter(username__startswith="bob").count() == 1


def test_an_account_is_the_subjects_not_a_local_account_with_the_same_name(oidc, workspaces):
    local = make_user("cleo")
    oidc.person("cleo", ["memory-reviewers"])

    answer, _ = sign_in(Client(), oidc, "cleo")

    assert answer.status_code == 302
    created = ProviderIdentity.objects.get().user
    assert created.username == "cleo-2" and created != local
    assert roles(local) == {}


@pytest.mark.parametrize(
    "quirk, reason",
    [
        ({"aud": "another-app"}, "the ID token was issued to another client"),
        ({"exp_offset": -3600}, "the ID token has expired"),
        ({"nonce": "the-nonce-of-an-earlier-sign-in"}, "nonce is not this sign-in"),
        ({"iss": "http://127.0.0.1:1/o"}, "the ID token names another issuer"),
    ],
)
def test_an_id_token_that_fails_a_check_signs_nobody_in(oidc, workspaces, quirk, reason):
    oidc.person("dan", ["memory-admins"])
    oidc.misbehave(**quirk)
    client = Client()

    answer, _ = sign_in(client, oidc, "dan")

    assert answer.status_code == 403
    page = answer.content.decode()
    assert "Sign-in refused" in page and reason in page
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username="dan").exists()


def test_a_used_sign_in_cannot_be_replayed(oidc, workspaces):
    oidc.person("eve", ["memory-reviewers"])
    client = Client()
    first, callback = sign_in(client, oidc, "eve")
    assert first.status_code == 302
    client.post(reverse("logout"))

    again = client.get(callback)

    assert again.status_code == 403
    assert "this sign-in was already used" in again.content.decode()
    assert signed_in_as(client) is None
    # Nor in another browser, whose session never started it.
    elsewhere = Client()
    assert elsewhere.get(callback).status_code == 403
    assert signed_in_as(elsewhere) is None


def test_an_unreachable_provider_is_a_clear_error(oidc, settings, workspaces):
    settings.MEMORYUI_OIDC_ISSUER = "http://127.0.0.1:1/o"
    signin.forget_provider()

    answer = Client().get(reverse("oidc_start"))

    assert answer.status_code == 502
    assert "The identity provider could not be reached" in answer.content.decode()


def test_the_login_page_offers_the_provider_and_local_login_off_keeps_passwords_for_staff(
    oidc, settings, workspaces
):
    settings.MEMORYUI_LOCAL_LOGIN = False
    make_user("fay")
    make_user("root", staff=True)
    page = Client().get(reverse("login")).content.decode()
    assert "Sign in with Example SSO" in page and "Staff break-glass login" in page

    refused = Client().post(reverse("login"), {"username": "fay", "password": "pw-for-tests-9"})
    staff = Client()
    allowed = staff.post(reverse("login"), {"username": "root", "password": "pw-for-tests-9"})

    assert refused.status_code == 200 and "_auth_user_id" not in refused.client.session
    assert "passwords are for staff only here" in refused.content.decode()
    assert allowed.status_code == 302 and signed_in_as(staff) == "root"


def test_local_login_off_leaves_api_tokens_working(settings, workspaces):
    settings.MEMORYUI_LOCAL_LOGIN = False
    fay = make_user("fay")
    secret = tokens.create_token(fay, "ci", ["alpha"]).secret

    answer = Client().get("/api/workspaces/alpha", HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert answer.status_code == 200


def test_off_by_default_the_login_page_is_the_password_form_alone(settings):
    assert settings.MEMORYUI_OIDC_ISSUER == "" and settings.MEMORYUI_LOCAL_LOGIN is True
    page = Client().get(reverse("login")).content.decode()

    assert "Sign in with" not in page and "break-glass" not in page
    assert Client().get(reverse("oidc_start")).status_code == 404
    assert Client().get(reverse("oidc_callback") + "?code=x&state=y").status_code == 404
    make_user("gus")
    answer = Client().post(reverse("login"), {"username": "gus", "password": "pw-for-tests-9"})
    assert answer.status_code == 302


def test_group_roles_are_managed_on_an_admin_page(workspaces):
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", password="x"))

    answer = admin.post(
        reverse("admin:memoryui_grouprole_add"),
        {"group": "sre", "workspace": workspaces["alpha"].pk, "role": "editor"},
    )

    assert answer.status_code == 302
    assert GroupRole.objects.get().role == "editor"
    listing = admin.get(reverse("admin:memoryui_grouprole_changelist")).content.decode()
    assert "sre" in listing


def test_the_group_role_setting_is_parsed_and_a_bad_one_is_explained():
    from memoryui.settings import group_roles  # noqa: PLC0415 (the parser alone)

    assert group_roles("memory-reviewers=alpha:reviewer,beta:viewer; sre=*:admin") == [
        ("memory-reviewers", "alpha", "reviewer"),
        ("memory-reviewers", "beta", "viewer"),
        ("sre", "*", "admin"),
    ]
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, "DEBUG": "1", "MEMORYUI_OIDC_GROUP_ROLES": "sre=alpha:boss"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "MEMORYUI_OIDC_GROUP_ROLES must be GROUP=WORKSPACE:ROLE" in result.stderr
    assert "'sre=alpha:boss'" in result.stderr and "Traceback" not in result.stderr
