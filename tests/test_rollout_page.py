"""The rollout page: the transcript by item type beside its raw memory and summary,
and the full-item view behind each "expand"."""

import json
import re

import pytest
from django.urls import reverse

from generation.tree import parse_rollout
from memoryui import transcript
from memoryui.importer import import_workspace
from memoryui.models import Rollout
from tests.factories import make_user

pytestmark = pytest.mark.django_db

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = "<img src=x onerror=alert(1)>"
XSS_LINK = "[x](javascript:alert(1))"
XSS = f"{XSS_SCRIPT} {XSS_IMG} {XSS_LINK}"


@pytest.fixture
def small_a(fixtures_dir):
    return import_workspace(fixtures_dir / "small-a" / "workspace", "small-a")


@pytest.fixture
def reviewer(client):
    client.force_login(make_user())
    return client


def rollout_url(workspace: str, rollout_id: str, **query: object) -> str:
    rollout = Rollout.objects.get(layout__workspace__name=workspace, rollout_id=rollout_id)
    url = reverse("memoryui:rollout_detail", args=[workspace, rollout.layout_id, rollout_id])
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return url


def item_url(workspace: str, rollout_id: str, segment: int, index: int) -> str:
    rollout = Rollout.objects.get(layout__workspace__name=workspace, rollout_id=rollout_id)
    return reverse(
        "memoryui:rollout_item", args=[workspace, rollout.layout_id, rollout_id, segment, index]
    )


def segment(
    items: list,
    *,
    user: object = "Please do the thing.",
    state: str = "completed",
    final_output: object = None,
    interruptions: list | None = None,
    exception: tuple[str, str] | None = None,
) -> dict:
    line: dict = {
        "updated_at": "2026-11-30T10:00:00.000001+00:00",
        "rollout_id": "made-up",
        "input": [{"content": user, "role": "user"}] if isinstance(user, str) else user,
        "generated_items": items,
    }
    if interruptions:
        line["interruptions"] = interruptions
    line["terminal_metadata"] = {
        "terminal_state": state,
        "exception_type": exception[0] if exception else None,
        "exception_message": exception[1] if exception else None,
        "has_final_output": final_output is not None,
    }
    if final_output is not None:
        line["final_output"] = final_output
    return line


def write_rollout(workspace_dir, rollout_id: str, segments: list[dict]) -> None:
    lines = [json.dumps({**s, "rollout_id": rollout_id}, separators=(",", ":")) for s in segments]
    (workspace_dir / "sessions" / f"{rollout_id}.jsonl").write_text("\n".join(lines) + "\n")


def call(call_id: str, arguments: object, name: str = "exec_command") -> dict:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"arguments": arguments, "call_id": call_id, "name": name, "type": "function_call"}


def output(call_id: str, text: object) -> dict:
    return {"call_id": call_id, "output": text, "type": "function_call_output"}


def entry_containing(page: str, needle: str) -> str:
    """The transcript entry (a message, or a call with its outputs) holding ``needle``."""
    for chunk in page.split('<li class="entry ')[1:]:
        if needle in chunk:
            return chunk.split("</li>")[0] if "</li>" in chunk else chunk
    raise AssertionError(f"{needle!r} is in no entry")


def section(page: str, element_id: str) -> str:
    start = page.index(f'id="{element_id}"')
    return page[start : page.index("</section>", start)]


# --- real rollouts -------------------------------------------------------------------


def test_page_shows_user_message_exec_calls_with_outputs_patch_diff_and_terminal_state(
    reviewer, small_a
):
    response = reviewer.get(rollout_url("small-a", "eng-slugify-unicode-65aef7"))
    page = response.content.decode()

    assert response.status_code == 200
    assert "Hi, Priya here. Bug report" in entry_containing(page, "role-user")
    # Each exec call shows its command, and its output right under it, with exit code.
    failing = entry_containing(page, "call_bf0542b4ea41")
    assert "PYTHONPATH=src python3 tests/test_slugs.py" in failing
    assert "AssertionError" in failing and "exit 1" in failing
    assert "1 passed" in entry_containing(page, "call_bf10238dacee")
    assert "exit 0" in entry_containing(page, "call_bf10238dacee")
    # apply_patch input is a diff with its removed and added lines classed.
    patch = entry_containing(page, "call_bf0814ab2f2d")
    assert (
        '<div class="diff-line diff-del">-    return title.lower().replace(&quot; &quot;, '
        "&quot;_&quot;)</div>" in patch
    )
    assert (
        '<div class="diff-line diff-add">+    return &quot;-&quot;.join(title.lower().split())'
        "</div>" in patch
    )
    assert '<div class="diff-line diff-file">*** Update File: src/menus/slugs.py</div>' in patch
    assert "Updated src/menus/slugs.py" in patch  # the custom tool's output, under it
    # Assistant text is markdown; the run's end and final output close the segment.
    assert "<code>slugify</code>" in page
    end = page[page.index('class="segment-end"') :]
    assert "state-completed" in end and "Final output" in end


