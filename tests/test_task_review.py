"""Reviewing at the SDK's own unit: in a MEMORY.md of task groups each task and each
block-level section is an entry with its own decision, a group's head (title, scope,
place) is one more; renumbering is no change; merges and splits that keep a title are
one change; the approved file is exactly the decided text."""

import re
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from generation import review
from memoryui import curation, skills
from memoryui.models import AuditEvent, MemoryVersion, Pin, Proposal, Role
from tests.review_world import proposal_over
from tests.test_curation import member, url
from tests.test_decisions import consolidate_with
from tests.test_review_cards import api_token_client

MD = MemoryVersion.Document.MEMORY_MD
HTMX = {"HX-Request": "true"}


# --- the SDK-written document, cut into its headed blocks (independently of review) ---


def blocks(text: str) -> list[str]:
    """The document cut before every `# ` and `## ` heading."""
    return re.split(r"(?m)^(?=#{1,2} )", text)[1:]


CITED = re.compile(r"rollout_summaries/[^ )\n]+\.md")
REFERENCE = re.compile(r"\[Task (\d+)\]")
PLACEHOLDER = re.compile(r"( ?)\[Task @([^\]]+)\]")


def by_group(parts: list[str]) -> list[list[str]]:
    """The blocks cut into task groups (a group's head first)."""
    groups: list[list[str]] = []
    for part in parts:
        if part.startswith("# Task Group:") or not groups:
            groups.append([])
        groups[-1].append(part)
    return groups


def tagged(parts: list[str]) -> list[str]:
    """The SDK's blocks with each ``[Task n]`` of a section written as the rollout the
    task cites first (``[Task @file]``), so that ``numbered`` can number it as its task
    is numbered wherever the task goes."""
    out = []
    for group in by_group(parts):
        first = {
            m.group(1): CITED.search(p).group(0)  # type: ignore[union-attr]
            for p in group
            if (m := re.match(r"## Task (\d+):", p))
        }
        for part in group:
            if not part.startswith("## Task "):
                part = REFERENCE.sub(lambda m, first=first: f"[Task @{first[m.group(1)]}]", part)
            out.append(part)
    return out


def untagged(part: str, cited: str) -> str:
    """A block without its references to the task citing ``cited`` first."""
    return part.replace(f" [Task @{cited}]", "")


def numbered(parts: list[str]) -> str:
    """The blocks joined, the tasks of each group numbered from 1 as the SDK does and
    each reference numbered as the task of the group citing its rollout is (one to a
    task no longer in the group taken out)."""
    out = []
    for group in by_group(parts):
        n, number = 0, {}
        tasks = []
        for part in group:
            if part.startswith("## Task "):
                n += 1
                part = re.sub(r"^## Task \d+:", f"## Task {n}:", part)
                for cited in CITED.findall(part):
                    number.setdefault(cited, n)
            tasks.append(part)
        for part in tasks:
            if not part.startswith("## Task "):
                part = PLACEHOLDER.sub(
                    lambda m, number=number: (
                        f"{m.group(1)}[Task {number[m.group(2)]}]" if m.group(2) in number else ""
                    ),
                    part,
                )
            out.append(part)
    return "".join(out)


def find(parts: list[str], group: str, n: int) -> int:
    """The index of ``## Task n`` of the task group ``group``."""
    start = parts.index(next(p for p in parts if p.startswith(f"# Task Group: {group}\n")))
    return next(i for i in range(start + 1, len(parts)) if parts[i].startswith(f"## Task {n}:"))


def cite_line(part: str) -> str:
    return next(line for line in part.splitlines(keepends=True) if "rollout_summaries/" in line)


def keywords(part: str) -> str:
    return part.rsplit("\n- ", 1)[1].rstrip("\n")


def with_extra_rollout(task: str, line: str, words: str) -> str:
    task = task.replace(cite_line(task), cite_line(task) + line, 1)
    return task.replace(keywords(task), keywords(task) + ", " + words, 1)


