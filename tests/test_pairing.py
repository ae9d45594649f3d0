"""Pairing of removed and added entries: a renamed, moved and edited, merged or split
task group is one change, and accepting or rejecting it does exactly that."""

import difflib
import random
import re

import pytest
from django.test import Client

from generation import review
from generation.review import pairing
from memoryui import curation
from memoryui.models import (
    ApprovedEntry,
    EntryDecision,
    GenerationRun,
    Membership,
    MemoryVersion,
    PhaseOneJob,
    PhaseOneResult,
    Pin,
    Proposal,
    RejectedEntry,
    Role,
    Rollout,
)
from tests.factories import make_user
from tests.test_api import api, bearer, token_for

MD = MemoryVersion.Document.MEMORY_MD


def group(title: str, body: str, *cites: str) -> str:
    lines = "".join(f"- [Task {n}] rollout_summaries/{c}.md\n" for n, c in enumerate(cites, 1))
    return f"# Task Group: {title}\n\n{body}\n\n{lines}\n"


DEPLOY = group(
    "Deploy the api service",
    "When deploying the api service always run the migrations first, then restart the "
    "gunicorn workers one at a time and watch the health endpoint until it answers.",
    "r1",
    "r2",
)
FLAKY = group(
    "Fix flaky payment tests",
    "The flaky tests in the payments module came from a shared redis database between "
    "xdist workers; give each worker its own database number in conftest.",
    "r3",
)
NOTES = group(
    "Write release notes",
    "Release notes are generated from the changelog fragments in changes/ with towncrier; "
    "never edit CHANGELOG.md by hand, and name each fragment after its issue number.",
    "r4",
)
LINT = group(
    "Configure the linter",
    "Ruff runs in pre-commit with a line length of one hundred; the format check also "
    "runs in CI and blocks a merge, so run ruff format before pushing a branch.",
    "r9",
)
BASE = review.join([DEPLOY, FLAKY, NOTES])


def body(text: str) -> str:
    return text.split("\n\n", 1)[1].rsplit("\n\n- [Task", 1)[0]


def changed(current: str, proposed: str) -> list[review.Change]:
    return [c for c in review.compare(current, proposed) if c.status != "unchanged"]


def same(a: str, b: str) -> bool:
    return [e.text.rstrip() for e in review.entries(a)] == [
        e.text.rstrip() for e in review.entries(b)
    ]


# --- pure pairing ---------------------------------------------------------------------


def test_a_renamed_entry_is_one_changed_entry_with_a_diff_not_removed_plus_added():
    renamed = DEPLOY.replace("Deploy the api service", "Deploying the API")
    proposed = review.join([renamed, FLAKY, NOTES])

    [change] = changed(BASE, proposed)

    assert (change.status, change.pairing) == ("changed", "renamed")
    assert change.key == "task_group:deploying the api"
    assert change.previous == ("task_group:deploy the api service",)
    assert change.current == DEPLOY and change.proposed == renamed
    assert change.previous_titles == ["Deploy the api service"]
    # The key is the proposed entry's: the same on every page view.
    assert review.compare(BASE, proposed)[0].key == change.key
    unpaired = [c.status for c in review.compare(BASE, proposed, pairing=False)]
    assert unpaired == ["removed", "added", "unchanged", "unchanged"]


def test_a_moved_and_edited_entry_pairs_and_keeps_the_edit_in_its_diff():
    edited = DEPLOY.replace("Deploy the api service", "Rolling out the api").replace(
        "one at a time", "two at a time"
    )
    proposed = review.join([FLAKY, NOTES, edited])

    [change] = changed(BASE, proposed)

    assert (change.status, change.pairing) == ("changed", "renamed")
    assert "one at a time" in change.current and "two at a time" in change.proposed


def test_two_entries_merged_into_one_are_one_change_whose_current_side_is_both():
    merged = group("Deploying and testing", body(DEPLOY) + "\n" + body(FLAKY), "r1", "r2", "r3")
    proposed = review.join([merged, NOTES])

    [change] = changed(BASE, proposed)

    assert (change.status, change.pairing) == ("changed", "merged")
    assert change.previous == (
        "task_group:deploy the api service",
        "task_group:fix flaky payment tests",
    )
    assert change.current == review.join([DEPLOY, FLAKY]) and change.proposed == merged


