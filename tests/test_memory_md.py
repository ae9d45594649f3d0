"""MEMORY.md / memory_summary.md as entries: byte-exact round trips on every fixture and
on awkward markdown, and the entry tree the SDK's shape should produce. No database.

hypothesis is not installed in this project, so the property test below draws random
documents from a fixed vocabulary with a fixed seed instead."""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from generation import memory_md
from generation.memory_md import Block, entries, parse, task_groups

FIXTURE_NAMES = ["small-a", "small-b", "medium-300"]
ENGINEERING = "memories/engineering"


# --- helpers ---------------------------------------------------------------------------


@cache
def _manifest(path: Path) -> dict:
    return json.loads(path.read_text())


def manifest(fixtures_dir: Path, name: str) -> dict:
    return _manifest(fixtures_dir / name / "manifest.json")


def fixture_text(fixtures_dir: Path, name: str, workspace_path: str) -> str:
    # bytes.decode keeps "\r\n" and any other line ending exactly as written
    return (fixtures_dir / name / "workspace" / workspace_path).read_bytes().decode("utf-8")


def fixture_documents(fixtures_dir: Path, name: str, kinds: tuple[str, ...]) -> list[str]:
    return [
        f["workspace_path"] for f in manifest(fixtures_dir, name)["files"] if f["kind"] in kinds
    ]


def keys(root: Block) -> list[str]:
    return [b.key for b in root.walk() if b is not root]


def outline(root: Block) -> list[tuple[int, str, str]]:
    return [(b.level, b.kind, b.title) for b in entries(root)]


def rendered_headings(text: str) -> list[str]:
    """The headings a CommonMark renderer sees, for comparison with our entries."""
    tokens = MarkdownIt("commonmark").parse(text)
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


def assert_round_trip(text: str) -> Block:
    root = parse(text)
    assert root.dump() == text
    all_keys = keys(root)
    assert len(all_keys) == len(set(all_keys)), "keys must be unique"
    for block in root.walk():
        if block is not root:
            assert block.text, f"empty block {block.kind} {block.key}"
        if block.level > 0:
            assert block.text.startswith("#"), block.text
    return root


# --- round trips on the fixtures -------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_markdown_file_round_trips_byte_for_byte(fixtures_dir, name):
    paths = [
        f["workspace_path"]
        for f in manifest(fixtures_dir, name)["files"]
        if f["workspace_path"].endswith(".md")
    ]
    kinds = {
        f["kind"] for f in manifest(fixtures_dir, name)["files"] if f["workspace_path"] in paths
    }
    assert {"memory_index", "memory_summary", "raw_memory", "rollout_summary"} <= kinds

    for path in paths:
        text = fixture_text(fixtures_dir, name, path)
        assert parse(text).dump() == text, path


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_markdown_file_parses_to_unique_non_empty_blocks(fixtures_dir, name):
    for path in fixture_documents(
        fixtures_dir,
        name,
        (
            "memory_index",
            "memory_summary",
            "raw_memory",
            "rollout_summary",
            "skill",
            "raw_memories_merged",
        ),
    ):
        assert_round_trip(fixture_text(fixtures_dir, name, path))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_memory_entries_are_the_headings_a_markdown_renderer_sees(fixtures_dir, name):
    for path in fixture_documents(fixtures_dir, name, ("memory_index", "memory_summary")):
        text = fixture_text(fixtures_dir, name, path)

        titles = [b.text.splitlines()[0].lstrip("#").strip() for b in entries(parse(text))]

        assert titles == rendered_headings(text), path


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_memory_index_is_made_of_task_groups(fixtures_dir, name):
    for path in fixture_documents(fixtures_dir, name, ("memory_index",)):
        text = fixture_text(fixtures_dir, name, path)
        if not text.strip():
            continue

        root = parse(text)

        assert task_groups(root), path
        assert all(b.kind == "task_group" for b in root.children), path
        for group in task_groups(root):
            assert group.scope, (path, group.title)
            tasks = [b for b in group.children if b.kind == "task"]
            assert tasks, (path, group.title)
            for task in tasks:
                assert task.citations, (path, task.key)
                assert task.keywords, (path, task.key)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_keys_are_unique_and_stable_across_two_parses(fixtures_dir, name):
    for path in fixture_documents(fixtures_dir, name, ("memory_index", "memory_summary")):
        text = fixture_text(fixtures_dir, name, path)

        first, second = keys(parse(text)), keys(parse(text))

        assert first == second, path
        assert len(first) == len(set(first)), path
        assert all(first), path