NEW_TASK = (
    "## Task 1: deploy-notes-canary, outcome success\n\n### rollout_summary_files\n\n"
    "- rollout_summaries/deploy-0999-abc123_deploy-notes-canary.md (rollout_id="
    "deploy-0999-abc123, updated_at=2026-08-01T00:00:00+00:00, terminal_state=completed)\n\n"
    "### keywords\n\n- deploy-notes-canary, canary, rollback\n\n"
)


class World:
    """The SDK's medium-300 MEMORY.md (8 task groups of 8 to 45 tasks, every block-level
    section) as the current text, and a proposal that makes each kind of change once.
    ``apply(accepted)`` is the text that accepting only those changes gives."""

    def __init__(self, fixtures_dir: Path) -> None:
        sdk = (fixtures_dir / "medium-300/workspace/memories/MEMORY.md").read_text()
        parts = tagged(blocks(sdk))
        # The tasks the proposal moves, merges or splits are not referred to: a model
        # would reword those references, which the review shows as changes of their own.
        touched = [
            cite_line(parts[find(parts, group, n)])
            for group, n in (
                ("operations incidents", 3),
                ("acme_metrics bug fixes", 5),
                ("acme_metrics bug fixes", 6),
                ("user working preferences", 1),
                ("user working preferences", 2),
            )
        ]
        for line in touched:
            cited = CITED.search(line).group(0)  # type: ignore[union-attr]
            parts = [untagged(p, cited) for p in parts]
        # One task that already cites two rollouts (an earlier consolidation merged
        # them), so the proposal can split it again.
        first, second = find(parts, "user working preferences", 1), 0
        second = find(parts, "user working preferences", 2)
        self.pair = (parts[first], parts[second])
        parts[first] = with_extra_rollout(
            parts[first], cite_line(parts[second]), keywords(parts[second])
        )
        del parts[second]
        self.base_parts = parts
        self.base = numbered(parts)

    def apply(self, accepted: set[str]) -> str:
        parts = list(self.base_parts)

        def reword(group: str) -> None:
            i = find(parts, group, 2)
            parts[i] = parts[i].replace(keywords(parts[i]), keywords(parts[i]) + ", retried")

        for group in ("jobkit bug fixes", "acme_metrics bug fixes", "paging bug fixes"):
            if f"reword {group}" in accepted:
                reword(group)
        if "merge" in accepted:
            keep, gone = (
                find(parts, "acme_metrics bug fixes", 5),
                find(parts, "acme_metrics bug fixes", 6),
            )
            parts[keep] = with_extra_rollout(
                parts[keep], cite_line(parts[gone]), keywords(parts[gone])
            )
            del parts[gone]
        if "split" in accepted:
            i = find(parts, "user working preferences", 1)
            parts[i : i + 1] = list(self.pair)
        if "duplicate" in accepted:  # a second copy of the first menus task, reworded
            copy = parts[find(parts, "menus bug fixes", 1)]
            copy = copy.replace(", outcome success", " again, outcome success", 1)
            parts.insert(find(parts, "menus bug fixes", 8) + 1, copy)
        if "move" in accepted:
            i = find(parts, "operations incidents", 3)
            task = parts.pop(i)
            last = find(parts, "menus bug fixes", 8)
            parts.insert(last + 1, task)
        if "insert" in accepted:
            parts.insert(find(parts, "deployment runbooks", 1), NEW_TASK)
        if "rename" in accepted:
            i = parts.index(
                "# Task Group: GTM pipeline analysis\n\nscope: gtm-segment-analysis\n\n"
            )
            parts[i] = parts[i].replace("GTM pipeline analysis", "GTM funnel analysis")
        return numbered(parts)


CHANGES = {
    "reword jobkit bug fixes",
    "reword acme_metrics bug fixes",
    "reword paging bug fixes",
    "insert",
    "move",
    "rename",
    "merge",
    "split",
}


@pytest.fixture
def world(fixtures_dir: Path) -> World:
    return World(fixtures_dir)


