"""Real-browser flows in Debian's headless Chromium, driven by Playwright."""

import os

import pytest
from playwright.sync_api import Page, sync_playwright

from memoryui.importer import import_workspace
from tests.factories import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM), "Debian's chromium is required (bin/install-browser)"
    # Playwright's sync API keeps an event loop running in this thread for the module;
    # the ORM calls that the tests and their database teardown make are still plain
    # synchronous calls, so Django's async guard is lifted for this module only.
    with pytest.MonkeyPatch.context() as mp, sync_playwright() as p:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    yield page
    context.close()


def log_in(page: Page, live_server, username: str = "ada") -> None:
    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-for-tests-9")
    page.click("button[type=submit]")


def test_reviewer_logs_in_and_opens_a_workspace_and_its_import_report(
    page, live_server, fixtures_dir
):
    import_workspace(fixtures_dir / "small-a" / "workspace", "small-a")
    make_user("ada")

    log_in(page, live_server)
    page.wait_for_selector("#workspace-list")
    assert page.locator("#workspace-list tbody tr").count() == 1
    page.click("text=small-a")
    page.wait_for_selector("#layout-list")
    layouts = page.locator("#layout-list tbody tr").all_inner_texts()
    assert any("memories/engineering" in row and "sessions/engineering" in row for row in layouts)
    page.click("#import-list a")
    page.wait_for_selector("text=Every file was read as it is.")
    page.go_back()
    page.wait_for_selector("#layout-list")


def test_wrong_password_is_refused_in_the_browser(page, live_server):
    make_user("ada")
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    page.wait_for_selector("text=didn't match")
    assert "/accounts/login/" in page.url


def test_hostile_file_names_and_content_never_execute(page, live_server, workspace_copy):
    ws = workspace_copy("small-a")
    (ws / "sessions" / "xss-1.jsonl").write_bytes(b"<img src=x onerror=alert(1)>\n")
    (ws / "sessions" / "<img src=x onerror=alert(2)>.jsonl").write_bytes(b"{}\n")
    import_workspace(ws, "xss")
    make_user("ada")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    log_in(page, live_server)
    page.click("text=xss")
    page.click("#import-list a")
    page.wait_for_selector("#import-errors")
    errors = page.inner_text("#import-errors")
    assert "sessions/xss-1.jsonl" in errors
    assert "sessions/<img src=x onerror=alert(2)>.jsonl" in errors  # shown as text
    assert dialogs == []