# --- round trips on awkward synthetic inputs -------------------------------------------

TRICKY = {
    "empty": "",
    "only-newline": "\n",
    "only-blank-lines": "\n\n   \n\t\n",
    "no-trailing-newline": "# Task Group: a\n\nscope: x\n\n- last bullet",
    "heading-without-newline": "## User preferences",
    "crlf": (
        "# Task Group: a\r\n\r\nscope: x\r\n\r\n"
        "## Task 1: t\r\n\r\n### keywords\r\n\r\n- k1, k2\r\n"
    ),
    "mixed-line-endings": "# A\r\n- one\n- two\r\rtext\r\n",
    "fenced-heading": "# Task Group: a\n\n```bash\n# not a heading\n## nor this\n```\n\nafter\n",
    "tilde-fence": "## S\n~~~\n# inside\n```\n# still inside\n~~~\n# Real\n",
    "unclosed-fence": "# A\n```\n# swallowed\n- not a bullet\n",
    "hashtags": "#hashtag\n##also-not\n#1 priority\n# Real heading\n#tag at start\n",
    "empty-heading": "#\n##\n# \n",
    "closing-hashes": "## Title ##\n### Other ###   \n",
    "preamble": "Some intro text.\nSecond line.\n\n- an intro bullet\n\n# Task Group: a\n",
    "bullet-continuations": (
        "## S\n- first\n  continues here\n\tand here\n\n  after a blank\n- second\n"
    ),
    "text-after-list": (
        "## S\n- a\n- b\n\nA paragraph after the list.\nStill the paragraph.\n\nAnother.\n"
    ),
    "numbered-bullets": "## S\n1. one\n2) two\n10. ten\n",
    "unicode": (
        "# Task Group: café ünïcode 日本語 🚀\n\nscope: naïve\n\n- ½ ≠ ¼ — “quotes” [Task 1]\n"
    ),
    "curly-apostrophe": "## What’s in Memory\n\n- x\n",
    "form-feed-and-separators": "# A\x0c\ntext\u2028more\x1c\n\u0085- b\n",
    "front-matter": "---\ndescription: x\n---\n\n### Task 1: y\n\ntask: z\n",
    "deep-headings": "###### six\n####### seven\n# one\n###### six again\n",
    "duplicate-titles": (
        "# Task Group: a\n## Task 1: x\n# Task Group: a\n## Task 1: x\n## Task 1: y\n"
    ),
}


@pytest.mark.parametrize("text", TRICKY.values(), ids=TRICKY.keys())
def test_tricky_markdown_round_trips_byte_for_byte(text):
    assert_round_trip(text)


def test_empty_text_has_no_entries():
    root = parse("")

    assert root.children == [] and entries(root) == []
    assert root.dump() == ""


@pytest.mark.parametrize("fence", ["```", "~~~", "```bash", "  ```"])
def test_headings_inside_fenced_code_blocks_are_not_entries(fence):
    closing = fence.split("bash")[0]
    text = (
        f"# Task Group: a\n\n{fence}\n# a shell comment\n## Task 9: fake\n{closing}\n\n"
        "## Task 1: real\n"
    )

    root = parse(text)

    assert outline(root) == [(1, "task_group", "a"), (2, "task", "Task 1: real")]
    assert "# a shell comment" in task_groups(root)[0].text


