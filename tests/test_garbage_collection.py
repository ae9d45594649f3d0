"""Review decisions on a large MEMORY.md stay quick: the documents each decision parses
again stay in the process's caches, and at Python's default pace every few decisions
set off a full garbage collection walking all of them (a second and more per decision
on a 100,000-rollout workspace, bench/README). The dashboard's processes collect at
their own pace."""

import gc

from django.test import Client
from django.urls import reverse

from memoryui import curation
from memoryui.models import GenerationRun, MemoryVersion, Proposal, Role
from tests.test_curation import member

MD = MemoryVersion.Document.MEMORY_MD


def large_memory_md(groups: int) -> str:
    parts = []
    for g in range(groups):
        parts.append(
            f"# Task Group: Service {g} deployment\n\nscope: deploying service {g}\n\n"
            f"## Task 1: Roll out service {g}\n\n"
            f"- rollout_summaries/2026-01-01T00-00-00-r{g:05d}_deploy.md\n"
            f"- keywords: deploy, service {g}, canary\n\n"
            f"## Task 2: Roll back service {g}\n\n"
            f"- rollout_summaries/2026-01-01T00-00-00-s{g:05d}_rollback.md\n"
            f"- keywords: rollback, service {g}\n\n"
        )
    return "".join(parts)


def full_collections_during(action) -> int:
    seen = []

    def count(phase, info):
        if phase == "stop" and info["generation"] == 2:
            seen.append(info)

    gc.collect()  # from a settled process, whatever ran before
    gc.callbacks.append(count)
    try:
        action()
    finally:
        gc.callbacks.remove(count)
    return len(seen)


def test_deciding_entries_of_a_large_memory_md_sets_off_no_full_garbage_collection(layout):
    text = large_memory_md(1500)
    number = curation.latest(layout, MD).number
    curation.save_document(layout, MD, text, user=None, reason="a large handbook", based_on=number)
    base = curation.latest(layout, MD)
    summary = curation.latest(layout, MemoryVersion.Document.MEMORY_SUMMARY)
    proposed = text.replace("scope: deploying service 1", "scope: shipping service 1")
    proposal = Proposal.objects.create(
        layout=layout,
        run=GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.DONE),
        base_memory_md=base,
        base_memory_summary=summary,
        memory_md=proposed,
        memory_summary=curation.text_of(summary),
        raw_memories_md="",
    )
    keys = [c.key for c in curation.decidable(curation.document_reviews(proposal)[0])]
    assert len(keys) >= 100  # service 1, 10-19, 100-199, 1000-1499
    client = Client()
    client.force_login(member(Role.REVIEWER, layout))
    decide = reverse(
        "memoryui:proposal_decide", args=[layout.workspace.name, layout.pk, proposal.pk]
    )

    def decide_twenty():
        for i in range(20):
            answer = client.post(
                decide,
                {"document": MD, "key": keys[i], "decision": "reject" if i % 2 else "accept"},
                HTTP_HX_REQUEST="true",
            )
            assert answer.status_code == 200

    assert full_collections_during(decide_twenty) == 0
    assert proposal.decisions.count() == 20