def test_two_segment_rollout_shows_each_segment_separately_with_its_terminal_state(
    reviewer, small_a
):
    page = reviewer.get(rollout_url("small-a", "gtm-pipeline-65f53e")).content.decode()

    first, second = section(page, "segment-1"), section(page, "segment-2")
    assert "Segment 1 of 2" in first and "Segment 2 of 2" in second
    assert "Analyze data/leads.csv" in first and "outreach hypothesis" not in first
    assert "write a short outreach hypothesis" in second
    for part in (first, second):
        assert "Run ended" in part and "state-completed" in part.split("Run ended")[1]
    assert "+# Outreach hypothesis: financial-services" in second
    assert 'href="#segment-2"' in page  # the outline of segments


def test_max_turns_rollout_shows_its_terminal_metadata(reviewer, small_a):
    page = reviewer.get(rollout_url("small-a", "poll-billing-api-6d30c0")).content.decode()

    end = page[page.index('class="segment-end"') :]
    assert "max_turns_exceeded" in end
    assert "MaxTurnsExceeded" in end and "Max turns (2) exceeded" in end
    assert "No final output." in end


def test_raw_memory_and_summary_are_shown_beside_the_transcript(reviewer, small_a):
    page = reviewer.get(rollout_url("small-a", "gtm-pipeline-65f53e")).content.decode()

    raw = section(page, "raw-memory")
    assert "memories/raw_memories/gtm-pipeline-65f53e.md" in raw
    assert "<dt>rollout_summary_file</dt>" in raw  # headers as a definition list
    assert "<dt>task_outcome</dt><dd>success</dd>" in raw  # front matter too
    assert "<h3>Task 1: gtm segment analysis</h3>" in raw  # the body as markdown
    summary = section(page, "rollout-summary")
    assert "<dt>session_id</dt>" in summary
    assert "<h1>Two-turn GTM session" in summary
    assert page.index('id="raw-memory"') < page.index('id="transcript"')


def test_rollout_without_raw_memory_says_so(reviewer, fixtures_dir):
    import_workspace(fixtures_dir / "small-b" / "workspace", "small-b")

    page = reviewer.get(
        rollout_url("small-b", "run-101d121b320b4785983a79ff6f13a843")
    ).content.decode()

    assert "No raw memory for this rollout" in section(page, "raw-memory")
    assert "No summary for this rollout" in section(page, "rollout-summary")


# --- made-up rollouts ----------------------------------------------------------------


def test_model_and_tool_text_is_escaped_never_run(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    write_rollout(
        ws,
        "xss-1",
        [
            segment(
                [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [
                            {"type": "output_text", "text": XSS},
                            {"type": "refusal", "refusal": XSS},
                            {"type": "input_image", "image_url": "javascript:alert(1)"},
                        ],
                    },
                    call("c1", {"cmd": XSS, "workdir": XSS_IMG}),
                    output("c1", f"Chunk ID: 1\nWall time: 0.1 seconds\nOutput:\n{XSS}\n"),
                    call("c2", f"{XSS_SCRIPT} not json {{"),
                    output("c2", [{"type": "input_text", "text": XSS}]),
                    {
                        "type": "custom_tool_call",
                        "name": "apply_patch",
                        "call_id": "c3",
                        "input": (
                            f"*** Begin Patch\n*** Add File: {XSS_IMG}\n+{XSS}\n*** End Patch\n"
                        ),
                    },
                    {
                        "type": "web_search_call",
                        "id": "ws1",
                        "status": "completed",
                        "action": {
                            "type": "search",
                            "query": XSS,
                            "sources": [{"type": "url", "url": "javascript:alert(1)"}],
                        },
                    },
                    {"type": "mystery", "payload": XSS},
                ],
                user=XSS,
                final_output=XSS,
            )
        ],
    )
    (ws / "memories" / "raw_memories" / "xss-1.md").write_text(
        f"rollout_id: xss-1\nrollout_summary_file: rollout_summaries/xss-1_x.md\n\n{XSS}\n"
    )
    import_workspace(ws, "x")

    page = reviewer.get(rollout_url("x", "xss-1")).content.decode()

    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text
    assert "[x](javascript:alert(1))" in page
    assert XSS_SCRIPT not in page
    assert "<img src=x" not in page
    assert not re.search(r"href=[\"']?\s*javascript:", page, re.IGNORECASE)
    assert not re.search(r"src=[\"']?\s*javascript:", page, re.IGNORECASE)


