"""Decisions under concurrency: of two reviewers deciding one proposal at once exactly
one wins and the other is told what happened; a reservation is taken on purpose and
holds for every decision; pins and protections are intents, not toggles, and a pin
follows its entry's text."""

import re
import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from generation import review
from memoryui import curation, pipeline
from memoryui.importer import import_workspace
from memoryui.models import (
    AuditEvent,
    Layout,
    MemoryVersion,
    Pin,
    Proposal,
    ProtectedRawMemory,
    Role,
)
from tests.scripted_model import Reply
from tests.test_api import api, bearer, token_for
from tests.test_curation import MD, current_text, first_key, member, proposal_for, url

HTMX = {"HX-Request": "true"}


def login(user) -> Client:
    # A 500 comes back as a response, so a test can say which request failed.
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def at_once(*requests):
    """Send each request from its own thread (its own database connection), all
    released together by a barrier so they overlap; returns the responses in order."""
    barrier = threading.Barrier(len(requests))
    responses: list = [None] * len(requests)

    def send(i, request):
        try:
            barrier.wait()
            responses[i] = request()
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i, r)) for i, r in enumerate(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return responses


def decision_events(proposal: Proposal) -> list[tuple[str, str]]:
    return list(
        AuditEvent.objects.filter(
            action__in=["proposal.approve", "proposal.reject"], target=f"proposal #{proposal.pk}"
        ).values_list("actor", "action")
    )


def state(proposal: Proposal) -> tuple:
    """What a decision can change, to check that a refused one changed nothing."""
    fresh = Proposal.objects.get(pk=proposal.pk)
    return (
        fresh.status,
        fresh.decided_by_id,
        fresh.decided_at,
        fresh.decisions.count(),
        MemoryVersion.objects.filter(layout=proposal.layout).count(),
        AuditEvent.objects.filter(action__startswith="proposal.").count(),
        AuditEvent.objects.filter(action__startswith="entry.").count(),
    )


# --- two decisions at once -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("bobs", ["approve", "reject"])
def test_two_reviewers_deciding_a_proposal_at_once_exactly_one_wins(model, layout, bobs):
    proposal = proposal_for(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))
    bob = login(member(Role.REVIEWER, layout, "bob"))

    responses = at_once(
        lambda: alice.post(url("proposal_approve", layout, proposal.pk)),
        lambda: bob.post(url(f"proposal_{bobs}", layout, proposal.pk)),
    )

    statuses = [r.status_code for r in responses]
    assert sorted(statuses) == [302, 409], statuses
    winner, loser = ("alice", 1) if statuses[0] == 302 else ("bob", 0)
    action = "approve" if winner == "alice" else bobs
    proposal.refresh_from_db()
    assert proposal.decided_by.username == winner
    assert proposal.status == {"approve": "approved", "reject": "rejected"}[action]
    assert decision_events(proposal) == [(winner, f"proposal.{action}")]
    page = responses[loser].content.decode()
    assert "was not recorded" in page and "Traceback" not in page
    assert f"was already {proposal.get_status_display().lower()} by {winner} at " in page
    approved = MemoryVersion.objects.filter(reason=f"approved proposal #{proposal.pk}")
    documents = list(approved.values_list("document", flat=True))
    assert len(documents) == len(set(documents))  # no document approved twice


@pytest.mark.django_db
def test_approving_an_already_decided_proposal_is_refused_and_changes_nothing(model, layout):
    proposal = proposal_for(layout)
    alice = member(Role.REVIEWER, layout, "alice")
    bob = login(member(Role.REVIEWER, layout, "bob"))
    curation.reject_proposal(proposal, user=alice)
    before = state(proposal)

    response = bob.post(url("proposal_approve", layout, proposal.pk))
    fragment = bob.post(url("proposal_reject", layout, proposal.pk), headers=HTMX)
    entry = bob.post(
        url("proposal_decide", layout, proposal.pk),
        {"document": MD, "key": first_key(layout), "decision": "accept"},
    )

    page = response.content.decode()
    assert response.status_code == 409
    assert "Your approval was not recorded" in page and "already rejected by alice" in page
    assert "<html" in page  # a page for a plain form ...
    assert fragment.status_code == 409  # ... the fragment alone for htmx
    assert fragment.content.decode().lstrip().startswith('<section id="refusal"')
    assert entry.status_code == 409 and "Your decision was not recorded" in entry.content.decode()
    assert state(proposal) == before


