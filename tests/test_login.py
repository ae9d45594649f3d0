"""Login throttling (django-axes): repeated failures lock an account, and a client
address, for a cool-off that an admin can cut short."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.factories import make_user

pytestmark = pytest.mark.django_db


PASSWORD = "pw-for-tests-9"  # tests.factories
LOCKED = "Too many failed logins for this account or from this address"


def log_in(client: Client, username: str, password: str = PASSWORD):
    return client.post(reverse("login"), {"username": username, "password": password})


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail(client: Client, username: str, times: int) -> None:
    """Log in with a wrong password ``times`` times (the last may be the one that locks)."""
    for i in range(times):
        response = log_in(client, username, "wrong password")
        assert not logged_in(client)
        if i < times - 1:
            assert response.status_code == 200


def test_after_too_many_failures_even_the_right_password_is_refused_with_a_message():
    make_user("ada")
    client = Client()
    fail(client, "ada", settings.AXES_FAILURE_LIMIT)

    response = log_in(client, "ada")

    assert response.status_code == 429
    page = response.content.decode()
    assert LOCKED in page and "blocked for 15 minutes" in page
    assert 'name="password"' in page  # the login page, not a bare error
    assert not logged_in(client)


def test_a_login_clears_earlier_failures_and_only_the_limit_locks():
    make_user("ada")
    client = Client()
    for _ in range(2):  # twice: the successful login cleared the first failures
        fail(client, "ada", settings.AXES_FAILURE_LIMIT - 1)
        assert log_in(client, "ada").status_code == 302
        client.post(reverse("logout"))

    fail(client, "ada", settings.AXES_FAILURE_LIMIT)

    assert log_in(client, "ada").status_code == 429


@pytest.mark.parametrize(
    "command", [["axes_reset"], ["axes_reset_username", "ada"], ["axes_reset_ip", "127.0.0.1"]]
)
def test_the_axes_reset_commands_unlock(command):
    make_user("ada")
    client = Client()
    fail(client, "ada", settings.AXES_FAILURE_LIMIT)
    assert log_in(client, "ada").status_code == 429

    call_command(*command, verbosity=0)

    assert log_in(client, "ada").status_code == 302
    assert logged_in(client)


def test_an_admin_unlocks_by_deleting_the_attempt_in_the_admin():
    from axes.models import AccessAttempt

    make_user("ada")
    client = Client()
    fail(client, "ada", settings.AXES_FAILURE_LIMIT)
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", password=PASSWORD))
    attempts = list(AccessAttempt.objects.values_list("pk", flat=True))
    listing = admin.get(reverse("admin:axes_accessattempt_changelist"))
    assert listing.status_code == 200 and "ada" in listing.content.decode()

    response = admin.post(
        reverse("admin:axes_accessattempt_changelist"),
        {"action": "delete_selected", "_selected_action": attempts, "post": "yes"},
    )

    assert response.status_code == 302
    assert not AccessAttempt.objects.exists()
    assert log_in(client, "ada").status_code == 302


def test_failures_from_one_address_lock_that_address_for_every_account():
    make_user("bob")
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in(attacker, f"guess-{i}", "wrong password")

    assert log_in(attacker, "bob").status_code == 429
    elsewhere = Client(REMOTE_ADDR="198.51.100.2")
    assert log_in(elsewhere, "bob").status_code == 302


def test_behind_a_proxy_the_forwarded_address_is_the_client(settings):
    settings.MEMORYUI_TRUSTED_PROXIES = 1
    make_user("bob")
    proxy = "10.0.0.1"
    attacker = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="203.0.113.7")
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in(attacker, f"guess-{i}", "wrong password")

    # A made-up address before the proxy's own entry changes nothing.
    spoofing = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.9, 203.0.113.7")
    assert log_in(spoofing, "bob").status_code == 429
    colleague = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.2")
    assert log_in(colleague, "bob").status_code == 302
