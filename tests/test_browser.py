"""Real-browser flows in Debian's headless Chromium, driven by Playwright."""

import json
import os

import pytest
from django.urls import reverse
from playwright.sync_api import Page, sync_playwright

from memoryui import curation, workspaces
from memoryui.importer import import_workspace
from memoryui.models import GenerationSettings, ImportJob, Layout, Membership, MemoryVersion, Role
from tests.factories import make_user
from tests.test_curation import proposal_for

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


def test_reviewer_browses_layout_rollout_memory_citation_and_search(
    page, live_server, fixtures_dir
):
    import_workspace(fixtures_dir / "small-a" / "workspace", "small-a")
    make_user("ada")

    log_in(page, live_server)
    page.click("text=small-a")
    page.click("#layout-list >> text=memories/engineering")
    page.wait_for_selector("#terminal-chart")
    assert "3" in page.inner_text("#layout-counts")

    page.click("nav.tabs >> text=MEMORY.md")
    page.wait_for_selector("#entry-list")
    assert "menus bug fixes" in page.inner_text("#entry-list")
    page.click("a.citation >> text=eng-slugify-unicode-65aef7")
    page.wait_for_url("**/rollouts/eng-slugify-unicode-65aef7/**")
    assert "fix slugify unicode" in page.content().lower()
    assert page.locator(".diff-add").count() >= 1  # the apply_patch, shown as a diff

    page.go_back()
    page.wait_for_selector("#entry-list")
    page.go_forward()
    page.wait_for_url("**/rollouts/eng-slugify-unicode-65aef7/**")

    page.click("text=Rollouts")
    page.wait_for_selector("#rollouts")
    page.fill("input[name=q]", "deployctl")
    page.press("input[name=q]", "Enter")
    page.wait_for_selector("text=matching “deployctl”")
    rows = page.locator("#rollouts tbody tr").all_inner_texts()
    assert len(rows) == 1 and "deploy-auth-proxy-dc4ee6" in rows[0]
    assert "q=deployctl" in page.url  # htmx pushed a real, shareable URL
    # The count is in the page's one live region, which screen readers announce, and
    # the keyboard stays in the search box.
    status = page.locator("#rollout-status")
    assert status.count() == 1 and status.get_attribute("role") == "status"
    assert status.inner_text().startswith("1 rollout matching “deployctl”")
    assert page.evaluate("document.activeElement.name") == "q"
    page.reload()
    assert page.locator("#rollouts tbody tr").count() == 1
    assert page.locator("#rollout-status").inner_text().startswith("1 rollout matching")
    page.go_back()
    page.wait_for_selector("#rollouts")
    assert page.locator("#rollouts tbody tr").count() == 3
    assert page.locator("#rollout-status").inner_text().startswith("3 rollouts")


def test_memory_payloads_never_execute_in_the_browser(page, live_server, workspace_copy):
    ws = workspace_copy("small-a")
    payload = (
        "<script>alert('s')</script>\n\n<img src=x onerror=alert('i')>\n\n"
        "[click me](javascript:alert('j'))\n\n<a href=\"javascript:alert('a')\">raw</a>\n"
    )
    eng = ws / "memories" / "engineering"
    (eng / "MEMORY.md").write_text("# Task Group: hostile\n\n" + payload)
    (eng / "memory_summary.md").write_text("## User Profile\n\n" + payload)
    rollout = {
        "updated_at": "2026-11-30T00:00:00+00:00",
        "rollout_id": "xss-2",
        "input": [{"role": "user", "content": payload}],
        "generated_items": [
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "<img src=x onerror=alert(1)>",
                "arguments": payload,
            },
            {"type": "function_call_output", "call_id": "c1", "output": payload},
        ],
        "terminal_metadata": {"terminal_state": "completed"},
        "final_output": payload,
    }

    (ws / "sessions" / "engineering" / "xss-2.jsonl").write_text(json.dumps(rollout) + "\n")
    import_workspace(ws, "x")
    make_user("ada")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page, live_server)
    base = f"{live_server.url}/w/x/layouts/"

    layout = Layout.objects.get(workspace__name="x", memories_dir="memories/engineering")
    for path in ("memory/", "summary/", "rollouts/xss-2/"):
        page.goto(f"{base}{layout.pk}/{path}")
        page.wait_for_load_state("networkidle")
        for link in page.locator("a").all():
            href = link.get_attribute("href") or ""
            assert not href.lower().startswith("javascript:"), href
        links = page.locator("a:text-is('click me'), a:text-is('raw')")
        assert links.count() == 0
    assert dialogs == []