def test_one_entry_split_in_two_is_one_change_whose_proposed_side_is_both():
    first = group(
        "Deploy: migrations",
        "When deploying the api service always run the migrations first, before anything.",
        "r1",
    )
    second = group(
        "Deploy: restarts",
        "Then restart the gunicorn workers one at a time and watch the health endpoint "
        "until it answers.",
        "r2",
    )
    proposed = review.join([first, FLAKY, NOTES, second])

    [change] = changed(BASE, proposed)

    assert (change.status, change.pairing) == ("changed", "split")
    assert change.key == "task_group:deploy: migrations"
    assert change.also == ("task_group:deploy: restarts",)
    assert change.previous == ("task_group:deploy the api service",)
    assert change.proposed_titles == ["Deploy: migrations", "Deploy: restarts"]


def test_unrelated_entries_are_not_paired():
    proposed = review.join([FLAKY, NOTES, LINT])

    result = {c.title: (c.status, c.pairing) for c in changed(BASE, proposed)}

    assert result == {
        "Deploy the api service": ("removed", ""),
        "Configure the linter": ("added", ""),
    }


def test_short_entries_alike_by_chance_are_not_paired():
    current = "# Task Group: delta\n\nscope: d\n"
    proposed = "# Task Group: epsilon\n\nscope: e\n"
    assert {c.status for c in review.compare(current, proposed)} == {"removed", "added"}


def test_a_reworded_entry_citing_the_same_rollouts_pairs_on_its_citations():
    reworded = group(
        "API deployments",
        "Migrations go first. Workers restart one by one; the health endpoint tells "
        "when each is back.",
        "r1",
        "r2",
    )
    proposed = review.join([reworded, FLAKY, NOTES])
    [change] = changed(BASE, proposed)
    assert change.previous == ("task_group:deploy the api service",)
    # Without the shared citations the same words are too far apart to pair.
    uncited = reworded.replace("rollout_summaries/r1.md", "x").replace(
        "rollout_summaries/r2.md", "y"
    )
    assert len(changed(BASE, review.join([uncited, FLAKY, NOTES]))) == 2


def big_document(n: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)]
    return review.join(
        group(f"group {i}", " ".join(rng.choice(words) for _ in range(120)), f"r{i}")
        for i in range(n)
    )


def big_edit(n: int = 2000, edited: int = 200) -> tuple[str, str, str]:
    """A document of ``n`` groups; the same with ``edited`` of them renamed and edited;
    the same with every group renamed. (``bench/bench_pairing.py`` times these.)"""
    current = big_document(n)
    parts = [e.text for e in review.entries(current)]
    rng = random.Random(1)
    for i in rng.sample(range(n), edited):  # renamed and edited
        parts[i] = parts[i].replace("# Task Group: group", "# Task Group: renamed", 1)
        parts[i] = parts[i].replace(" w", " x", 3)
    every = current.replace("# Task Group: group", "# Task Group: all renamed")
    return current, "".join(parts), every


def test_pairing_two_thousand_entries_pairs_each_renamed_one():
    current, some_edited, all_renamed = big_edit()

    some = review.compare(current, some_edited)
    every = review.compare(current, all_renamed)

    assert sum(c.paired for c in some) == 200
    assert sum(c.paired for c in every) == 2000 and len(every) == 2000


# --- assembling: accept and reject a pair ------------------------------------------------


def test_assemble_a_rename_accepted_moves_and_rejected_keeps_the_old_in_place():
    renamed = DEPLOY.replace("Deploy the api service", "Deploying the API")
    proposed = review.join([FLAKY, NOTES, renamed])
    changes = review.compare(BASE, proposed)
    key = "task_group:deploying the api"

    assert same(review.assemble(changes, {key: "accept"}, {}), proposed)
    assert same(review.assemble(changes, {}, {}), proposed)
    assert same(review.assemble(changes, {key: "reject"}, {}), BASE)
    edited = review.assemble(changes, {key: "accept"}, {key: "# Task Group: mine\n\nok\n"})
    assert [e.title for e in review.entries(edited)] == [
        "Fix flaky payment tests",
        "Write release notes",
        "mine",
    ]


def test_assemble_a_merge_and_a_split_rejected_gives_back_the_old_entries_in_their_places():
    merged = group("Deploying and testing", body(DEPLOY) + "\n" + body(FLAKY), "r1", "r3")
    proposed = review.join([NOTES, merged, LINT])
    changes = review.compare(BASE, proposed)
    key = "task_group:deploying and testing"
    result = review.assemble(changes, {key: "reject"}, {})
    assert [e.title for e in review.entries(result)] == [
        "Deploy the api service",
        "Fix flaky payment tests",
        "Write release notes",
        "Configure the linter",
    ]
    assert same(review.assemble(changes, {key: "accept"}, {}), proposed)