@pytest.mark.django_db
def test_a_save_based_on_an_old_version_is_refused_and_changes_nothing(layout):
    editor = member(Role.EDITOR, layout)
    old = curation.latest(layout, MD).number
    curation.edit_entry(
        layout, MD, first_key(layout), "# Task Group: newer\n", based_on=old, user=editor
    )
    text, count = current_text(layout), MemoryVersion.objects.count()

    with pytest.raises(curation.StaleVersion) as refused:
        curation.save_document(
            layout,
            MD,
            "# Task Group: from the old version\n",
            user=editor,
            reason="x",
            based_on=old,
        )

    assert refused.value.latest.number == old + 1
    assert current_text(layout) == text and MemoryVersion.objects.count() == count


# --- reservations ------------------------------------------------------------------------


@pytest.mark.django_db
def test_opening_a_proposal_does_not_reserve_it(model, layout):
    proposal = proposal_for(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))

    page = alice.get(url("proposal_review", layout, proposal.pk)).content.decode()

    proposal.refresh_from_db()
    assert proposal.reserved_by is None
    assert "Nobody is reviewing this proposal" in page and "Start reviewing" in page


@pytest.mark.django_db
def test_a_reservation_refuses_every_other_reviewers_decision_until_released(model, layout):
    proposal = proposal_for(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))
    bob = login(member(Role.REVIEWER, layout, "bob"))
    assert alice.post(url("proposal_reserve", layout, proposal.pk)).status_code == 302
    before = state(proposal)

    refused = [
        bob.post(
            url("proposal_decide", layout, proposal.pk),
            {"document": MD, "key": first_key(layout), "decision": "reject"},
        ),
        bob.post(url("proposal_approve", layout, proposal.pk)),
        bob.post(url("proposal_reject", layout, proposal.pk)),
        bob.post(url("proposal_reserve", layout, proposal.pk)),
    ]

    assert [r.status_code for r in refused] == [409, 409, 409, 409]
    assert all("alice is reviewing this proposal right now" in r.content.decode() for r in refused)
    assert state(proposal) == before
    page = bob.get(url("proposal_review", layout, proposal.pk)).content.decode()
    assert "alice is reviewing this proposal until" in page and ">Approve<" not in page

    alice.post(url("proposal_reserve", layout, proposal.pk), {"action": "release"})
    assert bob.post(url("proposal_approve", layout, proposal.pk)).status_code == 302
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.APPROVED and proposal.decided_by.username == "bob"


@pytest.mark.django_db
def test_the_reviewer_holding_a_reservation_decides_and_it_ends_with_the_decision(model, layout):
    proposal = proposal_for(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))
    alice.post(url("proposal_reserve", layout, proposal.pk))

    decided = alice.post(
        url("proposal_decide", layout, proposal.pk),
        {"document": MD, "key": first_key(layout), "decision": "accept"},
    )
    approved = alice.post(url("proposal_approve", layout, proposal.pk))

    assert (decided.status_code, approved.status_code) == (302, 302)
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.APPROVED and proposal.reserved_by is None