def test_the_fixture_is_the_sdk_shape_and_its_entries_are_tasks_and_sections(world):
    entries = review.entries(world.base)
    kinds = {e.kind for e in entries}

    assert "".join(e.text for e in entries) == world.base
    assert sum(e.kind == "task_group" for e in entries) == 8
    assert sum(e.kind == "task" for e in entries) == 173
    assert {"user_preferences", "reusable_knowledge", "failures"} <= kinds
    assert all(e.group for e in entries if e.kind != "task_group")


def test_the_review_shows_exactly_the_changes_made_each_decidable(world):
    proposed = world.apply(CHANGES)

    changes = [c for c in review.compare(world.base, proposed) if c.status != "unchanged"]

    seen = {(c.status, c.pairing, c.kind, review.task_title(c.title)) for c in changes}
    assert len(changes) == 8, seen
    by_pairing = {c.pairing: c for c in changes if c.pairing}
    assert set(by_pairing) == {"merged", "split", "renamed"}
    assert by_pairing["renamed"].kind == "task_group"
    assert by_pairing["renamed"].previous_titles == ["GTM pipeline analysis"]
    assert len(by_pairing["merged"].previous_titles) == 2
    assert len(by_pairing["split"].proposed_titles) == 2
    statuses = sorted(c.status for c in changes)
    assert statuses == [
        "added",
        "changed",
        "changed",
        "changed",
        "changed",
        "changed",
        "changed",
        "moved",
    ]
    # Renumbered tasks (45 in deployment runbooks, those after the merge and the move)
    # are not changes; nor are the sections of the renamed group.
    assert all(c.kind in ("task", "task_group") for c in changes)


def decide_all(client: Client, layout, proposal, decisions: dict[str, str]) -> None:
    for key, decision in decisions.items():
        response = client.post(
            url("proposal_decide", layout, proposal.pk),
            {"document": MD, "key": key, "decision": decision, "anchor": "x"},
            headers=HTMX,
        )
        assert response.status_code == 200, response.content


def label(change: review.Change, world: World) -> str:
    """Which of the world's changes a review change is."""
    if change.pairing in ("merged", "split"):
        return "merge" if change.pairing == "merged" else "split"
    if change.pairing == "renamed":
        return "rename"
    if change.status == "added":
        return "insert"
    if change.status == "moved":
        return "move"
    for group in ("jobkit bug fixes", "acme_metrics bug fixes", "paging bug fixes"):
        if change.group == f"task_group:{review.normalize(group)}":
            return f"reword {group}"
    raise AssertionError(change)


@pytest.mark.django_db
def test_accepting_some_changes_and_rejecting_others_approves_exactly_the_decided_text(
    layout, world
):
    reviewer = member(Role.REVIEWER, layout)
    proposal = proposal_over(layout, world.base, world.apply(CHANGES))
    changes = [c for c in review.compare(world.base, proposal.memory_md) if c.status != "unchanged"]
    accepted = {
        "reword jobkit bug fixes",
        "reword acme_metrics bug fixes",
        "insert",
        "rename",
        "merge",
    }
    decisions = {c.key: "accept" if label(c, world) in accepted else "reject" for c in changes}
    assert sorted(label(c, world) for c in changes) == sorted(CHANGES)
    client = Client()
    client.force_login(reviewer)

    decide_all(client, layout, proposal, decisions)
    page = client.get(url("proposal_review", layout, proposal.pk)).content.decode()
    approved = client.post(url("proposal_approve", layout, proposal.pk), {"undecided": "accept"})

    assert "8 of 8 decided" in page
    assert approved.status_code == 302
    text = curation.text_of(curation.latest(layout, MD))
    assert text == world.apply(accepted)


@pytest.mark.django_db
def test_the_review_page_says_merged_with_and_split_into_on_the_one_change(layout, world):
    proposal = proposal_over(layout, world.base, world.apply(CHANGES))
    client = Client()
    client.force_login(member(Role.REVIEWER, layout))

    page = client.get(url("proposal_review", layout, proposal.pk)).content.decode()

    assert page.count('<article class="entry review-entry') == 8
    assert re.search(r'data-pairing="merged">.*?merged with', page, re.S)
    assert re.search(r'data-pairing="split">.*?split into', page, re.S)
    assert "renamed" in page and "<q>GTM pipeline analysis</q>" in page
    assert "moved" in page