def test_a_shorter_fence_inside_a_longer_one_does_not_close_it():
    # CommonMark: a closing fence must be at least as long as the opening one. A skill or
    # memory that shows a fenced example inside a fence is ordinary model output.
    text = (
        "# Task Group: docs\n\n"
        "````markdown\n"
        "```python\n"
        "# a python comment\n"
        "```\n"
        "# Not a heading either\n"
        "````\n\n"
        "## Task 1: real\n"
    )

    root = parse(text)

    assert outline(root) == [(1, "task_group", "docs"), (2, "task", "Task 1: real")]
    heading_lines = [b.text.splitlines()[0].lstrip("#").strip() for b in entries(root)]
    assert heading_lines == rendered_headings(text)


def test_hashtag_lines_are_not_headings():
    root = parse("#hashtag\n##also-not\n#1 priority\n# Real heading\n")

    assert outline(root) == [(1, "section", "Real heading")]
    assert root.children[0].kind == "preamble"
    assert root.children[0].text == "#hashtag\n##also-not\n#1 priority\n"


def test_a_preamble_before_the_first_heading_is_kept_as_its_own_block():
    root = parse("Intro line.\n\n# Task Group: a\n\nscope: s\n")

    assert [b.kind for b in root.children] == ["preamble", "task_group"]
    assert root.children[0].text == "Intro line.\n\n"
    assert root.children[1].scope == "s"


def test_bullet_continuation_lines_stay_with_their_bullet():
    root = parse("## Reusable knowledge\n- first\n  continued\n\n  still first\n- second\n")

    section = root.children[0]
    assert section.kind == "reusable_knowledge"
    assert [b.text for b in section.children] == [
        "- first\n  continued\n\n  still first\n",
        "- second\n",
    ]


def test_text_after_a_bullet_list_is_not_swallowed_by_the_last_bullet():
    root = parse("## General Tips\n- a\n- b\n\nA closing paragraph.\nSame paragraph.\n")

    section = root.children[0]
    assert [b.kind for b in section.children] == ["bullet", "bullet", "text"]
    assert section.children[1].text == "- b\n\n"
    assert section.children[2].text == "A closing paragraph.\nSame paragraph.\n"


def test_crlf_headings_get_clean_titles_and_kinds():
    text = TRICKY["crlf"]

    root = parse(text)

    assert outline(root) == [
        (1, "task_group", "a"),
        (2, "task", "Task 1: t"),
        (3, "keywords", "keywords"),
    ]
    assert task_groups(root)[0].scope == "x"
    assert task_groups(root)[0].keywords == ["k1", "k2"]


def test_a_curly_apostrophe_still_names_the_whats_in_memory_section():
    assert parse("## What’s in Memory\n").children[0].kind == "whats_in_memory"


def test_duplicate_headings_get_distinct_keys():
    root = parse(TRICKY["duplicate-titles"])

    group_keys = [g.key for g in task_groups(root)]
    task_keys = [b.key for b in entries(root) if b.kind == "task"]
    assert len(set(group_keys)) == 2
    assert len(set(task_keys)) == 3


VOCABULARY = [
    "# Task Group: alpha",
    "# Task Group: alpha",
    "## Task 1: fix it, outcome success",
    "## Task 2: other, outcome fail",
    "### rollout_summary_files",
    "### keywords",
    "## User preferences",
    "## Reusable knowledge",
    "## Failures and how to do differently",
    "## User Profile",
    "## General Tips",
    "## What's in Memory",
    "#### 2026-11-29",
    "# Plain title #",
    "#",
    "#hashtag",
    "####### seven",
    "scope: alpha",
    "- rollout_summaries/r-1_fix_it.md (rollout_id=r-1, terminal_state=completed)",
    "- k1, k2, k 3",
    "- a bullet [Task 1]",
    "* star bullet",
    "+ plus bullet",
    "1. numbered",
    "2) numbered",
    "-not a bullet",
    "  indented continuation",
    "\tTab continuation",
    "    indented code",
    "",
    "",
    "   ",
    "```",
    "```python",
    "````",
    "~~~",
    "  ```",
    "plain text line",
    "café ünïcode 日本語 🚀 — “quoted”",
    "> a quote",
    "---",
    "***",
    "<div>raw html</div>",
    "| a | b |",
    "text\x0cwith form feed",
    "text\u2028with line separator",
    "\ufeffBOM at start",
]
LINE_ENDINGS = ["\n"] * 8 + ["\r\n"] * 3 + ["\r", ""]


