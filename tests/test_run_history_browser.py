"""The run page and the history page in headless Chromium: the run page reaches Done
by itself (htmx polling, no reload); the history diff of a reworked document is short.
With MEMORYUI_SCREENSHOTS=<dir> the tests also save screenshots there."""

import os
from pathlib import Path

import pytest

from generation import review
from memoryui import curation
from memoryui.models import GenerationRun, MemoryVersion, Proposal, Role
from tests.test_browser import browser, log_in, page  # noqa: F401 - fixtures
from tests.test_curation import member, url
from tests.test_pairing import BASE, DEPLOY, FLAKY, LINT, NOTES, body, group

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MD = MemoryVersion.Document.MEMORY_MD
SHOTS = os.environ.get("MEMORYUI_SCREENSHOTS")


def shot(page, name: str) -> None:  # noqa: F811
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def test_the_run_page_reaches_done_without_a_reload(page, live_server, layout):  # noqa: F811
    member(Role.ADMIN, layout, "ada")
    base = curation.save_document(
        layout, MD, BASE, user=None, reason="base", based_on=curation.latest(layout, MD).number
    )
    run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.EXTRACTING)
    log_in(page, live_server)
    page.goto(live_server.url + url("run_detail", layout, run.pk))
    page.wait_for_selector("#run-status")
    page.evaluate("window.stillTheSamePage = true")
    assert page.locator("text=Cancel run").count() == 1
    shot(page, "run-active")

    renamed = DEPLOY.replace("Deploy the api service", "Deploying the API")
    summary = curation.latest(layout, MemoryVersion.Document.MEMORY_SUMMARY)
    Proposal.objects.create(
        layout=layout,
        run=run,
        base_memory_md=base,
        base_memory_summary=summary,
        memory_md=review.join([renamed, NOTES, LINT]),
        memory_summary=curation.text_of(summary),
        raw_memories_md="",
    )
    GenerationRun.objects.filter(pk=run.pk).update(
        status=GenerationRun.Status.DONE, phase_two_turns=3, phase_two_files_touched=["MEMORY.md"]
    )

    page.wait_for_selector("#run-status:has-text('Done')", timeout=15_000)
    assert page.evaluate("window.stillTheSamePage") is True
    assert page.locator("text=Cancel run").count() == 0
    assert page.locator("#review-link").is_visible()
    shot(page, "run-done")
    # Polling has stopped: the finished section no longer asks for updates.
    assert page.locator("#run-progress[hx-trigger]").count() == 0


def test_the_history_diff_of_a_reworked_document_is_entry_by_entry_and_short(
    page,  # noqa: F811
    live_server,
    layout,
):
    editor = member(Role.EDITOR, layout, "ada")
    first = curation.save_document(
        layout, MD, BASE, user=editor, reason="base", based_on=curation.latest(layout, MD).number
    )
    merged = group("Deploying and testing", body(DEPLOY) + "\n" + body(FLAKY), "r1", "r3")
    second = curation.save_document(
        layout,
        MD,
        review.join([merged, NOTES.replace("by hand", "by hand, ever"), LINT]),
        user=editor,
        reason="consolidation",
        based_on=first.number,
    )
    curation.set_pin(layout, MD, "task_group:configure the linter", True, user=editor)
    log_in(page, live_server)

    page.goto(live_server.url + url("versions", layout, MD))
    page.wait_for_selector("#history-diff")
    assert page.locator("#history-diff article").count() == 3  # merged, changed, added
    assert page.locator("[data-pairing=merged]").is_visible()
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 2500, height
    shot(page, "history")

    page.click(f"#version-list a[href$='/versions/{first.number}/restore/']")
    page.wait_for_selector("#pins-affected")
    assert "Configure the linter" in page.locator("#pins-affected").inner_text()
    shot(page, "restore-confirm")
    page.click("button:has-text('Restore v')")
    page.wait_for_selector("#version-list")
    assert curation.latest(layout, MD).number == second.number + 1