@pytest.mark.django_db
def test_start_reviewing_with_htmx_swaps_the_reservation_and_says_who_holds_it(model, layout):
    proposal = proposal_for(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))
    bob = login(member(Role.REVIEWER, layout, "bob"))

    taken = alice.post(url("proposal_reserve", layout, proposal.pk), headers=HTMX)
    refused = bob.post(url("proposal_reserve", layout, proposal.pk), headers=HTMX)

    assert taken.status_code == 200
    fragment = taken.content.decode()
    assert fragment.lstrip().startswith('<section id="reservation"') and "<html" not in fragment
    assert "You are reviewing this proposal until" in fragment and "Stop reviewing" in fragment
    assert refused.status_code == 409
    assert "alice is reviewing this proposal right now" in refused.content.decode()
    proposal.refresh_from_db()
    assert proposal.reserved_by.username == "alice"


@pytest.mark.django_db
def test_only_the_holder_or_a_workspace_admin_can_release_a_reservation(model, layout):
    proposal = proposal_for(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))
    bob = login(member(Role.REVIEWER, layout, "bob"))
    admin = login(member(Role.ADMIN, layout, "carol"))
    alice.post(url("proposal_reserve", layout, proposal.pk))

    by_bob = bob.post(url("proposal_reserve", layout, proposal.pk), {"action": "release"})
    bobs_page = bob.get(url("proposal_review", layout, proposal.pk)).content.decode()
    admins_page = admin.get(url("proposal_review", layout, proposal.pk)).content.decode()
    by_admin = admin.post(url("proposal_reserve", layout, proposal.pk), {"action": "release"})

    assert by_bob.status_code == 409 and "Release alice" not in bobs_page
    assert "Release alice" in admins_page and by_admin.status_code == 302
    proposal.refresh_from_db()
    assert proposal.reserved_by is None
    event = AuditEvent.objects.get(action="proposal.release")
    assert event.actor == "carol" and event.detail["holder"] == "alice"


@pytest.mark.django_db(transaction=True)
def test_two_reviewers_starting_to_review_at_once_get_one_reservation(model, layout):
    proposal = proposal_for(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))
    bob = login(member(Role.REVIEWER, layout, "bob"))

    responses = at_once(
        lambda: alice.post(url("proposal_reserve", layout, proposal.pk)),
        lambda: bob.post(url("proposal_reserve", layout, proposal.pk)),
    )

    statuses = [r.status_code for r in responses]
    assert sorted(statuses) == [302, 409], statuses
    winner = "alice" if statuses[0] == 302 else "bob"
    proposal.refresh_from_db()
    assert proposal.reserved_by.username == winner
    assert list(AuditEvent.objects.filter(action="proposal.reserve").values_list("actor")) == [
        (winner,)
    ]


# --- pins and protection --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_pin_clicked_twice_at_once_pins_once(layout):
    key = first_key(layout)
    alice = login(member(Role.EDITOR, layout, "alice"))
    bob = login(member(Role.EDITOR, layout, "bob"))

    responses = at_once(
        lambda: alice.post(url("entry_pin", layout, MD), {"key": key, "action": "pin"}),
        lambda: bob.post(url("entry_pin", layout, MD), {"key": key, "action": "pin"}),
    )

    assert [r.status_code for r in responses] == [302, 302]
    assert list(Pin.objects.values_list("key", flat=True)) == [key]
    assert AuditEvent.objects.filter(action="entry.pin").count() == 1


@pytest.mark.django_db(transaction=True)
def test_protect_clicked_twice_at_once_protects_once(layout):
    rollout_id = layout.raw_memories.order_by("rollout_id").first().rollout_id
    alice = login(member(Role.EDITOR, layout, "alice"))
    bob = login(member(Role.EDITOR, layout, "bob"))

    protect = {"rollout_id": rollout_id, "action": "protect"}

    responses = at_once(
        lambda: alice.post(url("protect", layout), protect),
        lambda: bob.post(url("protect", layout), protect),
    )

    assert [r.status_code for r in responses] == [302, 302]
    assert list(ProtectedRawMemory.objects.values_list("rollout_id", flat=True)) == [rollout_id]
    assert AuditEvent.objects.filter(action="raw_memory.protect").count() == 1