def test_start_reviewing_swaps_the_reservation_notice_in_place_even_when_refused(
    page, live_server, workspace_copy, model
):

    import_workspace(workspace_copy("small-a"), "a")
    layout = Layout.objects.get(workspace__name="a", memories_dir="memories/engineering")
    GenerationSettings.objects.create(layout=layout, concurrency=1)
    proposal = proposal_for(layout)
    ada, bob = make_user("ada"), make_user("bob")
    for user in (ada, bob):
        Membership.objects.create(workspace=layout.workspace, user=user, role=Role.REVIEWER)
    review = live_server.url + reverse(
        "memoryui:proposal_review", args=["a", layout.pk, proposal.pk]
    )
    log_in(page, live_server)
    page.goto(review)
    page.wait_for_selector("#reservation >> text=Nobody is reviewing this proposal")

    curation.reserve(proposal, bob)  # bob starts first, in another browser
    page.click("#reservation >> text=Start reviewing")
    page.wait_for_selector("#reservation >> text=bob is reviewing this proposal right now")

    curation.release(proposal, bob)
    page.goto(review)
    page.click("#reservation >> text=Start reviewing")
    page.wait_for_selector("#reservation >> text=You are reviewing this proposal until")
    assert page.url == review  # swapped in place, no navigation
    proposal.refresh_from_db()
    assert proposal.reserved_by == ada


def test_uploaded_snapshot_shows_live_progress_then_its_report(
    page, live_server, fixtures_dir, tmp_path, settings
):

    settings.MEMORYUI_UPLOAD_DIR = tmp_path / "uploads"
    make_user("ada", staff=True)
    snapshot = next((fixtures_dir / "small-a" / "snapshots").glob("*.tar"))

    log_in(page, live_server)
    page.click("text=New workspace")
    page.fill("#upload #id_name", "team-a")
    page.set_input_files("#id_snapshot", str(snapshot))
    page.click("#upload button[type=submit]")
    page.wait_for_selector("#import-progress >> text=Queued")  # no worker in this test
    job = ImportJob.objects.get(name="team-a")

    workspaces.run_import_job(job.pk)  # what the worker does; the page is polling
    page.wait_for_url("**/w/team-a/imports/**", timeout=10_000)
    page.wait_for_selector("text=Every file was read as it is.")
    assert "memories/engineering" in page.inner_text("main")


def test_a_diff_on_a_phone_is_one_readable_column_without_sideways_scrolling(
    browser, live_server, fixtures_dir
):

    import_workspace(fixtures_dir / "small-a" / "workspace", "small-a")
    make_user("ada")
    layout = Layout.objects.get(workspace__name="small-a", memories_dir="memories/engineering")
    md = MemoryVersion.Document.MEMORY_MD
    text = curation.text_of(curation.latest(layout, md))
    changed = text.replace(
        "auth-proxy canary is 25% for 30 min in sa-east-1",
        "auth-proxy canary is now 10% for 45 minutes in sa-east-1, then 50% for an hour",
    )
    assert changed != text
    curation.save_document(
        layout,
        md,
        changed + "- a line added at the end\n",
        user=None,
        reason="phone test",
        based_on=1,
    )
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()

    log_in(page, live_server)
    page.goto(
        f"{live_server.url}/w/small-a/layouts/{layout.pk}/documents/memory_md/versions/?a=1&b=2"
    )
    page.wait_for_selector("table.diff tr.changed")
    widths = page.evaluate(
        """() => {
        const probe = document.createElement('span');
        probe.textContent = '0'.repeat(40);
        const cell = document.querySelector('table.diff td.l');
        probe.style.font = getComputedStyle(cell).font;
        document.body.appendChild(probe);
        const ch = probe.getBoundingClientRect().width / 40;
        const cells = [...document.querySelectorAll('table.diff td.l, table.diff td.r')]
            .filter(td => td.offsetParent !== null && td.getClientRects().length);
        return {
            scroll: document.documentElement.scrollWidth,
            client: document.documentElement.clientWidth,
            chars: cells.map(td => Math.floor(td.clientWidth / ch)),
            changed: [...document.querySelectorAll('table.diff tr.changed td')]
                .filter(td => td.getClientRects().length).map(td => td.className),
        };
    }"""
    )
    context.close()

    assert widths["scroll"] <= widths["client"]
    assert widths["chars"] and min(widths["chars"]) > 30
    # A changed line shows as its old line, then its new one, each with its number.
    assert widths["changed"] == ["no", "l", "no", "r"]