def random_document(rng: random.Random) -> str:
    lines = rng.choices(VOCABULARY, k=rng.randint(0, 40))
    text = "".join(line + rng.choice(LINE_ENDINGS) for line in lines)
    if rng.random() < 0.3:
        text = text.rstrip("\r\n")
    return text


def test_randomized_documents_round_trip_byte_for_byte():
    rng = random.Random(20261129)
    for _ in range(2000):
        text = random_document(rng)
        try:
            assert_round_trip(text)
        except AssertionError as exc:
            raise AssertionError(f"round trip failed for {text!r}: {exc}") from exc


def test_randomized_documents_keep_every_key_when_a_task_group_is_appended():
    """Keys name entries for pins, decisions and reviews: a document that grows at its
    end (a new task group, whatever it holds) renames none of the entries before."""
    rng = random.Random(7)
    for _ in range(300):
        text = random_document(rng)
        before = keys(parse(text))
        ended = text if not text or text.endswith(("\n", "\r")) else text + "\n"
        grown = keys(parse(ended + "\n# Task Group: appended\n\n" + random_document(rng)))
        assert grown[: len(before)] == before, repr(text)  # (an open fence may swallow it)


# --- entry semantics on the SDK-shaped fixture -----------------------------------------


@pytest.fixture
def engineering_memory(fixtures_dir) -> Block:
    return parse(fixture_text(fixtures_dir, "small-a", f"{ENGINEERING}/MEMORY.md"))


@pytest.fixture
def engineering_summary(fixtures_dir) -> Block:
    return parse(fixture_text(fixtures_dir, "small-a", f"{ENGINEERING}/memory_summary.md"))


def test_engineering_memory_has_three_named_task_groups_in_order(engineering_memory):
    groups = task_groups(engineering_memory)

    assert [g.title for g in groups] == [
        "deployment runbooks",
        "menus bug fixes",
        "operations incidents",
    ]
    assert [g.scope for g in groups] == [
        "deploy-notes-auth-proxy",
        "fix-slugify-unicode",
        "poll-health-billing-api",
    ]
    assert [g.level for g in groups] == [1, 1, 1]


def test_engineering_memory_tasks_cite_their_rollout_summaries_and_keywords(engineering_memory):
    tasks = {
        g.title: [b for b in g.children if b.kind == "task"]
        for g in task_groups(engineering_memory)
    }

    assert {name: [t.title for t in ts] for name, ts in tasks.items()} == {
        "deployment runbooks": ["Task 1: deploy-notes-auth-proxy, outcome success"],
        "menus bug fixes": ["Task 1: fix-slugify-unicode, outcome success"],
        "operations incidents": ["Task 1: poll-health-billing-api, outcome fail"],
    }
    (deploy,), (menus,), (incidents,) = tasks.values()
    assert deploy.citations == [
        "rollout_summaries/deploy-auth-proxy-dc4ee6_auth-proxy-deploy-notes-sa-east-1.md"
    ]
    assert menus.citations == [
        "rollout_summaries/eng-slugify-unicode-65aef7_fix-slugify-unicode-slugs.md"
    ]
    assert incidents.citations == [
        "rollout_summaries/poll-billing-api-6d30c0_poll-billing-api-max-turns.md"
    ]
    assert deploy.keywords == [
        "auth-proxy",
        "sa-east-1",
        "deployctl promote --wait",
        "deployctl rollback",
        "docs/deploy-notes-auth-proxy.md",
        "canary",
    ]
    assert menus.keywords == [
        "slugify",
        "src/menus/slugs.py",
        "tests/test_slugs.py",
        "PYTHONPATH=src",
        "apply_patch",
        "AssertionError",
    ]
    assert incidents.keywords == [
        "billing-api",
        "health.txt",
        "status=degraded",
        "MaxTurnsExceeded",
    ]
    for task in (deploy, menus, incidents):
        assert [b.kind for b in task.children] == ["rollout_summary_files", "keywords"]