# --- approving a proposal with pairs --------------------------------------------------------


def proposal_with(layout, memory_md: str) -> Proposal:
    base = curation.save_document(
        layout, MD, BASE, user=None, reason="base", based_on=curation.latest(layout, MD).number
    )
    run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.DONE)
    # The summaries the entries cite, written by the run's phase one (as a real run's are),
    # so that no entry is held back for citing a summary nobody wrote.
    rollout = Rollout.objects.filter(layout=layout).first()
    for cited in sorted(set(re.findall(r"rollout_summaries/[\w.-]+\.md", memory_md))):
        result, _ = PhaseOneResult.objects.get_or_create(
            layout=layout,
            cache_key=cited,
            defaults={
                "rollout_id": rollout.rollout_id,
                "outcome": PhaseOneResult.Outcome.MEMORY,
                "files": {cited: "What the run did.\n"},
            },
        )
        PhaseOneJob.objects.create(
            run=run, rollout=rollout, status=PhaseOneJob.Status.DONE, result=result
        )
    return Proposal.objects.create(
        layout=layout,
        run=run,
        base_memory_md=base,
        base_memory_summary=curation.latest(layout, MemoryVersion.Document.MEMORY_SUMMARY),
        memory_md=memory_md,
        memory_summary=curation.text_of(
            curation.latest(layout, MemoryVersion.Document.MEMORY_SUMMARY)
        ),
        raw_memories_md="",
    )


@pytest.mark.django_db
def test_approving_an_accepted_rename_replaces_the_entry_and_its_pin_follows(layout):
    renamed = DEPLOY.replace("Deploy the api service", "Deploying the API")
    proposal = proposal_with(layout, review.join([FLAKY, NOTES, renamed]))
    ada = make_user("ada")
    curation.set_pin(layout, MD, "task_group:deploy the api service", True, user=ada)
    [change] = changed(BASE, proposal.memory_md)
    curation.decide(proposal, MD, change.key, EntryDecision.Decision.ACCEPT, user=ada)

    curation.approve(proposal, user=ada)

    text = curation.text_of(curation.latest(layout, MD))
    assert [e.title for e in review.entries(text)] == [
        "Fix flaky payment tests",
        "Write release notes",
        "Deploying the API",
    ]
    pin = Pin.objects.get(layout=layout)
    assert pin.key == "task_group:deploying the api" and pin.text == renamed
    assert ApprovedEntry.objects.filter(layout=layout, key=change.key).exists()


@pytest.mark.django_db
def test_approving_a_rejected_split_keeps_the_old_entry_where_it_was_and_remembers_both_parts(
    layout,
):
    first = group(
        "Deploy: migrations",
        "When deploying the api service always run the migrations first, before anything.",
        "r1",
    )
    second = group(
        "Deploy: restarts",
        "Then restart the gunicorn workers one at a time and watch the health endpoint "
        "until it answers.",
        "r2",
    )
    proposal = proposal_with(layout, review.join([FLAKY, first, NOTES, second, LINT]))
    ada = make_user("ada")
    [split] = [c for c in changed(BASE, proposal.memory_md) if c.paired]
    curation.decide(proposal, MD, split.key, EntryDecision.Decision.REJECT, user=ada)
    # The page shows the same key on the next view, so the decision sticks to the pair.
    reviews = curation.document_reviews(proposal)
    assert reviews[0].decisions[split.key].decision == "reject"
    assert [c.key for c in reviews[0].changes if c.paired] == [split.key]

    curation.approve(proposal, user=ada)

    text = curation.text_of(curation.latest(layout, MD))
    assert [e.title for e in review.entries(text)] == [
        "Deploy the api service",
        "Fix flaky payment tests",
        "Write release notes",
        "Configure the linter",
    ]
    assert set(RejectedEntry.objects.values_list("key", flat=True)) == {
        "task_group:deploy: migrations",
        "task_group:deploy: restarts",
    }
    # Proposed again later, either part is flagged as a rejected entry coming back.
    later = proposal_with(layout, review.join([second]))
    assert curation.reintroduced(later) == ["Deploy: restarts"]