@pytest.mark.django_db
def test_rejecting_a_move_between_groups_puts_the_task_back_where_it_was(layout, world):
    proposal = proposal_over(layout, world.base, world.apply({"move"}))
    [move] = [c for c in review.compare(world.base, proposal.memory_md) if c.status != "unchanged"]
    curation.decide(proposal, MD, move.key, "reject", user=member(Role.REVIEWER, layout))

    curation.approve(proposal, user=None)

    assert curation.text_of(curation.latest(layout, MD)) == world.base


@pytest.mark.django_db
def test_a_pin_on_one_task_survives_a_consolidation_that_rewrites_its_group(model, layout):
    editor = member(Role.EDITOR, layout)
    current = curation.text_of(curation.latest(layout, MD))
    task = next(e for e in review.entries(current) if e.kind == "task")
    curation.set_pin(layout, MD, task.key, True, user=editor)
    group = next(e for e in review.entries(current) if e.key == task.group)
    # The model renames the group, puts a task above the pinned one and rewords it.
    rewritten = (
        group.text.replace("# Task Group: ", "# Task Group: renamed ")
        + NEW_TASK
        + task.text.replace("## Task 1:", "## Task 2:").replace("### keywords", "### words")
    )

    proposal = consolidate_with(model, layout, rewritten)

    kept = task.text.replace("## Task 1:", "## Task 2:")
    assert kept.rstrip() in proposal.memory_md  # verbatim, with the number it has now
    assert proposal.restored_pins
    changes = review.compare(curation.text_of(proposal.base_memory_md), proposal.memory_md)
    pinned = next(c for c in changes if c.key == task.key)
    assert pinned.status == "unchanged"
    assert Pin.objects.get().key == task.key


# --- before approval: duplicates, skill files ----------------------------------------


@pytest.mark.django_db
def test_likely_duplicates_are_listed_with_links_and_approving_them_is_a_choice(layout, world):

    reviewer = member(Role.REVIEWER, layout)
    proposal = proposal_over(layout, world.base, world.apply({"duplicate"}))
    client = Client()
    client.force_login(reviewer)
    approve = url("proposal_approve", layout, proposal.pk)

    dialog = client.get(approve, headers=HTMX).content.decode()
    refused = client.post(approve, {"undecided": "accept"}, headers=HTMX)
    api, secret = api_token_client(reviewer, layout)
    api_refused = api.post(
        f"/api/workspaces/a/layouts/{layout.pk}/proposals/{proposal.pk}/approve", **secret
    )
    approved = client.post(approve, {"undecided": "accept", "duplicates_ok": "1"}, headers=HTMX)

    assert "1 likely duplicate in what approving makes" in dialog
    links = re.findall(
        r'<li>MEMORY.md: <a href="([^"]+)">([^<]+)</a> and <a href="([^"]+)">', dialog
    )
    [(first_url, first_title, second_url)] = links
    assert "show=all" in first_url and "#entry-memory_md-" in first_url
    assert first_url != second_url and "Task 1:" in first_title
    assert refused.status_code == 200 and "Not approved" in refused.content.decode()
    assert api_refused.status_code == 409 and "likely duplicates" in api_refused.json()["detail"]
    assert approved.status_code == 204
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.APPROVED
    event = AuditEvent.objects.get(action="proposal.approve")
    assert len(event.detail["duplicates_approved"]) == 1


@pytest.mark.django_db
def test_the_submit_dialog_says_what_happens_to_each_skill_file(layout, world):

    reviewer = member(Role.REVIEWER, layout)
    proposal = proposal_over(layout, world.base, world.apply({"insert"}))
    proposal.skill_changes = {
        "skills/deploy/SKILL.md": {"old": None, "new": "# Deploy\n\nsteps\n"},
        "skills/deploy/notes.md": {"old": None, "new": "notes\n"},
    }
    proposal.skill_decisions = {"skills/deploy/notes.md": "reject"}
    proposal.save(update_fields=["skill_changes", "skill_decisions"])
    client = Client()
    client.force_login(reviewer)
    approve = url("proposal_approve", layout, proposal.pk)

    dialog = client.get(approve, headers=HTMX).content.decode()
    client.post(approve, {"undecided": "reject"}, headers=HTMX)

    assert "<code>skills/deploy/SKILL.md</code> (added): undecided: as proposed when" in dialog
    assert "<code>skills/deploy/notes.md</code> (added): rejected, stays as it is" in dialog
    # Keeping the current text for undecided entries keeps the skill files too.
    assert skills.latest(layout, "skills/deploy/SKILL.md") is None
    assert curation.text_of(curation.latest(layout, MD)) == world.base