def test_unknown_and_other_item_types_are_shown_not_dropped(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    write_rollout(
        ws,
        "kinds-1",
        [
            segment(
                [
                    {"type": "brand_new_item", "detail": {"answer": 42}},
                    {
                        "type": "shell_call",
                        "call_id": "s1",
                        "action": {"commands": ["ls -la", "pwd"], "timeout_ms": 1000},
                    },
                    {
                        "type": "shell_call_output",
                        "call_id": "s1",
                        "output": [
                            {
                                "stdout": "total 0",
                                "stderr": "ls: oops",
                                "outcome": {"type": "exit", "exit_code": 2},
                            }
                        ],
                    },
                    {
                        "type": "apply_patch_call",
                        "call_id": "p1",
                        "operation": {
                            "type": "update_file",
                            "path": "a.py",
                            "diff": "@@\n-old line\n+new line\n",
                        },
                    },
                    {"type": "apply_patch_call_output", "call_id": "p1", "status": "failed"},
                    {
                        "type": "mcp_call",
                        "id": "m1",
                        "server_label": "docs-server",
                        "name": "lookup",
                        "arguments": '{"q": "alpha"}',
                        "output": "beta",
                    },
                    {
                        "type": "computer_call",
                        "call_id": "k1",
                        "action": {"type": "click", "x": 10, "y": 20, "button": "left"},
                    },
                    {
                        "type": "computer_call_output",
                        "call_id": "k1",
                        "output": {
                            "type": "computer_screenshot",
                            "image_url": "data:image/png;base64,iVBORw0KGgo=",
                        },
                    },
                    {
                        "type": "web_search_call",
                        "id": "w1",
                        "action": {
                            "type": "search",
                            "query": "django partials",
                            "sources": [{"type": "url", "url": "https://example.com/a"}],
                        },
                    },
                    output("lost-call", "an answer without its call"),
                ],
                state="interrupted",
                interruptions=[call("c9", {"cmd": "rm -rf build"})],
            )
        ],
    )
    import_workspace(ws, "k")

    page = reviewer.get(rollout_url("k", "kinds-1")).content.decode()

    generic = entry_containing(page, "brand_new_item")
    assert "&quot;answer&quot;: 42" in generic
    shell = entry_containing(page, "ls -la\npwd")
    assert "total 0" in shell and "ls: oops" in shell and "exit 2" in shell
    patch = entry_containing(page, "a.py")
    assert 'diff-del">-old line' in patch and 'diff-add">+new line' in patch
    assert "failed" in patch
    mcp = entry_containing(page, "docs-server")
    assert "lookup" in mcp and "&quot;q&quot;: &quot;alpha&quot;" in mcp and "beta" in mcp
    computer = entry_containing(page, "computer call")
    assert "click" in computer and 'src="data:image/png;base64,iVBORw0KGgo="' in computer
    assert '<a href="https://example.com/a"' in entry_containing(page, "django partials")
    assert "its call is not in this segment" in entry_containing(page, "lost-call")
    end = page[page.index('class="segment-end"') :]
    assert "Interruptions" in end and "rm -rf build" in end and "awaiting approval" in end
    assert "state-interrupted" in end


def test_each_segment_ends_with_its_own_state(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    write_rollout(
        ws,
        "two-1",
        [
            segment([], user="first run", state="failed", exception=("ValueError", "boom")),
            segment([], user="second run", final_output={"ok": True}),
        ],
    )
    import_workspace(ws, "t")

    page = reviewer.get(rollout_url("t", "two-1")).content.decode()

    first, second = section(page, "segment-1"), section(page, "segment-2")
    assert "state-failed" in first and "ValueError" in first and "boom" in first
    assert "state-completed" in second and "&quot;ok&quot;: true" in second


def test_long_output_is_clipped_with_an_expand_that_loads_the_whole_of_it(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    lines = "\n".join(f"line {n:04d}" for n in range(1, 501))
    write_rollout(ws, "long-1", [segment([call("c1", {"cmd": "seq"}), output("c1", lines)])])
    import_workspace(ws, "l")
    full_url = item_url("l", "long-1", 1, 3)

    page = reviewer.get(rollout_url("l", "long-1")).content.decode()

    assert "line 0040" in page and "line 0041" not in page
    assert "line 0480" not in page and "line 0481" in page and "line 0500" in page
    assert "440 lines hidden — expand" in page
    assert f'href="{full_url}" hx-get="{full_url}" hx-target="#item-1-3"' in page

    fragment = reviewer.get(full_url, headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    body = fragment.content.decode()
    assert "<html" not in body and 'id="item-1-3"' in body
    assert all(f"line {n:04d}" in body for n in range(1, 501))
    assert "hidden — expand" not in body

    whole = reviewer.get(full_url).content.decode()
    assert "<html" in whole and "line 0250" in whole
    assert "Back to the transcript" in whole


def test_long_transcript_is_paginated_by_entries(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    count = transcript.ENTRIES_PER_PAGE + 30
    items = []
    for n in range(count):
        items += [call(f"c{n}", {"cmd": f"echo {n}"}), output(f"c{n}", f"out {n}")]
    write_rollout(ws, "many-1", [segment(items, final_output="all done")])
    import_workspace(ws, "m")

    first = reviewer.get(rollout_url("m", "many-1")).content.decode()
    second = reviewer.get(rollout_url("m", "many-1", page=2)).content.decode()

    # The user message and the first 99 calls on page 1; the rest on page 2.
    assert first.count('<li class="entry ') == transcript.ENTRIES_PER_PAGE
    assert "Run ended" not in first and "continue on page 2" in first
    assert 'href="?page=2"' in first
    assert second.count('<li class="entry ') == count + 1 - transcript.ENTRIES_PER_PAGE
    assert "(continued)" in second and "Run ended" in second and "all done" in second
    assert f"echo {count - 1}" in second and f"echo {count - 1}" not in first
    # A page number that is not one is refused with a message; a too large one shows the end.
    refused = reviewer.get(rollout_url("m", "many-1", page="abc"))
    assert refused.status_code == 400 and "Enter a page number" in refused.content.decode()
    assert "Run ended" in reviewer.get(rollout_url("m", "many-1", page=99)).content.decode()


def test_page_runs_a_constant_number_of_queries(
    reviewer, workspace_copy, django_assert_max_num_queries
):
    ws = workspace_copy("small-a")
    items = []
    for n in range(400):
        items += [call(f"c{n}", {"cmd": f"echo {n}"}), output(f"c{n}", "x\n" * 100)]
    write_rollout(ws, "big-1", [segment(items), segment(items)])
    import_workspace(ws, "q")
    small, big = rollout_url("q", "gtm-pipeline-65f53e"), rollout_url("q", "big-1")

    with django_assert_max_num_queries(8):
        assert reviewer.get(small).status_code == 200
    with django_assert_max_num_queries(8):
        assert reviewer.get(big).status_code == 200
    with django_assert_max_num_queries(8):
        assert reviewer.get(item_url("q", "big-1", 2, 5)).status_code == 200


def test_missing_file_and_file_problems_are_shown(reviewer, workspace_copy):
    ws = workspace_copy("small-a")
    path = ws / "sessions" / "gtm-pipeline-65f53e.jsonl"
    path.write_bytes(path.read_bytes() + b"{not json\n")
    import_workspace(ws, "p")
    page = reviewer.get(rollout_url("p", "gtm-pipeline-65f53e")).content.decode()
    assert "Problems with this file" in page and "not valid JSON" in page
    assert 'id="segment-2"' in page  # the good segments still shown

    path.unlink()
    import_workspace(ws, "p")
    page = reviewer.get(rollout_url("p", "gtm-pipeline-65f53e")).content.decode()
    assert 'id="file-missing"' in page and "gone from disk" in page
    assert "Analyze data/leads.csv" in page


# --- access --------------------------------------------------------------------------


def test_unknown_workspace_layout_rollout_or_item_is_a_404(reviewer, small_a, fixtures_dir):
    other = import_workspace(fixtures_dir / "small-a" / "workspace", "other")
    rollout = Rollout.objects.get(
        layout__workspace__name="small-a", rollout_id="gtm-pipeline-65f53e"
    )
    foreign = other.workspace.layouts.get(memories_dir="memories").pk
    layout = rollout.layout_id

    def detail(*args: object) -> int:
        return reviewer.get(reverse("memoryui:rollout_detail", args=args)).status_code

    def item(*args: object) -> int:
        return reviewer.get(reverse("memoryui:rollout_item", args=args)).status_code

    assert detail("small-a", layout, "gtm-pipeline-65f53e") == 200
    assert detail("nope", layout, "gtm-pipeline-65f53e") == 404
    assert detail("small-a", 999999, "gtm-pipeline-65f53e") == 404
    assert detail("small-a", foreign, "gtm-pipeline-65f53e") == 404  # another workspace's
    assert detail("small-a", layout, "no-such-rollout") == 404
    assert detail("small-a", layout, "eng-slugify-unicode-65aef7") == 404  # other layout's
    assert item("small-a", layout, "gtm-pipeline-65f53e", 2, 1) == 200
    assert item("small-a", layout, "gtm-pipeline-65f53e", 0, 1) == 404
    assert item("small-a", layout, "gtm-pipeline-65f53e", 3, 1) == 404
    assert item("small-a", layout, "gtm-pipeline-65f53e", 1, 0) == 404
    assert item("small-a", layout, "gtm-pipeline-65f53e", 1, 99) == 404
    assert item("small-a", foreign + 999, "gtm-pipeline-65f53e", 1, 1) == 404


def test_anonymous_visitor_is_sent_to_login(client, small_a):
    for url in (
        rollout_url("small-a", "gtm-pipeline-65f53e"),
        item_url("small-a", "gtm-pipeline-65f53e", 1, 1),
    ):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_page_refuses_post(reviewer, small_a):
    assert reviewer.post(rollout_url("small-a", "gtm-pipeline-65f53e")).status_code == 405


# --- presentation helpers ------------------------------------------------------------


def test_clip_keeps_head_and_tail_and_counts_the_hidden_middle():
    text = "\n".join(str(n) for n in range(1000))
    clip = transcript.clip_text(text)
    assert clip.head.splitlines() == [str(n) for n in range(40)]
    assert clip.tail.splitlines() == [str(n) for n in range(980, 1000)]
    assert clip.hidden_lines == 940
    assert clip.head + text[len(clip.head) : -len(clip.tail)] + clip.tail == text
    assert not transcript.clip_text("short\n" * 30).clipped
    one_line = "x" * 1_000_000
    clip = transcript.clip_text(one_line)
    assert len(clip.head) == transcript.HEAD_CHARS and len(clip.tail) == transcript.TAIL_CHARS
    assert clip.hidden_chars == 1_000_000 - transcript.HEAD_CHARS - transcript.TAIL_CHARS


def test_exec_output_header_is_read_and_anything_else_is_left_as_text():
    parsed = transcript.parse_exec_output(
        "Chunk ID: ab12\nWall time: 0.5 seconds\nProcess exited with code 3\n"
        "Original token count: 9\nOutput:\nhello\n"
    )
    assert parsed is not None
    assert parsed.exit_code == 3 and parsed.output == "hello\n"
    assert ("Original token count", "9") in parsed.fields
    assert transcript.parse_exec_output("plain text\nOutput:\nx") is None


def test_outputs_pair_with_their_calls_by_call_id():
    data = json.dumps(
        segment(
            [call("a", "{}"), call("b", "{}"), output("b", "B"), output("a", "A"), output("z", "?")]
        )
    ).encode()
    plan = transcript.plan_entries(parse_rollout(data).segments[0])
    # positions: 0 user, 1 call a, 2 call b, 3 out b, 4 out a, 5 orphan
    assert plan == [[0], [1, 4], [2, 3], [5]]