def test_engineering_memory_sections_are_typed_by_kind(engineering_memory):
    sections = {
        g.title: [b.kind for b in g.children if b.kind != "task"]
        for g in task_groups(engineering_memory)
    }

    assert sections == {
        "deployment runbooks": ["user_preferences", "reusable_knowledge"],
        "menus bug fixes": ["user_preferences", "reusable_knowledge", "failures"],
        "operations incidents": ["reusable_knowledge", "failures"],
    }


def test_engineering_memory_bullets_carry_their_task_references(engineering_memory):
    knowledge = next(
        b for b in task_groups(engineering_memory)[0].children if b.kind == "reusable_knowledge"
    )

    assert [b.kind for b in knowledge.children] == ["bullet", "bullet"]
    assert [b.task_refs for b in knowledge.children] == [[1], [1]]
    assert [b.label for b in (knowledge, knowledge.children[0])] == [
        "Reusable knowledge",
        "Bullet",
    ]


def test_engineering_memory_summary_has_its_four_sections(engineering_summary):
    assert [(b.level, b.kind) for b in engineering_summary.children] == [
        (2, "user_profile"),
        (2, "user_preferences"),
        (2, "general_tips"),
        (2, "whats_in_memory"),
    ]
    index = engineering_summary.children[3]
    assert [b.title for b in entries(index)][1:] == [ENGINEERING, "2026-11-29"]
    assert len(index.citations) == 3


def test_engineering_memory_keys_are_unique_and_stable(engineering_memory, fixtures_dir):
    again = parse(fixture_text(fixtures_dir, "small-a", f"{ENGINEERING}/MEMORY.md"))

    assert keys(engineering_memory) == keys(again)
    assert len(set(keys(engineering_memory))) == len(keys(engineering_memory))
    assert len({g.key for g in task_groups(engineering_memory)}) == 3


def test_keys_of_headed_entries_survive_an_edit_to_a_bullet(fixtures_dir):
    text = fixture_text(fixtures_dir, "small-a", f"{ENGINEERING}/MEMORY.md")
    edited = text.replace("promotion and rollback go through", "promotion and rollback both use")
    assert edited != text

    before = [(b.key, b.title) for b in entries(parse(text))]
    after = [(b.key, b.title) for b in entries(parse(edited))]

    assert before == after


def test_kind_labels_cover_every_kind_the_parser_produces(fixtures_dir):
    produced = set()
    for name in FIXTURE_NAMES:
        for path in fixture_documents(fixtures_dir, name, ("memory_index", "memory_summary")):
            produced |= {b.kind for b in parse(fixture_text(fixtures_dir, name, path)).walk()}

    assert produced <= set(memory_md.KIND_LABELS)


def test_lines_numbered_with_the_digits_of_any_script_are_bullets():
    """The bullet pattern's ``\\d`` takes any decimal digit: keys stay what they were."""
    text = "# Notes\n\n٣. first\n12. second\n０) third\nplain\n"
    root = memory_md.parse(text)
    [notes] = root.children
    assert [(b.kind, b.text) for b in notes.children] == [
        ("bullet", "٣. first\n"),
        ("bullet", "12. second\n"),
        ("bullet", "０) third\n"),
        ("text", "plain\n"),
    ]
    assert root.dump() == text
