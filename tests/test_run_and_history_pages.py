"""The run page (a short summary of its proposal, live while the run is active) and a
document's history (entry-level comparison, restore behind a confirmation)."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from generation import review
from memoryui import curation
from memoryui.models import GenerationRun, MemoryVersion, Pin, Proposal, Role
from tests.test_curation import login, member, url
from tests.test_pairing import BASE, DEPLOY, FLAKY, LINT, NOTES, big_document

MD = MemoryVersion.Document.MEMORY_MD
SUMMARY = MemoryVersion.Document.MEMORY_SUMMARY
HTMX = {"HX-Request": "true"}


def finished_run(layout, memory_md: str, *, base: str = BASE, skills=None) -> GenerationRun:
    version = curation.save_document(
        layout, MD, base, user=None, reason="base", based_on=curation.latest(layout, MD).number
    )
    run = GenerationRun.objects.create(
        layout=layout,
        status=GenerationRun.Status.DONE,
        phase_two_turns=4,
        phase_two_input_tokens=1234,
        phase_two_output_tokens=56,
        phase_two_files_touched=["MEMORY.md", "skills/deploy/SKILL.md"],
    )
    summary = curation.latest(layout, SUMMARY)
    Proposal.objects.create(
        layout=layout,
        run=run,
        base_memory_md=version,
        base_memory_summary=summary,
        memory_md=memory_md,
        memory_summary=curation.text_of(summary),
        raw_memories_md="",
        skill_changes=skills or {},
    )
    return run


def row(page: str, document: str) -> list[str]:
    match = re.search(rf'<tr data-document="{re.escape(document)}">(.*?)</tr>', page, re.S)
    assert match, page
    return re.findall(r'<td class="num">(\d+)', match.group(1))


@pytest.mark.django_db
def test_a_finished_run_shows_a_summary_and_a_review_link_never_the_diff(layout):
    renamed = DEPLOY.replace("Deploy the api service", "Deploying the API")
    skill = {"skills/deploy/SKILL.md": {"old": None, "new": "# Deploy\n"}}
    run = finished_run(layout, review.join([renamed, NOTES, LINT]), skills=skill)
    admin = member(Role.ADMIN, layout)
    page_url = url("run_detail", layout, run.pk)

    page = login(admin).get(page_url).content.decode()

    # changed (the rename, one change), added, removed, moved
    assert row(page, "MEMORY.md") == ["1", "1", "1", "0"]
    assert "(1 renamed, merged or split)" in page
    assert row(page, "memory_summary.md") == ["0", "0", "0", "0"]
    assert 'class="diff"' not in page and "Deploying the API" not in page
    proposal = run.proposal
    assert f'href="{url("proposal_review", layout, proposal.pk)}"' in page
    assert "Review the proposal →" in page
    assert '<code>skills/deploy/SKILL.md</code> <span class="badge added">added</span>' in page
    assert "turn 4 ·" in page and "1,234 tokens in" in page
    assert "Cancel run" not in page  # finished: nothing to cancel, even for an admin
    assert f'href="{page_url}"' not in page  # no link to the page itself
    assert "hx-trigger" not in page  # a finished run does not poll


@pytest.mark.django_db
def test_the_run_page_polls_while_active_and_its_partial_says_done_when_finished(layout):
    run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.EXTRACTING)
    admin = login(member(Role.ADMIN, layout))
    page_url = url("run_detail", layout, run.pk)

    page = admin.get(page_url).content.decode()
    fragment = admin.get(page_url, headers=HTMX).content.decode()
    assert 'hx-trigger="every 2s"' in page and "Cancel run" in page
    assert fragment.lstrip().startswith('<section id="run-progress"') and "<html" not in fragment
    assert 'hx-trigger="every 2s"' in fragment

    run.delete()
    run = finished_run(layout, review.join([DEPLOY, FLAKY, NOTES, LINT]))
    done = admin.get(url("run_detail", layout, run.pk), headers=HTMX).content.decode()
    # The swapped-in partial ends the polling and carries the summary and the link.
    assert 'id="run-status">Done<' in done and "hx-trigger" not in done
    assert "Cancel run" not in done and "Review the proposal →" in done
    assert row(done, "MEMORY.md") == ["0", "1", "0", "0"]


@pytest.mark.django_db
def test_the_run_page_query_count_does_not_depend_on_the_proposal_size(layout):
    viewer = login(member(Role.VIEWER, layout))
    small = finished_run(layout, review.join([FLAKY, NOTES, LINT]))
    big_text = big_document(400)
    large = finished_run(layout, big_document(400, seed=8), base=big_text)

    counts = []
    for run in (small, large):
        viewer.get(url("run_detail", layout, run.pk))  # warm the session and caches
        with CaptureQueriesContext(connection) as queries:
            response = viewer.get(url("run_detail", layout, run.pk))
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1] and counts[0] <= 12, counts


# --- history ---------------------------------------------------------------------


def three_versions(layout, editor):
    """v(n+1): BASE; v(n+2): DEPLOY renamed, FLAKY edited, LINT added."""
    first = curation.save_document(
        layout, MD, BASE, user=editor, reason="base", based_on=curation.latest(layout, MD).number
    )
    renamed = DEPLOY.replace("Deploy the api service", "Deploying the API")
    second = curation.save_document(
        layout,
        MD,
        review.join([renamed, FLAKY.replace("conftest", "conftest.py"), NOTES, LINT]),
        user=editor,
        reason="reworked",
        based_on=first.number,
    )
    return first, second


@pytest.mark.django_db
def test_history_compares_previous_with_current_entry_by_entry_by_default(
    layout, django_assert_max_num_queries
):
    editor = member(Role.EDITOR, layout)
    first, second = three_versions(layout, editor)
    client = login(editor)
    client.get(url("versions", layout, MD))

    with django_assert_max_num_queries(12):
        page = client.get(url("versions", layout, MD)).content.decode()

    assert f"<h2>v{first.number} → v{second.number}" in page
    assert f'<option value="{first.number}" selected>' in page
    assert f'<option value="{second.number}" selected>v{second.number} (current)' in page
    changes = page.split('id="history-diff"')[1]
    assert changes.count('<article class="entry history-change') == 3  # renamed, edited, added
    assert 'data-pairing="renamed"' in changes and "<q>Deploy the api service</q>" in changes
    assert "1 unchanged entry not shown" in changes
    assert changes.count('<table class="diff">') == 2  # small diffs of the two changed ones
    assert "conftest.<ins>py.</ins>" in changes  # the word-level highlight of the edit


@pytest.mark.django_db
def test_history_between_any_two_versions_and_bad_input_is_a_400(layout):
    editor = member(Role.EDITOR, layout)
    first, second = three_versions(layout, editor)
    client = login(editor)

    page = client.get(url("versions", layout, MD) + f"?a={second.number}&b={first.number}").text

    assert f"<h2>v{second.number} → v{first.number}" in page
    assert "1 added" not in page and "1 removed" in page  # LINT goes the other way
    assert client.get(url("versions", layout, MD) + "?a=x").status_code == 400
    assert client.get(url("versions", layout, MD) + "?a=1&b=999").status_code == 404


@pytest.mark.django_db
def test_restore_asks_first_naming_the_pinned_entries_it_drops_or_alters(layout):
    editor = member(Role.EDITOR, layout)
    first, second = three_versions(layout, editor)
    curation.set_pin(layout, MD, "task_group:configure the linter", True, user=editor)
    curation.set_pin(layout, MD, "task_group:fix flaky payment tests", True, user=editor)
    curation.set_pin(layout, MD, "task_group:write release notes", True, user=editor)
    client = login(editor)
    restore_url = url("version_restore", layout, MD, first.number)

    confirm = client.get(restore_url).content.decode()

    assert curation.latest(layout, MD).number == second.number  # nothing restored yet
    pins = confirm.split('id="pins-affected"')[1].split("</section>")[0]
    assert "2 pinned entries would change" in pins
    assert "<q>Configure the linter</q> would be dropped" in pins
    assert "<q>Fix flaky payment tests</q> would be altered" in pins
    assert "Write release notes" not in pins  # the same text in both
    assert '<button type="submit" class="primary inline">Restore v' in confirm
    assert 'data-pairing="renamed"' in confirm  # what changes, entry by entry

    response = client.post(restore_url)

    assert response.status_code == 302
    latest = curation.latest(layout, MD)
    assert (
        latest.number == second.number + 1 and latest.reason == f"restored version {first.number}"
    )
    assert curation.text_of(latest) == BASE
    assert Pin.objects.filter(layout=layout).count() == 3
