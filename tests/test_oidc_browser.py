"""The identity provider's sign-in in headless Chromium: the login page's button, the
provider's own login form (a real provider in its own process), and back to memoryui
signed in with the mapped role; then the notifications page. With
MEMORYUI_SCREENSHOTS=<dir> the test also saves screenshots there."""

import pytest
from django.contrib.auth import get_user_model

from memoryui import signin
from memoryui.models import Membership, Workspace
from tests.test_browser import browser, page  # noqa: F401 - fixtures
from tests.test_oidc import CLIENT_ID, CLIENT_SECRET, start_provider
from tests.test_run_history_browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def provider(live_server, tmp_path, settings):
    for provider in start_provider(tmp_path, [live_server.url + "/accounts/oidc/callback/"]):
        settings.MEMORYUI_OIDC_ISSUER = provider.issuer
        settings.MEMORYUI_OIDC_NAME = "Example SSO"
        settings.OIDC_RP_CLIENT_ID = CLIENT_ID
        settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
        settings.MEMORYUI_OIDC_GROUP_ROLES = [("memory-reviewers", "alpha", "reviewer")]
        settings.MEMORYUI_LOCAL_LOGIN = False
        signin.forget_provider()
        yield provider
        signin.forget_provider()


def test_the_sign_in_button_signs_in_through_the_provider(page, live_server, provider):  # noqa: F811
    Workspace.objects.create(name="alpha", source_kind="directory", source_path="/x")
    provider.person("ada", ["memory-reviewers"])

    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url
    assert not page.locator("#id_password").is_visible()  # behind "Staff break-glass login"
    shot(page, "login-with-provider")
    page.click("#oidc-sign-in")
    page.wait_for_selector("text=Test identity provider")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "provider-pw")
    page.click("button[type=submit]")

    page.wait_for_url(f"{live_server.url}/")
    assert page.locator("text=alpha").first.is_visible()
    ada = get_user_model().objects.get(username="ada")
    assert Membership.objects.get(user=ada).role == "reviewer"
    page.goto(f"{live_server.url}/w/alpha/notifications/")
    page.select_option("#id_mode", "daily")
    page.click("#watch-form button[type=submit]")
    page.wait_for_selector("#watch-state:has-text('One daily digest')")
    shot(page, "notifications-page")
