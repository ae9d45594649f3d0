"""Teams edit memory_summary.md in the browser: a section, the whole file or a new
section, with a live meter of the whole resulting file against the SDK's injection cap
(cut exactly as the SDK cuts it) before saving; stale saves refused with both texts."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import pytest
from agents.sandbox.util.token_truncation import TruncationPolicy, truncate_text
from django.test import Client
from django.urls import reverse

from generation import review
from generation.summary import MAX_TOKENS, approx_tokens, injected_summary
from memoryui import curation
from memoryui.importer import import_workspace
from memoryui.models import AuditEvent, Layout, Membership, MemoryVersion, Role
from tests import test_browser
from tests.factories import make_user
from tests.test_browser import log_in

SUMMARY = MemoryVersion.Document.MEMORY_SUMMARY
pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
browser = test_browser.browser  # the module-wide headless Chromium fixture
# A section of about 15,500 tokens: with the rest of the file, over the 15,000 cap.
BIG = "## Runbook\n\n" + "".join(
    f"- step {i}: check the canary, then promote\n" for i in range(1450)
)


def client_with(layout: Layout, role: Role, username: str = "erin") -> Client:
    user = make_user(username)
    Membership.objects.create(workspace=layout.workspace, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def editor(layout) -> Client:
    return client_with(layout, Role.EDITOR)


def edit_url(layout: Layout) -> str:
    return reverse("memoryui:summary_edit", args=[layout.workspace.name, layout.pk])


def preview_url(layout: Layout) -> str:
    return reverse("memoryui:summary_preview", args=[layout.workspace.name, layout.pk])


def page_url(layout: Layout) -> str:
    return reverse("memoryui:memory_summary", args=[layout.workspace.name, layout.pk])


def current(layout: Layout) -> tuple[int, str]:
    version = curation.latest(layout, SUMMARY)
    return version.number, curation.text_of(version)


def section(layout: Layout, title: str) -> review.Entry:
    return next(e for e in review.entries(current(layout)[1]) if e.title == title)


def shown(response) -> str:  # type: ignore[no-untyped-def]
    return html.unescape(response.content.decode())


def meter_tokens(response) -> int:  # type: ignore[no-untyped-def]
    found = re.search(r'<b id="meter-tokens">([\d,]+)</b>', response.content.decode())
    assert found, "no token meter"
    return int(found.group(1).replace(",", ""))


# --- the page ------------------------------------------------------------------------


def test_editors_see_an_edit_link_per_section_and_whole_file_and_add_controls(layout, editor):
    page = editor.get(page_url(layout)).content.decode()

    keys = [e.key for e in review.entries(current(layout)[1]) if e.text.strip()]
    assert len(keys) == 4
    for key in keys:
        assert f'{edit_url(layout)}?key={quote(key, safe="/")}"' in page
    assert f'id="edit-file" href="{edit_url(layout)}"' in page
    assert f'id="add-section" href="{edit_url(layout)}?add=1"' in page


def test_viewers_see_no_edit_controls_and_the_server_refuses_them(layout, settings):
    viewer = client_with(layout, Role.VIEWER, "vic")
    before = current(layout)

    page = viewer.get(page_url(layout)).content.decode()
    opened = viewer.get(edit_url(layout))
    saved = viewer.post(edit_url(layout), {"text": "# mine\n", "based_on": before[0]})
    previewed = viewer.post(preview_url(layout), {"text": "# mine\n"}, **HTMX)

    assert "summary/edit/" not in page and "Edit the whole file" not in page
    assert (opened.status_code, saved.status_code, previewed.status_code) == (403, 403, 403)
    assert current(layout) == before
    settings.MEMORYUI_DEFAULT_ROLE = "none"
    outsider = Client()
    outsider.force_login(make_user("olga"))
    assert outsider.get(edit_url(layout)).status_code == 404  # as for no such workspace


def test_an_older_version_is_shown_without_edit_controls(layout, editor):
    number, text = current(layout)
    editor.post(edit_url(layout), {"text": text + "\n## More\n\nmore\n", "based_on": number})

    old = editor.get(page_url(layout), {"version": number}).content.decode()
    new = editor.get(page_url(layout)).content.decode()

    assert "Edit the whole file" not in old and 'class="section-edit"' not in old
    assert "Edit the whole file" in new and 'class="section-edit"' in new


# --- saving ----------------------------------------------------------------------------


def test_editing_one_section_saves_the_whole_file_with_that_section_replaced(layout, editor):
    number, before = current(layout)
    tips = section(layout, "General Tips")
    opened = editor.get(edit_url(layout), {"key": tips.key})
    assert opened.status_code == 200 and tips.text in shown(opened)
    new = "## General Tips\n\n- Read memory_summary.md first.\n"

    response = editor.post(edit_url(layout), {"key": tips.key, "text": new, "based_on": number})

    assert response.status_code == 302 and response["Location"] == page_url(layout)
    after_number, after = current(layout)
    assert after_number == number + 1
    assert tips.text.endswith("back.\n\n")  # the blank line before the next section stays
    assert after == before.replace(tips.text, new + "\n")
    assert "Saved as version" in shown(editor.get(page_url(layout)))


def test_editing_the_whole_file_saves_it_as_typed(layout, editor):
    number, _ = current(layout)
    text = "## User Profile\r\n\r\nPrefers short answers.\r\n"  # as a browser posts it

    response = editor.post(edit_url(layout), {"text": text, "based_on": number})

    assert response.status_code == 302
    assert current(layout) == (number + 1, "## User Profile\n\nPrefers short answers.\n")


def test_the_meter_and_the_save_count_the_same_bytes_whatever_the_line_endings(
    layout, editor, settings
):
    settings.MEMORYUI_MAX_ENTRY_BYTES = 1_700
    number, _ = current(layout)
    lines = "".join(f"- line {i:03d}\r\n" for i in range(150))
    text = "## User Profile\r\n\r\n" + lines  # 1,819 bytes as a browser posts it, 1,667 saved

    preview = editor.post(preview_url(layout), {"text": text, "based_on": number}, **HTMX)
    saved = editor.post(edit_url(layout), {"text": text, "based_on": number})

    size = len(text.replace("\r\n", "\n").encode())
    assert f"{size:,} bytes" in shown(preview) and "Too long to save" not in shown(preview)
    assert saved.status_code == 302
    assert current(layout) == (number + 1, text.replace("\r\n", "\n"))


def test_adding_a_section_appends_it_to_the_file(layout, editor):
    number, before = current(layout)
    assert 'name="add" value="1"' in editor.get(edit_url(layout), {"add": "1"}).content.decode()

    response = editor.post(
        edit_url(layout),
        {"add": "1", "text": "## Team notes\n\nShip on Tuesdays.", "based_on": number},
    )

    assert response.status_code == 302
    after = current(layout)[1]
    assert after == before.rstrip("\n") + "\n\n## Team notes\n\nShip on Tuesdays.\n"
    assert review.entries(after)[-1].title == "Team notes"
    assert curation.latest(layout, SUMMARY).reason == "added an entry"


def test_the_first_section_of_a_layout_without_a_summary_is_the_whole_file(layout, editor):
    MemoryVersion.objects.filter(layout=layout, document=SUMMARY).delete()
    page = editor.get(page_url(layout)).content.decode()
    assert "has no memory_summary.md yet" in page and f"{edit_url(layout)}?add=1" in page

    response = editor.post(edit_url(layout), {"add": "1", "text": "## Team notes\n\n- a\n"})

    assert response.status_code == 302
    assert current(layout) == (1, "## Team notes\n\n- a\n")


def test_emptying_a_section_deletes_it(layout, editor):
    number, before = current(layout)
    tips = section(layout, "General Tips")

    response = editor.post(edit_url(layout), {"key": tips.key, "text": "", "based_on": number})

    assert response.status_code == 302
    assert current(layout) == (number + 1, before.replace(tips.text, ""))
    assert "General Tips" not in [e.title for e in review.entries(current(layout)[1])]


def test_adding_an_empty_section_saves_nothing(layout, editor):
    before = current(layout)

    response = editor.post(edit_url(layout), {"add": "1", "text": "  \n", "based_on": before[0]})

    assert response.status_code == 400
    assert "there is nothing to add" in shown(response)
    assert current(layout) == before


def test_each_save_is_a_version_in_the_history_and_an_audit_event(layout, editor):
    number, text = current(layout)
    tips = section(layout, "General Tips")
    editor.post(
        edit_url(layout), {"key": tips.key, "text": "## General Tips\n\n- x\n", "based_on": number}
    )
    editor.post(edit_url(layout), {"text": text, "based_on": number + 1})

    versions = MemoryVersion.objects.filter(layout=layout, document=SUMMARY).order_by("number")
    assert [(v.number, v.author.username, v.reason) for v in versions if v.number > number] == [
        (number + 1, "erin", f"edited entry {tips.key}"),
        (number + 2, "erin", "edited the whole file"),
    ]
    events = AuditEvent.objects.filter(action="version.create").order_by("pk")
    assert [(e.actor, e.target, e.detail["version"]) for e in events] == [
        ("erin", "memories/engineering/memory_summary.md", number + 1),
        ("erin", "memories/engineering/memory_summary.md", number + 2),
    ]
    history = shown(editor.get(reverse("memoryui:versions", args=["a", layout.pk, SUMMARY])))
    assert "edited the whole file" in history and f"edited entry {tips.key}" in history


def test_saving_an_unchanged_text_makes_no_version(layout, editor):
    number, text = current(layout)

    response = editor.post(edit_url(layout), {"text": text, "based_on": number})

    assert response.status_code == 302
    assert current(layout)[0] == number
    assert "Nothing changed" in shown(editor.get(page_url(layout)))


def test_a_stale_save_is_refused_and_shows_theirs_and_yours(layout, editor):
    number, _ = current(layout)
    tips = section(layout, "General Tips")
    theirs = "## General Tips\n\n- Theirs: saved first.\n"
    curation.edit_entry(layout, SUMMARY, tips.key, theirs, based_on=number, user=None)
    mine = "## General Tips\n\n- Mine: typed meanwhile.\n"

    response = editor.post(edit_url(layout), {"key": tips.key, "text": mine, "based_on": number})

    assert response.status_code == 409
    page = shown(response)
    assert "Someone saved memory_summary.md since you opened it" in page
    assert theirs in page and mine in page
    assert f'name="based_on" value="{number + 1}"' in page  # saving again is based on theirs
    assert current(layout)[0] == number + 1 and "Theirs" in current(layout)[1]
    again = editor.post(edit_url(layout), {"key": tips.key, "text": mine, "based_on": number + 1})
    assert again.status_code == 302 and "Mine" in current(layout)[1]


def test_a_section_deleted_meanwhile_comes_back_as_a_new_section_after_a_stale_save(layout, editor):
    number, before = current(layout)
    tips = section(layout, "General Tips")
    curation.edit_entry(layout, SUMMARY, tips.key, "", based_on=number, user=None)
    mine = "## General Tips\n\n- Mine.\n"

    response = editor.post(edit_url(layout), {"key": tips.key, "text": mine, "based_on": number})

    assert response.status_code == 409
    page = response.content.decode()
    assert 'name="add" value="1"' in page and 'name="key" value=""' in page
    assert html.escape(mine).replace("&#x27;", "'") in page  # still in the editor
    again = editor.post(edit_url(layout), {"add": "1", "text": mine, "based_on": number + 1})
    assert again.status_code == 302
    assert current(layout)[1].endswith(mine)


def test_a_stale_whole_file_save_keeps_both_texts(layout, editor):
    number, text = current(layout)
    curation.save_document(
        layout, SUMMARY, text + "\n## Theirs\n", user=None, reason="x", based_on=number
    )

    response = editor.post(edit_url(layout), {"text": "## Mine\n", "based_on": number})

    assert response.status_code == 409
    assert "## Theirs" in shown(response) and "## Mine" in shown(response)
    assert "## Mine" not in current(layout)[1]


# --- the cap -----------------------------------------------------------------------------


def test_a_save_over_the_cap_needs_confirmation_and_says_how_much_is_cut(layout, editor):
    number, before = current(layout)
    tips = section(layout, "General Tips")
    result = before.replace(tips.text, BIG + "\n")
    injection = injected_summary(result.encode())
    assert injection.truncated
    data = {"key": tips.key, "text": BIG, "based_on": number}

    refused = editor.post(edit_url(layout), data)

    assert refused.status_code == 400
    assert (
        f"Not saved: the file would be {injection.tokens:,} tokens, over the 15,000-token cap, "
        f"and agents would not see about {injection.cut_tokens:,} tokens" in shown(refused)
    )
    assert 'name="confirm_cut"' in refused.content.decode()
    assert current(layout)[0] == number

    saved = editor.post(edit_url(layout), {**data, "confirm_cut": str(injection.cut_tokens)})

    assert saved.status_code == 302
    assert current(layout) == (number + 1, result)
    assert (
        f"Saved as version {number + 1}. It is over the cap: agents will not see about "
        f"{injection.cut_tokens:,} tokens." in shown(editor.get(page_url(layout)))
    )


def test_save_anyway_covers_the_cut_it_was_ticked_for_and_no_larger_one(layout, editor):
    number, before = current(layout)
    tips = section(layout, "General Tips")
    data = {"key": tips.key, "text": BIG, "based_on": number}
    ticked_for = injected_summary(before.replace(tips.text, BIG + "\n").encode()).cut_tokens
    longer = BIG + "\n\n" + "More text typed after ticking it. " * 5
    grown = injected_summary(before.replace(tips.text, longer.rstrip() + "\n").encode())
    assert grown.cut_tokens > ticked_for

    refused = editor.post(
        edit_url(layout), {**data, "text": longer, "confirm_cut": str(ticked_for)}
    )
    preview = editor.post(
        preview_url(layout), {**data, "text": longer, "confirm_cut": str(ticked_for)}, **HTMX
    ).content.decode()
    still = editor.post(
        preview_url(layout), {**data, "confirm_cut": str(ticked_for)}, **HTMX
    ).content.decode()
    nonsense = editor.post(edit_url(layout), {**data, "confirm_cut": "yes please"})

    assert refused.status_code == 400 and current(layout)[0] == number
    assert f"ticked when about {ticked_for:,} tokens were cut" in shown(refused)
    assert re.search(r'name="confirm_cut" value="\d+">', preview)  # no longer ticked
    assert 'id="confirm-again"' in preview
    assert f'name="confirm_cut" value="{ticked_for}" checked>' in still
    assert nonsense.status_code == 400 and current(layout)[0] == number


def test_the_preview_gives_the_token_count_and_cut_that_agents_will_get(layout, editor):
    number, _ = current(layout)
    text = "## Everything\n\n" + "Grüße, 深い memory 🙂 " * 2_300  # multi-byte, over the cap
    injection = injected_summary(text.encode())
    sdk = truncate_text(text.strip(), TruncationPolicy.tokens(MAX_TOKENS))
    assert injection.truncated and injection.text == sdk

    response = editor.post(preview_url(layout), {"text": text, "based_on": number}, **HTMX)

    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="summary-preview"')  # the partial alone
    assert meter_tokens(response) == injection.tokens == approx_tokens(text.strip())
    page = shown(response)
    assert f"agents would not see about <b>{injection.cut_tokens:,}</b> tokens" in page
    assert f'<pre class="cut">{injection.cut}</pre>' in page
    assert injection.marker in page
    around = f'{injection.head[-200:]}<mark class="marker">{injection.marker}</mark>'
    assert around + injection.tail[:200] in page  # the kept text either side of the cut
    assert 'name="confirm_cut"' in body
    assert not MemoryVersion.objects.filter(layout=layout, number=number + 1).exists()


def test_the_preview_of_a_section_counts_the_whole_file_with_it_replaced(layout, editor):
    number, before = current(layout)
    tips = section(layout, "General Tips")
    result = before.replace(tips.text, BIG + "\n")

    response = editor.post(
        preview_url(layout), {"key": tips.key, "text": BIG, "based_on": number}, **HTMX
    )

    injection = injected_summary(result.encode())
    assert meter_tokens(response) == injection.tokens > approx_tokens(BIG)
    assert f'<pre class="cut">{injection.cut}</pre>' in shown(response)
    small = editor.post(
        preview_url(layout), {"key": tips.key, "text": tips.text, "based_on": number}, **HTMX
    )
    assert meter_tokens(small) == injected_summary(before.encode()).tokens
    assert "The whole file would be injected." in shown(small)


def test_the_preview_button_works_without_javascript(layout, editor):
    number, _ = current(layout)

    response = editor.post(edit_url(layout), {"text": BIG, "based_on": number, "preview": "1"})

    assert response.status_code == 200
    page = shown(response)
    assert "<html" in page and 'id="summary-meter"' in page
    assert meter_tokens(response) == injected_summary(BIG.encode()).tokens
    assert "What the cap would cut" in page and BIG.splitlines()[5] in page
    assert current(layout)[0] == number


def test_the_preview_warns_when_someone_saved_meanwhile(layout, editor):
    number, text = current(layout)
    curation.save_document(layout, SUMMARY, text + "\nx\n", user=None, reason="x", based_on=number)

    response = editor.post(preview_url(layout), {"text": text, "based_on": number}, **HTMX)

    assert f"Someone saved version {number + 1} since you opened this" in shown(response)


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        {"based_on": "abc"},
        {"based_on": "9" * 30},
        {"text": "a\x00b"},
        {"key": "section:general tips", "add": "1"},
        {"based_on": "999"},  # no such version
    ],
)
def test_bad_input_is_a_400_with_a_message(layout, editor, data):
    before = current(layout)

    for url in (edit_url(layout), preview_url(layout)):
        response = editor.post(url, data, **HTMX)

        assert response.status_code == 400, (url, data)
        assert "notice bad" in response.content.decode() or "<li>" in response.content.decode()
    assert current(layout) == before


def test_an_unknown_section_is_a_404(layout, editor):
    assert editor.get(edit_url(layout), {"key": "section:no such"}).status_code == 404


def test_a_text_over_the_size_limit_shows_the_editor_again_with_its_size(layout, editor):
    number, before = current(layout)
    text = "## Huge\n\n" + "x" * (64 * 1024)

    response = editor.post(edit_url(layout), {"text": text, "based_on": number})
    preview = editor.post(preview_url(layout), {"text": text, "based_on": number}, **HTMX)

    assert response.status_code == 400
    assert f"This text is {len(text):,} bytes; the limit is 65,536 bytes" in shown(response)
    assert text in shown(response)  # nothing lost
    assert current(layout) == (number, before)
    assert preview.status_code == 200  # the meter says it, as the person types
    assert f"Too long to save: {len(text):,} bytes" in shown(preview)


# --- queries -------------------------------------------------------------------------------


def test_the_pages_and_the_preview_make_a_fixed_number_of_queries(
    layout, editor, django_assert_max_num_queries
):
    number, _ = current(layout)
    tips = section(layout, "General Tips")
    viewer = client_with(layout, Role.VIEWER, "vic")
    editor.get(page_url(layout))  # warm the per-process caches of the content
    # session, user, layout, memberships, then the page's own: the edit links add none
    with django_assert_max_num_queries(6):
        assert editor.get(page_url(layout)).status_code == 200
    with django_assert_max_num_queries(6):
        assert viewer.get(page_url(layout)).status_code == 200
    with django_assert_max_num_queries(5):
        assert editor.get(edit_url(layout), {"key": tips.key}).status_code == 200
    with django_assert_max_num_queries(5):
        response = editor.post(
            preview_url(layout), {"key": tips.key, "text": BIG, "based_on": number}, **HTMX
        )
        assert response.status_code == 200
    new = {"key": tips.key, "text": "## General Tips\n\n- x\n", "based_on": number}
    with django_assert_max_num_queries(17):  # with the lock, the version, the audit event
        assert editor.post(edit_url(layout), new).status_code == 302


# --- in a real browser ------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_an_editor_types_past_the_cap_sees_the_meter_and_cut_live_then_saves(
    browser,
    live_server,
    fixtures_dir,
):

    import_workspace(fixtures_dir / "small-a" / "workspace", "small-a")
    layout = Layout.objects.get(workspace__name="small-a", memories_dir="memories/engineering")
    user = make_user("ada")
    Membership.objects.create(workspace=layout.workspace, user=user, role=Role.EDITOR)
    number, before = current(layout)
    tips = section(layout, "General Tips")
    expected = injected_summary(before.replace(tips.text, BIG + "\n").encode())
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        log_in(page, live_server)
        page.goto(live_server.url + page_url(layout))
        page.click('a.section-edit[aria-label="Edit “General Tips”"]')
        page.wait_for_selector("#id_text")
        assert page.input_value("#id_text").strip() == tips.text.strip()
        assert page.inner_text("#fits") == "The whole file would be injected."
        page.evaluate("window.notReloaded = true")

        page.fill("#id_text", BIG[:-10])
        page.locator("#id_text").press_sequentially(BIG[-10:])  # typed, key by key

        page.wait_for_selector("#cut-warning")
        page.wait_for_function(
            "n => document.querySelector('#meter-tokens').textContent === n",
            arg=f"{expected.tokens:,}",
        )
        assert page.evaluate("window.notReloaded") is True  # updated in place, no reload
        assert f"about {expected.cut_tokens:,} tokens" in page.inner_text("#cut-warning")
        assert expected.marker in page.inner_text("#cut-preview pre.around-marker")
        assert page.inner_text("#cut-preview pre.cut").strip() == expected.cut.strip()
        assert "step 1449" in page.inner_text("#rendered-preview")

        page.check("input[name=confirm_cut]")
        page.click("button:text('Save as a new version')")
        page.wait_for_selector("#summary-version")
        assert page.inner_text("#summary-version").startswith(f"Version {number + 1} ")
        assert f"Saved as version {number + 1}." in page.inner_text("ul.messages")
        assert page.inner_text("#token-budget").startswith(f"{expected.tokens:,} of 15,000")
        assert not problems, problems  # no CSP violation, no script error
    finally:
        context.close()
    assert current(layout) == (number + 1, before.replace(tips.text, BIG + "\n"))