def consolidate_with(model, layout: Layout, memory_md: str) -> Proposal:
    """Run a consolidation whose agent rewrites MEMORY.md as ``memory_md``."""
    run = pipeline.start_run(layout, reextract=True)
    for _ in range(3):
        for job_id in pipeline.claim_window(run.pk):
            pipeline.process_job(job_id)
    assert pipeline.finish_phase_one(run.pk)
    model.script(
        Reply.tools(
            ("delete_file", {"path": "MEMORY.md"}),
            ("write_file", {"path": "MEMORY.md", "content": memory_md}),
            ("delete_file", {"path": "memory_summary.md"}),
            ("write_file", {"path": "memory_summary.md", "content": "## User Profile\n\nx\n"}),
        ),
        Reply(raw_text="Rewrote them."),
    )
    pipeline.consolidate(run.pk)
    return Proposal.objects.get(run=run)


@pytest.mark.django_db
def test_a_pinned_entry_edited_later_is_kept_as_edited_by_the_next_consolidation(model, layout):
    editor = login(member(Role.EDITOR, layout))
    entry = next(e for e in review.entries(current_text(layout)) if "25% for 30 min" in e.text)
    editor.post(url("entry_pin", layout, MD), {"key": entry.key, "action": "pin"})
    edited = entry.text.replace("25% for 30 min", "10% for 60 min")
    editor.post(
        url("entry_edit", layout, MD),
        {"key": entry.key, "text": edited, "based_on": curation.latest(layout, MD).number},
    )
    assert {e.key: e.text for e in review.entries(current_text(layout))}[entry.key] == edited

    # The model keeps the edited text verbatim, as a pin asks.
    proposal = consolidate_with(model, layout, current_text(layout))

    assert "10% for 60 min" in proposal.memory_md and "25% for 30 min" not in proposal.memory_md
    assert proposal.memory_md == current_text(layout)
    assert proposal.restored_pins == []
    assert "10% for 60 min" in str(model.requests[-1])  # phase two was told the edited text


@pytest.mark.django_db
def test_a_pin_follows_its_entry_when_renamed_and_ends_when_it_is_deleted(model, layout):
    editor = member(Role.EDITOR, layout)
    entry = review.entries(current_text(layout))[0]
    curation.set_pin(layout, MD, entry.key, True, user=editor)
    renamed = entry.text.replace("deployment runbooks", "deploy runbooks")
    curation.edit_entry(
        layout, MD, entry.key, renamed, based_on=curation.latest(layout, MD).number, user=editor
    )
    page = login(editor).get(url("memory_md", layout)).content.decode()

    # A model that drops the entry gets the renamed one back, not the old one.
    proposal = consolidate_with(model, layout, "# Task Group: something else\n\nscope: x\n")

    assert Pin.objects.get().key == review.entries(current_text(layout))[0].key
    assert "deploy runbooks" in page[: page.index('class="badge pin"')]
    assert "# Task Group: deploy runbooks" in proposal.memory_md
    assert "# Task Group: deployment runbooks" not in proposal.memory_md

    curation.edit_entry(
        layout,
        MD,
        Pin.objects.get().key,
        "",
        based_on=curation.latest(layout, MD).number,
        user=editor,
    )
    assert not Pin.objects.exists()


# --- two decisions on one entry at once ----------------------------------------------------


def entry_events(proposal: Proposal) -> int:
    return AuditEvent.objects.filter(
        action__in=["entry.accept", "entry.reject"], detail__proposal=proposal.pk
    ).count()


