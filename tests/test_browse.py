"""The pages a reviewer reads after an import: layouts, rollouts, memory files, skills."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memoryui import documents, search
from memoryui.documents import resolve_citations, search_text
from memoryui.importer import import_workspace
from memoryui.models import Layout, MemoryVersion
from tests.factories import make_user

pytestmark = pytest.mark.django_db

XSS = (
    "<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n"
    "[click](javascript:alert(3)) [data](data:text/html;base64,PHNjcmlwdD4=)\n"
)


@pytest.fixture
def reviewer(client):
    client.force_login(make_user())
    return client


def layout_of(workspace: str, memories_dir: str) -> Layout:
    return Layout.objects.get(workspace__name=workspace, memories_dir=memories_dir)


def url(name: str, layout: Layout, *args) -> str:
    return reverse(f"memoryui:{name}", args=[layout.workspace.name, layout.pk, *args])


def text_match(sql: str) -> bool:
    """Whether a query matched the search's words against the texts (not the one
    look-up of whether their search index is complete, on PostgreSQL)."""
    sql = sql.lower()
    return "searchdocument" in sql and ("like" in sql or "websearch_to_tsquery" in sql)


@pytest.fixture
def medium(fixtures_dir):
    import_workspace(fixtures_dir / "medium-300" / "workspace", "medium")
    search.index_pending()  # as a worker does once the import commits (PostgreSQL)
    return layout_of("medium", "memories")


@pytest.fixture
def small(fixtures_dir):
    import_workspace(fixtures_dir / "small-a" / "workspace", "small-a")
    search.index_pending()
    return layout_of("small-a", "memories/engineering")


def test_layout_overview_shows_counts_states_selection_and_rollouts_without_memory(
    reviewer, medium
):
    page = reviewer.get(url("layout_detail", medium)).content.decode()

    assert "<b>177</b> rollouts" in page
    assert "<b>174</b> raw memories" in page
    assert 'class="state-completed"' in page and 'class="state-failed"' in page
    assert "completed (151)" in page and "failed (10)" in page
    assert "174 raw memories used" in page
    assert "<b>3</b> rollouts without a raw memory" in page
    for rollout_id in ("bug-fix-00151-00840a", "bug-fix-00220-a133ae"):
        assert rollout_id in page


def test_layout_overview_query_count_does_not_grow_with_the_layout(
    reviewer, small, medium, django_assert_max_num_queries
):
    for layout in (small, medium):
        with django_assert_max_num_queries(14):
            assert reviewer.get(url("layout_detail", layout)).status_code == 200


def test_layout_of_another_workspace_is_a_404(reviewer, small, medium):
    wrong = reverse("memoryui:layout_detail", args=["small-a", medium.pk])
    assert reviewer.get(wrong).status_code == 404


def test_rollout_list_is_paginated_newest_first(reviewer, medium, django_assert_max_num_queries):
    with django_assert_max_num_queries(8):
        page = reviewer.get(url("rollout_list", medium)).content.decode()
    assert "177 rollouts" in page and "page 1 of 4" in page
    assert page.count('<tr id="rollout-') == 50
    second = reviewer.get(url("rollout_list", medium) + "?page=4").content.decode()
    assert second.count('<tr id="rollout-') == 27


def test_rollout_list_filters_by_state_and_date(reviewer, medium):
    failed = reviewer.get(url("rollout_list", medium) + "?state=failed").content.decode()
    assert "10 rollouts" in failed
    assert 'state-completed">completed' not in failed
    dated = reviewer.get(
        url("rollout_list", medium) + "?since=2026-07-01&until=2026-07-10"
    ).content.decode()
    assert "rollouts" in dated
    assert "2026-06-" not in dated and "2026-07-11" not in dated


def test_rollout_list_filters_rollouts_without_memory_and_forgotten_ones(reviewer, medium):
    none = reviewer.get(url("rollout_list", medium) + "?memory=none").content.decode()
    assert "3 rollouts" in none
    selected = reviewer.get(url("rollout_list", medium) + "?selection=selected").content.decode()
    assert "174 rollouts" in selected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("slugify", "bug-fix-00236-d5a921"),  # words from a transcript
        ('"crème"', "bug-fix-00236-d5a921"),
    ],
)
def test_rollout_search_finds_transcript_words(reviewer, medium, query, expected):
    page = reviewer.get(url("rollout_list", medium), {"q": query}).content.decode()
    assert expected in page
    assert "177 rollouts" not in page


def test_a_search_reads_its_matches_once_per_page_and_pages_through_them_all(reviewer, medium):
    pages, scans = [], []
    number, last = 1, 1
    while number <= last:
        with CaptureQueriesContext(connection) as queries:
            page = reviewer.get(url("rollout_list", medium), {"q": "fix", "page": number})
        html = page.content.decode()
        scans.append(sum(text_match(q["sql"]) for q in queries))
        found = re.search(r"(\d+) rollouts.*?page \d+ of (\d+)", html, re.DOTALL)
        assert found, html
        total, last = int(found[1]), int(found[2])
        pages.append(re.findall(r'<tr id="rollout-([^"]+)"', html))
        number += 1

    assert 50 < total < 177 and last == 2  # more than a page, fewer than every rollout
    assert scans == [1, 0]  # the text match ran once, its matches kept for the next page
    shown = [rollout for rows in pages for rollout in rows]
    assert len(shown) == len(set(shown)) == total


def test_rollout_counts_and_search_matches_are_kept_until_the_next_import(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    search.index_pending()
    layout = layout_of("a", "memories")

    def shown(**params) -> tuple[str, int]:
        with CaptureQueriesContext(connection) as queries:
            html = reviewer.get(url("rollout_list", layout), params).content.decode()
        heavy = [
            q
            for q in queries.captured_queries
            if "COUNT(" in q["sql"].upper() or text_match(q["sql"])
        ]
        return re.search(r"(\d+) rollouts?\b", html)[0], len(heavy)

    assert shown() == ("3 rollouts", 1)
    assert shown() == ("3 rollouts", 0)  # the same import: not counted again
    assert shown(q="zanzibarium") == ("0 rollouts", 1)
    assert shown(q="zanzibarium") == ("0 rollouts", 0)

    sessions = ws / "sessions"
    (sessions / "prefs-6e64dd.jsonl").write_bytes((sessions / "prefs-6e64dc.jsonl").read_bytes())
    raw = next((ws / "memories" / "raw_memories").glob("*.md"))
    raw.write_text(raw.read_text() + "\n- zanzibarium\n")
    import_workspace(ws, "a")
    search.index_pending()

    assert shown() == ("4 rollouts", 1)
    assert shown(q="zanzibarium") == ("1 rollout", 1)


def test_rollout_search_covers_raw_memories_and_summaries(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    raw = ws / "memories" / "engineering" / "raw_memories" / "deploy-auth-proxy-dc4ee6.md"
    raw.write_text(raw.read_text() + "\n- zanzibarium only in the raw memory\n")
    summary = next((ws / "memories" / "engineering" / "rollout_summaries").glob("poll-*.md"))
    summary.write_text(summary.read_text() + "\nquokkafication only in the summary\n")
    import_workspace(ws, "a")
    layout = layout_of("a", "memories/engineering")

    in_raw = reviewer.get(url("rollout_list", layout), {"q": "zanzibarium"}).content.decode()
    in_summary = reviewer.get(url("rollout_list", layout), {"q": "quokkafication"}).content.decode()

    assert "1 rollout " in in_raw and "deploy-auth-proxy-dc4ee6" in in_raw
    assert "1 rollout " in in_summary and "poll-billing-api-6d30c0" in in_summary


def test_rollout_list_htmx_request_gets_only_the_table(reviewer, medium):
    response = reviewer.get(
        url("rollout_list", medium) + "?state=failed", headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    # The count for the page's live region (out of band, its content only), then the table.
    status, table = html.split("</div>", 1)
    assert status.lstrip().startswith('<div id="rollout-status" hx-swap-oob="innerHTML">')
    assert "10 rollouts" in status
    assert table.lstrip().startswith('<section id="rollout-table">')
    assert "<html" not in html and "rollout-status" not in table


def test_bad_filter_values_are_explained_not_a_500(reviewer, medium):
    response = reviewer.get(url("rollout_list", medium) + "?since=yesterday&state=bogus&page=x")
    assert response.status_code == 400  # the page, with the filters' messages
    assert "Enter a valid date" in response.content.decode()
    assert "Enter a page number" in response.content.decode()


def test_memory_md_page_lists_entries_with_resolved_citations(reviewer, small):
    page = reviewer.get(url("memory_md", small)).content.decode()

    for group in ("deployment runbooks", "menus bug fixes", "operations incidents"):
        assert group in page
    citation = url("citation", small, "eng-slugify-unicode-65aef7_fix-slugify-unicode-slugs.md")
    assert f'href="{citation}"' in page
    assert "missing citation" not in page and "unsupported" not in page


@pytest.mark.parametrize(
    "filename", ["plain_slug.md", "with space.md", "ünï-cödé.md", "a%25b?c#d&e.md", "x:y@z~!$.md"]
)
def test_citation_links_are_the_urls_django_would_build(small, filename):

    link = resolve_citations(small, {f"rollout_summaries/{filename}"})
    assert link[f"rollout_summaries/{filename}"].url == url("citation", small, filename)


def test_citation_leads_to_the_rollout_page(reviewer, small):
    response = reviewer.get(
        url("citation", small, "eng-slugify-unicode-65aef7_fix-slugify-unicode-slugs.md")
    )
    assert response.status_code == 302
    assert response["Location"] == url("rollout_detail", small, "eng-slugify-unicode-65aef7") + (
        "#rollout-summary"
    )


def test_citation_to_a_missing_file_is_flagged(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    memory = ws / "memories" / "engineering" / "MEMORY.md"
    memory.write_text(
        memory.read_text()
        + "\n# Task Group: invented\n\nscope: x\n\n## Task 1: made up\n\n"
        + "### rollout_summary_files\n\n- rollout_summaries/nope-1_gone.md\n\n"
        + "# Task Group: unsupported claim\n\nscope: y\n\n- the sky is green\n"
    )
    import_workspace(ws, "a")
    layout = layout_of("a", "memories/engineering")

    page = reviewer.get(url("memory_md", layout)).content.decode()

    assert "1 missing citation" in page
    assert "rollout_summaries/nope-1_gone.md (missing)" in page
    assert "unsupported" in page
    missing = reviewer.get(url("citation", layout, "nope-1_gone.md"))
    assert missing.status_code == 404 and "no such rollout summary" in missing.content.decode()


def test_memory_md_versions_can_be_viewed(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    memory = ws / "memories" / "engineering" / "MEMORY.md"
    memory.write_text("# Task Group: rewritten\n\nscope: all new\n")
    import_workspace(ws, "a")
    layout = layout_of("a", "memories/engineering")

    current = reviewer.get(url("memory_md", layout)).content.decode()
    first = reviewer.get(url("memory_md", layout) + "?version=1").content.decode()

    assert "rewritten" in current and "menus bug fixes" not in current
    assert "menus bug fixes" in first and "rewritten" not in first
    assert reviewer.get(url("memory_md", layout) + "?version=9").status_code == 404
    not_a_number = reviewer.get(url("memory_md", layout) + "?version=x")
    assert not_a_number.status_code == 400
    assert "Version: Enter a whole number." in not_a_number.content.decode()


def test_memory_md_with_many_entries_is_paginated_and_findable(
    reviewer, workspace_copy, django_assert_max_num_queries
):
    ws = workspace_copy("small-a")
    groups = "".join(
        f"# Task Group: group {i}\n\nscope: s{i}\n\n## Task 1: t{i}\n\n### keywords\n\n- kw{i}\n\n"
        for i in range(2000)
    )
    (ws / "memories" / "engineering" / "MEMORY.md").write_text(groups)
    import_workspace(ws, "a")
    layout = layout_of("a", "memories/engineering")
    # A process reads each text once (``documents.text``): the first view also reads the
    # layout's other texts, which an earlier test of this module may have read already.
    # The bound is the views after it, whatever ran before.
    reviewer.get(url("memory_md", layout))

    with django_assert_max_num_queries(12):
        page = reviewer.get(url("memory_md", layout)).content.decode()
    found = reviewer.get(url("memory_md", layout), {"q": "kw1999"}).content.decode()

    assert "2,000 top-level entries" in page and "Entries 1–20 of 2000" in page
    assert "group 1999" in found and "group 5\n" not in found

    # A find lists every entry that holds the words, in order, each once, and never one
    # made of the end of an entry and the start of the next.
    version = MemoryVersion.objects.get(layout=layout, document="memory_md", number=1)
    texts = [search_text(block) for block in documents.parsed(version.blob_id).children]
    finding = documents.entry_search(version.blob_id)
    for needle in (
        "kw1",
        "kw1999",
        "group",
        "s19",
        "t5",
        texts[0][-3:] + texts[1][:3],
        "nowhere",
        "",
    ):
        assert finding.matching(needle) == [i for i, t in enumerate(texts) if needle in t]
    found = reviewer.get(url("memory_md", layout), {"q": "KW19", "page": 2}).content.decode()
    assert "Entries 21–40 of 111" in found and "group 1919" in found  # kw19, kw190-199, 1900-1999


def test_memory_summary_page_counts_tokens_against_the_cap(reviewer, small):
    page = reviewer.get(url("memory_summary", small)).content.decode()
    assert "of 15,000 tokens" in page
    assert "The whole file is injected." in page
    assert "What&#x27;s in Memory" in page or "What's in Memory" in page


def test_memory_summary_over_the_cap_previews_the_cut(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    summary = ws / "memories" / "memory_summary.md"
    summary.write_text("## User Profile\n\nHEAD-MARK\n" + "word " * 20_000 + "\nTAIL-MARK\n")
    import_workspace(ws, "a")
    layout = layout_of("a", "memories")

    page = reviewer.get(url("memory_summary", layout)).content.decode()

    assert "Over the cap" in page
    assert "tokens truncated" in page
    injected = page[page.index('<pre class="injected">') :]
    assert "HEAD-MARK" in injected and "TAIL-MARK" in injected
    assert '<pre class="cut">' in page


def test_skills_are_listed_and_shown(reviewer, small):
    listing = reviewer.get(url("skill_list", small)).content.decode()
    assert "run-plain-python-tests" in listing
    page = reviewer.get(url("skill_detail", small, "run-plain-python-tests")).content.decode()
    assert "SKILL.md" in page
    assert reviewer.get(url("skill_detail", small, "nope")).status_code == 404


def test_model_written_markup_never_reaches_the_page_as_markup(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    eng = ws / "memories" / "engineering"
    (eng / "MEMORY.md").write_text("# Task Group: <b>bold</b>\n\n" + XSS)
    (eng / "memory_summary.md").write_text("## User Profile\n\n" + XSS)
    skill = eng / "skills" / "<img src=x onerror=alert(9)>"
    skill.mkdir()
    (skill / "SKILL.md").write_text(XSS)
    import_workspace(ws, "a")
    layout = layout_of("a", "memories/engineering")

    pages = [
        reviewer.get(url("memory_md", layout)),
        reviewer.get(url("memory_summary", layout)),
        reviewer.get(url("skill_list", layout)),
        reviewer.get(url("skill_detail", layout, "<img src=x onerror=alert(9)>")),
    ]

    for response in pages:
        html = response.content.decode()
        assert response.status_code == 200
        assert "<script>alert" not in html
        assert "<img src=x" not in html, html[html.index("<img src=x") - 300 :][:600]
        assert 'href="javascript:' not in html and 'href="data:text' not in html
        assert "script-src 'self'" in response["Content-Security-Policy"]


def test_layout_overview_leaves_out_files_gone_from_disk(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    (ws / "sessions" / "engineering" / "poll-billing-api-6d30c0.jsonl").unlink()
    (ws / "memories" / "engineering" / "raw_memories" / "deploy-auth-proxy-dc4ee6.md").unlink()
    import_workspace(ws, "a")
    layout = layout_of("a", "memories/engineering")

    page = reviewer.get(url("layout_detail", layout)).content.decode()

    assert "<b>2</b> rollouts" in page and "<b>2</b> raw memories" in page
    assert "max_turns_exceeded (1)" not in page  # the gone rollout is not in the chart
    without = page[page.index('id="without-memory"') :]
    assert "deploy-auth-proxy-dc4ee6" in without  # its raw memory is gone


def test_memory_md_index_shows_long_headings_cut_and_the_entry_in_full(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    title = "Task 1: " + "a very long task title " * 6
    (ws / "memories" / "engineering" / "MEMORY.md").write_text(
        f"# Task Group: g\n\nscope: s\n\n## {title}\n\nbody\n"
    )
    import_workspace(ws, "a")
    layout = layout_of("a", "memories/engineering")

    for _ in range(2):  # the second view reads what the first computed
        page = reviewer.get(url("memory_md", layout)).content.decode()
        index = page.split('<nav class="doc-index"', 1)[1].split("</nav>", 1)[0]
        assert f">{title[:59]}…</a>" in index
        assert title.strip() not in index and title.strip() in page


def _queries(client, page: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        content = client.get(page).content.decode()
    return len(queries), content


def test_layout_and_workspace_figures_are_computed_once_per_import(reviewer, workspace_copy):
    ws = workspace_copy("medium-300")
    import_workspace(ws, "m")
    layout = layout_of("m", "memories")
    overview = url("layout_detail", layout)
    workspace = reverse("memoryui:workspace_detail", args=["m"])

    first, page = _queries(reviewer, overview)
    again, cached = _queries(reviewer, overview)
    assert "<b>177</b> rollouts" in page and "<b>3</b> rollouts without a raw memory" in page
    assert "<b>177</b> rollouts" in cached and again <= first - 6
    first, page = _queries(reviewer, workspace)
    again, cached = _queries(reviewer, workspace)
    assert ">177</a>" in page and ">177</a>" in cached and again < first

    gone = ws / "sessions" / "bug-fix-00001-096efc.jsonl"
    gone.unlink()
    import_workspace(ws, "m")

    page = reviewer.get(overview).content.decode()
    assert "<b>176</b> rollouts" in page and "<b>177</b> rollouts" not in page
    assert ">176</a>" in reviewer.get(workspace).content.decode()
