"""Login throttling (django-axes): repeated failures lock an account from the address
they came from, and (at a higher limit) that address for every account, for a cool-off
that an admin, or the person through a password reset, can cut short."""

import os
import re
import subprocess
import sys

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.factories import make_user

pytestmark = pytest.mark.django_db


PASSWORD = "pw-for-tests-9"  # tests.factories
LOCKED = "Too many failed logins for this account from this address"


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


def test_an_attackers_failures_do_not_lock_the_user_out_from_another_address():
    make_user("ada")
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.AXES_FAILURE_LIMIT * 3):  # keeps trying once locked, too
        log_in(attacker, "ada", "wrong password")

    assert log_in(attacker, "ada").status_code == 429  # the attacker's pair is locked
    ada = Client(REMOTE_ADDR="198.51.100.2")
    assert log_in(ada, "ada").status_code == 302 and logged_in(ada)


def test_failures_over_many_accounts_lock_that_address_for_every_account(settings):
    settings.MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT = 8
    make_user("bob")
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for i in range(settings.MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT - 1):
        log_in(attacker, f"guess-{i}", "wrong password")
    assert log_in(attacker, "bob").status_code == 302  # under the limit: still allowed
    attacker.logout()
    log_in(attacker, "guess-last", "wrong password")

    assert log_in(attacker, "bob").status_code == 429
    elsewhere = Client(REMOTE_ADDR="198.51.100.2")
    assert log_in(elsewhere, "bob").status_code == 302


def test_behind_a_proxy_the_forwarded_address_is_the_client(settings):
    settings.MEMORYUI_TRUSTED_PROXIES = 1
    settings.MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT = 6
    make_user("bob")
    proxy = "10.0.0.1"
    attacker = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="203.0.113.7")
    for i in range(settings.MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT):
        log_in(attacker, f"guess-{i}", "wrong password")

    # A made-up address before the proxy's own entry changes nothing.
    spoofing = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.9, 203.0.113.7")
    assert log_in(spoofing, "bob").status_code == 429
    colleague = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.2")
    assert log_in(colleague, "bob").status_code == 302


def test_a_locked_out_person_resets_the_password_by_email_and_logs_in_again(mailoutbox):
    ada = make_user("ada")
    ada.email = "ada@example.com"
    ada.save()
    client = Client()
    fail(client, "ada", settings.AXES_FAILURE_LIMIT)
    locked = log_in(client, "ada")
    assert locked.status_code == 429 and reverse("password_reset") in locked.content.decode()

    sent = client.post(reverse("password_reset"), {"email": "ada@example.com"})
    nobody = client.post(reverse("password_reset"), {"email": "nobody@example.com"})
    assert sent.status_code == 302 and nobody.status_code == 302  # the same answer
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["ada@example.com"]
    link = re.search(r"http://testserver(/accounts/password-reset/\S+/)", mailoutbox[0].body)
    form = client.get(link.group(1), follow=True)
    assert form.status_code == 200 and "Choose a new password" in form.content.decode()
    new = "a-new-passphrase-for-ada"
    done = client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})
    assert done.status_code == 302

    assert log_in(client, "ada", new).status_code == 302 and logged_in(client)
    reused = Client().get(link.group(1), follow=True)
    assert "This link is not valid" in reused.content.decode()


def test_password_reset_mails_are_limited_per_account_and_per_address(mailoutbox):
    for name in ("ada", "bob"):
        user = make_user(name)
        user.email = f"{name}@example.com"
        user.save()
    url = reverse("password_reset")
    one = Client(REMOTE_ADDR="198.51.100.7")

    # Eleven requests for one account in a second: three mails, the same answer each time.
    answers = [one.post(url, {"email": "ada@example.com"}).status_code for _ in range(3)]
    others = [
        Client(REMOTE_ADDR=f"203.0.113.{i}").post(url, {"email": "ada@example.com"})
        for i in range(8)
    ]
    assert answers == [302] * 3 and [r.status_code for r in others] == [302] * 8
    assert len(mailoutbox) == settings.MEMORYUI_PASSWORD_RESET_ACCOUNT_LIMIT == 3

    # One address asking for account after account: refused after ten forms in the hour.
    more = [one.post(url, {"email": f"x{i}@example.com"}).status_code for i in range(7)]
    refused = one.post(url, {"email": "bob@example.com"})
    assert more == [302] * 7 and settings.MEMORYUI_PASSWORD_RESET_ADDRESS_LIMIT == 10
    assert refused.status_code == 429 and "Too many password-reset requests" in (
        refused.content.decode()
    )
    assert len(mailoutbox) == 3  # bob got nothing from that address
    elsewhere = Client(REMOTE_ADDR="192.0.2.1").post(url, {"email": "bob@example.com"})
    assert elsewhere.status_code == 302 and mailoutbox[-1].to == ["bob@example.com"]


def test_the_login_page_offers_the_password_reset():
    page = Client().get(reverse("login")).content.decode()
    assert reverse("password_reset") in page and "Forgot your password?" in page


def test_reset_emails_are_printed_on_the_console_unless_smtp_is_configured(tmp_path):
    script = "import django; django.setup(); from django.conf import settings; "
    script += "print(settings.EMAIL_BACKEND)"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMAIL_", "MEMORYUI_"))}
    env.update(DJANGO_SETTINGS_MODULE="memoryui.settings", MEMORYUI_VAR_DIR=str(tmp_path))
    default = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    env["EMAIL_BACKEND"] = "django.core.mail.backends.smtp.EmailBackend"
    smtp = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)

    assert default.stdout.decode().strip() == "django.core.mail.backends.console.EmailBackend"
    assert smtp.stdout.decode().strip() == "django.core.mail.backends.smtp.EmailBackend"