@pytest.mark.django_db(transaction=True)
def test_twenty_pairs_of_api_decisions_on_one_entry_at_once_each_have_one_winner(model, layout):
    """Accept and reject by two reviewers through the API, twenty times over: each time
    one 200, one 409 naming who decided, one audit event; the winner undoes before the
    next pair."""

    proposal = proposal_for(layout)
    key = first_key(layout)
    people = {n: member(Role.REVIEWER, layout, n) for n in ("alice", "bob")}
    secrets = {n: token_for(u) for n, u in people.items()}
    decide = api(layout, f"/proposals/{proposal.pk}/decisions")

    def post(name: str, decision: str):
        body = {"document": MD, "keys": [key], "decision": decision}
        return lambda: Client(raise_request_exception=False).post(
            decide, body, content_type="application/json", **bearer(secrets[name])
        )

    for round_ in range(20):
        events_before = entry_events(proposal)
        responses = at_once(post("alice", "accept"), post("bob", "reject"))

        statuses = [r.status_code for r in responses]
        assert sorted(statuses) == [200, 409], (round_, statuses)
        winner, loser = ("alice", 1) if statuses[0] == 200 else ("bob", 0)
        made = proposal.decisions.get(document=MD, key=key)
        assert made.user.username == winner
        assert made.decision == ("accept" if winner == "alice" else "reject")
        assert f"by {winner} at " in responses[loser].json()["detail"]
        assert entry_events(proposal) == events_before + 1
        curation.undo_decision(proposal, MD, key, user=people[winner])


@pytest.mark.django_db(transaction=True)
def test_two_decisions_on_one_entry_through_the_pages_at_once_one_wins(model, layout):
    proposal = proposal_for(layout)
    key = first_key(layout)
    alice = login(member(Role.REVIEWER, layout, "alice"))
    bob = login(member(Role.REVIEWER, layout, "bob"))
    decide = url("proposal_decide", layout, proposal.pk)

    responses = at_once(
        lambda: alice.post(decide, {"document": MD, "key": key, "decision": "accept"}),
        lambda: bob.post(decide, {"document": MD, "key": key, "decision": "reject"}),
    )

    statuses = [r.status_code for r in responses]
    assert sorted(statuses) == [302, 409], statuses
    winner, loser = ("alice", 1) if statuses[0] == 302 else ("bob", 0)
    page = responses[loser].content.decode()
    assert "Your decision was not recorded" in page and f"by {winner} at " in page
    assert entry_events(proposal) == 1


@pytest.mark.django_db
def test_deciding_all_leaves_entries_another_reviewer_decided_and_one_changes_their_mind(
    model, layout
):
    proposal = proposal_for(layout)
    key = first_key(layout)
    alice = member(Role.REVIEWER, layout, "alice")
    bob = login(member(Role.REVIEWER, layout, "bob"))
    curation.decide(proposal, MD, key, "reject", user=alice)
    curation.decide(proposal, MD, key, "accept", user=alice)  # her own: she may change it

    everything = bob.post(
        url("proposal_decide", layout, proposal.pk),
        {"document": MD, "all": "on", "decision": "accept"},
    )

    assert everything.status_code == 302
    made = proposal.decisions.get(document=MD, key=key)
    assert (made.user.username, made.decision) == ("alice", "accept")
    assert proposal.decisions.exclude(key=key).exclude(user__username="bob").count() == 0


@pytest.mark.django_db
def test_each_task_group_on_the_memory_md_page_pins_and_edits_itself(fixtures_dir):
    """The MEMORY.md page's Pin and Edit name each task group's own key: a reviewer who
    pins the second group pins that group, not a task of the first."""
    import_workspace(fixtures_dir / "medium-300" / "workspace", "m")
    layout = Layout.objects.get(workspace__name="m", memories_dir="memories")
    version = MemoryVersion.objects.filter(layout=layout, document=MD).latest("number")
    text = bytes(version.blob.data).decode()
    groups = [e.key for e in review.entries(text) if not e.group]
    assert len(groups) > 2 and all(k.startswith("task_group:") for k in groups)

    page = login(member(Role.EDITOR, layout, "ed")).get(
        reverse("memoryui:memory_md", args=["m", layout.pk])
    )
    shown = re.findall(r'name="key" value="([^"]+)"', page.content.decode())
    assert [k.replace("&#x27;", "'").replace("&amp;", "&") for k in shown] == groups