@pytest.mark.django_db
def test_approving_a_merge_untouched_takes_it_and_merges_with_edits_made_during_the_run(layout):
    merged = group("Deploying and testing", body(DEPLOY) + "\n" + body(FLAKY), "r1", "r3")
    proposal = proposal_with(layout, review.join([merged, NOTES]))
    ada = make_user("ada")
    # A person edits an entry the model did not touch while the run was going.
    curation.edit_entry(
        layout,
        MD,
        "task_group:write release notes",
        NOTES.replace("towncrier", "towncrier (v23)"),
        based_on=curation.latest(layout, MD).number,
        user=ada,
    )

    curation.approve(proposal, user=ada)

    text = curation.text_of(curation.latest(layout, MD))
    assert [e.title for e in review.entries(text)] == [
        "Deploying and testing",
        "Write release notes",
    ]
    assert "towncrier (v23)" in text


@pytest.mark.django_db
def test_the_api_lists_a_pair_once_with_what_it_replaces_and_decides_it_by_its_key(layout):

    renamed = DEPLOY.replace("Deploy the api service", "Deploying the API")
    proposal = proposal_with(layout, review.join([FLAKY, NOTES, renamed]))
    reviewer = make_user("rev")
    Membership.objects.create(workspace=layout.workspace, user=reviewer, role=Role.REVIEWER)
    secret = token_for(reviewer)

    detail = Client().get(api(layout, f"/proposals/{proposal.pk}"), **bearer(secret)).json()

    [change] = [c for c in detail["changes"] if c["document"] == MD]
    assert (change["status"], change["pairing"]) == ("changed", "renamed")
    assert change["previous"] == ["task_group:deploy the api service"]
    assert "-# Task Group: Deploy the api service" in change["diff"]
    decided = Client().post(
        api(layout, f"/proposals/{proposal.pk}/decisions"),
        {"document": MD, "keys": [change["key"]], "decision": "reject"},
        content_type="application/json",
        **bearer(secret),
    )
    assert decided.status_code == 200, decided.content
    curation.approve(proposal, user=reviewer)
    assert same(curation.text_of(curation.latest(layout, MD)), BASE)


def test_the_thresholds_separate_the_same_entry_from_different_ones():
    """The numbers behind PAIR_RATIO: unrelated task groups of one project stay well
    below it, a renamed or moved-and-edited one well above."""
    samples = [DEPLOY, FLAKY, NOTES, LINT]
    words = [pairing._words(t) for t in samples]
    for i, a in enumerate(words):
        for b in words[i + 1 :]:
            ratio = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
            assert ratio < review.PAIR_RATIO - 0.3, ratio
    edited = DEPLOY.replace("Deploy the api service", "Rolling out the api").replace(
        "one at a time", "two at a time"
    )
    ratio = difflib.SequenceMatcher(
        None, pairing._words(DEPLOY), pairing._words(edited), autojunk=False
    ).ratio()
    assert ratio > review.PAIR_RATIO + 0.25, ratio


def sdk_group(summary_file: str) -> str:
    """A task group as the SDK writes it: its task cites the rollout's summary file and
    the rollout's id."""
    return (
        "# Task Group: deployment runbooks\n\nscope: deploying the auth proxy\n\n"
        "## Task 1: deploy-notes-auth-proxy, outcome success\n\n"
        "### rollout_summary_files\n\n"
        f"- rollout_summaries/{summary_file} (rollout_id=deploy-auth-proxy-dc4ee6, "
        "updated_at=2026-11-29T22:53:39+00:00, terminal_state=completed)\n\n"
        "### keywords\n\n- auth-proxy, sa-east-1, deployctl promote --wait, canary\n"
    )


def test_a_rollout_extracted_again_under_another_summary_name_is_one_changed_task():
    before = sdk_group("deploy-auth-proxy-dc4ee6_auth-proxy-deploy-notes-sa-east-1.md")
    after = sdk_group("deploy-auth-proxy-dc4ee6_write-deployment-notes-auth-proxy.md")

    [change] = changed(before, after)

    assert change.status == "changed" and change.kind == "task"
    assert change.pairing == "rewritten" and len(change.previous) == 1
    assert "write-deployment-notes-auth-proxy" in change.proposed
    assert "auth-proxy-deploy-notes-sa-east-1" in change.current


def test_tasks_of_different_rollouts_under_one_title_stay_apart():
    before = sdk_group("deploy-auth-proxy-dc4ee6_notes.md")
    other = before.replace("deploy-auth-proxy-dc4ee6", "deploy-auth-proxy-77aa01")

    assert sorted(c.status for c in changed(before, other)) == ["added", "removed"]