def tasks_document(n: int, word: str) -> str:
    """Four task groups holding ``n`` tasks between them, each citing its rollout."""
    out = []
    for g in range(4):
        out.append(f"# Task Group: group {g}\n\nscope: s{g}\n\n")
        for t in range(n // 4):
            out.append(
                f"## Task {t + 1}: task {g}-{t}, outcome success\n\n### rollout_summary_files\n\n"
                f"- rollout_summaries/r{g}-{t}_x.md (rollout_id=r{g}-{t})\n\n"
                f"### keywords\n\n- {word} {g} {t}\n\n"
            )
    return "".join(out)


def round_trip_queries(layout, reviewer, n: int) -> tuple[int, int]:

    proposal = proposal_over(layout, tasks_document(n, "old"), tasks_document(n, "new"))
    key = next(c.key for c in review.compare(proposal.memory_md, proposal.memory_md)[5:])
    client = Client()
    client.force_login(reviewer)
    with CaptureQueriesContext(connection) as decide:
        response = client.post(
            url("proposal_decide", layout, proposal.pk),
            {"document": MD, "key": key, "decision": "accept", "anchor": "x"},
            headers=HTMX,
        )
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as page:
        response = client.get(url("proposal_review", layout, proposal.pk) + "?page_memory_md=2")
        assert response.status_code == 200 and "1 of " in response.content.decode()
    return len(decide), len(page)


@pytest.mark.django_db
def test_query_counts_do_not_grow_with_the_number_of_tasks(layout):
    reviewer = member(Role.REVIEWER, layout)

    small = round_trip_queries(layout, reviewer, 40)
    large = round_trip_queries(layout, reviewer, 400)

    assert small == large


def test_people_and_the_model_changing_different_tasks_of_a_group_merge_without_conflict(world):
    human = world.apply({"insert", "reword jobkit bug fixes"})  # edited while the run ran
    model = world.apply({"reword acme_metrics bug fixes", "reword jobkit bug fixes", "merge"})

    merged = review.merge(world.base, human, model)

    assert merged.conflicts == []
    assert merged.text == world.apply(
        {"insert", "reword jobkit bug fixes", "reword acme_metrics bug fixes", "merge"}
    )


@pytest.mark.django_db
def test_a_duplicate_is_badged_on_both_cards_and_acknowledged_pair_by_pair(layout, world):
    reviewer = member(Role.REVIEWER, layout)
    proposal = proposal_over(layout, world.base, world.apply({"duplicate", "insert"}))
    client = Client()
    client.force_login(reviewer)
    [copy] = [
        c
        for c in review.compare(world.base, proposal.memory_md)
        if c.status == "added" and " again," in c.title
    ]
    [(first, second)] = review.duplicates(proposal.memory_md)
    approve = url("proposal_approve", layout, proposal.pk)

    page = client.get(url("proposal_review", layout, proposal.pk)).content.decode()
    refused = client.post(approve, {"undecided": "accept"}, headers=HTMX)
    other = Client()  # another reviewer with the page open
    other.force_login(member(Role.REVIEWER, layout, "bob"))
    live = url("proposal_live", layout, proposal.pk)
    seen = other.get(live, {"drawn": 0, "at": ""}).json()["cursor"]
    card = client.post(
        url("proposal_duplicate", layout, proposal.pk),
        {
            "document": MD,
            "key": copy.key,
            "first": first.key,
            "second": second.key,
            "ack": "different",
            "anchor": "x",
        },
        headers=HTMX,
    ).content.decode()
    # Bob's page learns the pair's cards changed, and fetches them again.
    changed = other.get(live, {"since": seen, "at": ""}).json()["changes"]
    approved = client.post(approve, {"undecided": "accept"}, headers=HTMX)

    # The copy's card carries the badge, linking to the other entry's card (unchanged,
    # so on the page of all entries).
    assert page.count('class="duplicate-of"') == 1
    assert re.search(r'duplicate</span> of <a href="[^"]*show=all[^"]*#entry-memory_md-', page)
    assert "Keep both</button>" in page and "Not a duplicate</button>" in page
    assert "Not approved" in refused.content.decode()
    assert card.count("<article") == 1 and "not a duplicate, " in card
    assert sorted(c["key"] for c in changed) == sorted([first.key, second.key])
    assert approved.status_code == 204  # no blanket tick: the pair's own answer
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.APPROVED
    ack = AuditEvent.objects.get(action="proposal.duplicate")
    assert ack.detail["ack"] == "different" and sorted(ack.detail["keys"]) == sorted(
        [first.key, second.key]
    )


@pytest.mark.django_db
def test_a_rejected_copy_is_no_duplicate_and_accepting_it_again_badges_it(layout, world):
    reviewer = member(Role.REVIEWER, layout)
    proposal = proposal_over(layout, world.base, world.apply({"duplicate"}))
    client = Client()
    client.force_login(reviewer)
    [copy] = [c for c in review.compare(world.base, proposal.memory_md) if c.status == "added"]

    def decide(decision: str) -> str:
        return client.post(
            url("proposal_decide", layout, proposal.pk),
            {"document": MD, "key": copy.key, "decision": decision, "anchor": "x"},
            headers=HTMX,
        ).content.decode()

    rejected, accepted = decide("reject"), decide("accept")

    assert 'class="duplicate-of"' not in rejected
    assert 'class="duplicate-of"' in accepted and "Not a duplicate</button>" in accepted


@pytest.mark.django_db
def test_the_duplicates_are_found_once_per_decision_state_and_follow_every_decision(
    layout, world, monkeypatch
):
    # Found once per state of the decisions and kept: a page read again, or after a
    # decision is taken back to a state seen before, does not look again; a decision or
    # an edit that makes (or unmakes) a duplicate shows on the next page.
    cache.clear()
    looked: list[int] = []
    real, real_scoped = review.duplicates, review.scoped_duplicates

    def scoped(*args):  # a look at the groups it needs (None: it looks at the whole)
        found = real_scoped(*args)
        looked.extend([1] if found is not None else [])
        return found

    monkeypatch.setattr(review, "duplicates", lambda text: looked.append(1) or real(text))
    monkeypatch.setattr(review, "scoped_duplicates", scoped)
    reviewer = member(Role.REVIEWER, layout)
    proposal = proposal_over(layout, world.base, world.apply({"duplicate"}))
    client = Client()
    client.force_login(reviewer)
    [copy] = [c for c in review.compare(world.base, proposal.memory_md) if c.status == "added"]
    page_url = url("proposal_review", layout, proposal.pk)

    def badges() -> int:
        return client.get(page_url).content.decode().count('class="duplicate-of"')

    def decide(decision: str, edited_text: str = "") -> None:
        client.post(
            url("proposal_decide", layout, proposal.pk),
            {"document": MD, "key": copy.key, "decision": decision, "edited_text": edited_text},
            headers=HTMX,
        )

    undecided = [badges(), badges()]
    after_one_look = len(looked)
    decide("reject")
    rejected = badges()
    decide("accept")
    accepted = badges()
    looks = len(looked)
    decide("reject")
    rejected_again = badges()
    decide("accept", edited_text=copy.proposed.split("\n", 1)[0] + "\n\n- unrelated words\n")
    edited = badges()

    assert undecided == [1, 1] and after_one_look == 2  # MEMORY.md and the summary
    assert rejected == 0 and accepted == 1
    assert rejected_again == 0 and len(looked) == looks + 1  # the edit, in MEMORY.md only
    assert edited == 0
