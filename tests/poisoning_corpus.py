"""The labelled poisoning corpus (``tests/data/poisoning``, built by
``bench/poisoning_corpus.py``) as a proposal, and how well the flags do on it: for the
corpus test and ``bench/bench_poisoning.py``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generation import tree
from memoryui import curation, entry_checks
from memoryui.models import GenerationRun, MemoryVersion, Proposal

CORPUS = Path(__file__).resolve().parent / "data" / "poisoning"


def labels() -> dict[str, dict[str, Any]]:
    return json.loads((CORPUS / "labels.json").read_text(encoding="utf-8"))


def corpus_proposal(layout: Any) -> Any:
    """A pending proposal that brings the corpus's MEMORY.md and memory_summary.md (as
    phase two wrote them) to a layout that had neither, selecting every rollout."""

    memories = CORPUS / "workspace" / "memories"
    selection = tree.parse_selection((memories / "phase_two_selection.json").read_bytes())
    # The import made the corpus's files the current versions: the proposal starts
    # from nothing, as a first consolidation does.
    MemoryVersion.objects.filter(layout=layout).delete()
    assert curation.latest(layout, MemoryVersion.Document.MEMORY_MD) is None
    return Proposal.objects.create(
        layout=layout,
        run=GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.DONE),
        memory_md=(memories / "MEMORY.md").read_text(encoding="utf-8"),
        memory_summary=(memories / "memory_summary.md").read_text(encoding="utf-8"),
        raw_memories_md="",
        selection=[item.__dict__ for item in selection.items],
    )


@dataclass
class Score:
    """Per injection kind: injections that reached an entry, and how many of those the
    entry's flags caught (any flag, and the flag of that kind); per flag kind: benign
    entries it flagged."""

    reached: dict[str, int] = field(default_factory=dict)
    caught: dict[str, int] = field(default_factory=dict)
    caught_as_kind: dict[str, int] = field(default_factory=dict)
    missed: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)
    benign_entries: int = 0
    benign_flagged: list[tuple[str, str, str]] = field(default_factory=list)
    false_by_flag: dict[str, int] = field(default_factory=dict)

    @property
    def detection_rate(self) -> float:
        total = sum(self.reached.values())
        return sum(self.caught.values()) / total if total else 1.0

    @property
    def false_positive_rate(self) -> float:
        return len(self.benign_flagged) / self.benign_entries if self.benign_entries else 0.0


def score(entries: list[tuple[str, str, list[dict[str, Any]]]]) -> Score:
    """``entries``: (key, text, flags) of every proposed entry."""
    result = Score()
    injected = {r: v for r, v in labels().items() if v["label"] == "injected"}
    for rollout_id, label in injected.items():
        holders = [(k, flags) for k, text, flags in entries if label["marker"] in text]
        if not holders:
            result.unreached.append(rollout_id)
            continue
        kind = label["kind"]
        for key, flags in holders:
            result.reached[kind] = result.reached.get(kind, 0) + 1
            if flags:
                result.caught[kind] = result.caught.get(kind, 0) + 1
            else:
                result.missed.append(f"{rollout_id} in {key}")
            if any(f["kind"] == kind for f in flags):
                result.caught_as_kind[kind] = result.caught_as_kind.get(kind, 0) + 1
    markers = [v["marker"] for v in injected.values()]
    for key, text, flags in entries:
        if any(m in text for m in markers):
            continue
        result.benign_entries += 1
        for flag in flags:
            result.false_by_flag[flag["kind"]] = result.false_by_flag.get(flag["kind"], 0) + 1
        if flags:
            result.benign_flagged.append((key, flags[0]["kind"], flags[0]["reason"]))
    return result


def proposal_score(proposal: Any) -> Score:

    checks = entry_checks.ensure(proposal)
    return score(
        [
            (f"{d}:{k}", t, checks[(d, k, entry_checks.check_key(t))].flags)
            for d, k, t in entry_checks.proposed_texts(proposal)
        ]
    )
