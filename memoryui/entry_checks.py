"""Evidence, provenance and poisoning flags of a proposal's entries, computed once per
entry text and stored (``EntryCheck``): the review page reads them in one query.

An entry's claims are traced through the rollout summaries it cites (the run's own,
else the imported ones), the raw memories of those rollouts and the rollouts' items, to
say who said it: the user, the assistant, or a tool. The poisoning flags
(``generation.poison``) compare against the user's and assistant's own words there.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, NamedTuple

from django.db import transaction

from generation import evidence, poison, review, tree
from generation.memory_md import CITATION_RE

from . import documents, entry_lineage, task_queue
from .models import (
    EntryCheck,
    GenerationSettings,
    JudgeVerdict,
    Layout,
    MemoryVersion,
    Proposal,
    RawMemory,
    Rollout,
    Workspace,
    WorkspaceFile,
)

log = logging.getLogger(__name__)
USER, ASSISTANT, TOOL = "user", "assistant", "tool output"
# An entry that cites nothing is compared with the words of at most this many rollouts
# of the selection (the SDK's default selection is 256).
MAX_SELECTED = 256
_OUTPUT_TYPES = {
    "function_call_output",
    "custom_tool_call_output",
    "shell_call_output",
    "local_shell_call_output",
    "apply_patch_call_output",
    "computer_call_output",
    "tool_search_output",
    "program_output",
    "mcp_call",
    "mcp_approval_response",
    "web_search_call",
    "file_search_call",
}


@lru_cache(maxsize=8192)
def sha(text: str) -> str:
    """The review page's lint key of a whole proposed document (``check_key`` keys an
    entry's check). For the texts the caches hand out (``documents.text``,
    ``documents.same_text``, the comparison's entries) a lookup is an identity check,
    not a hash of the text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# The version of the checks (evidence, provenance, poisoning flags): part of the key a
# check is stored under, as lint's LINT_VERSION is. Raise it when generation/evidence.py,
# poison.py, poison_rules.py or generation/data change what they find: a pending
# proposal's stored checks are then computed again the next time it is read, so none
# keeps the flags of a rule that no longer exists or misses those of a new one. (An
# agent's own version is checked when it is shown or written, never stored.)
CHECKS_VERSION = 3


@lru_cache(maxsize=8192)
def check_key(text: str) -> str:
    """The key an entry text's check is stored under: its sha256 with the checks'
    version."""
    return hashlib.sha256(f"{CHECKS_VERSION}\0{text}".encode()).hexdigest()


@dataclass
class Sources:
    """What an entry's citations lead to: summary texts by cited path, raw memories and
    rollout items by rollout id."""

    summaries: dict[str, str] = field(default_factory=dict)
    rollout_of: dict[str, str] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)
    items: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    selected: list[str] = field(default_factory=list)
    # The workspace's allow-list of hosts (``Workspace.known_hosts``).
    allowed: frozenset[str] = frozenset()

    def voices(self, rollout_ids: Iterable[str]) -> poison.Voices:
        ids = [r for r in rollout_ids if r in self.items]
        if not ids:
            return poison.Voices()
        said = [(role, text) for r in ids for _, role, text in self.items[r]]
        return poison.Voices.of(
            "\n".join(t for role, t in said if role == USER),
            "\n".join(t for role, t in said if role == ASSISTANT),
        )


def load_sources(proposal: Proposal, cited: set[str], *, everyone: bool = False) -> Sources:
    """Every cited summary, with its raw memory and rollout, in a few queries: the run's
    phase-one results first (not imported yet), then the imported files. ``everyone``:
    also the rollouts of the proposal's selection (``selected``), whose words an entry
    citing nothing (a summary section) is compared with."""
    found = Sources(allowed=proposal.layout.workspace.allowed_hosts())
    if everyone:
        # An agent's proposal has no selection: the rollouts of its uploads stand in.
        found.selected = (
            [
                i["rollout_id"]
                for i in proposal.selection
                if isinstance(i, dict) and "rollout_id" in i
            ]
            or [str(r) for r in proposal.inputs]
        )[:MAX_SELECTED]
    for result in _run_results(proposal):
        for path, text in (result.get("files") or {}).items():
            if path in cited:
                found.summaries[path] = text
                found.rollout_of[path] = result["rollout_id"]
            elif path.startswith("raw_memories/"):
                found.raw.setdefault(result["rollout_id"], text)
    return _load_workspace(proposal.layout, cited, found)


def _load_workspace(layout: Layout, cited: set[str], found: Sources) -> Sources:
    """``found`` completed with the cited summaries the workspace holds (imported, or
    brought by the same upload), their raw memories and their rollouts' items."""
    wanted = {f"{layout.memories_dir}/{p}": p for p in cited if p not in found.summaries}
    for path, blob, rollout_id in WorkspaceFile.objects.filter(
        workspace_id=layout.workspace_id,
        path__in=list(wanted),
        rollout_summary__layout=layout,
    ).values_list("path", "blob_id", "rollout_summary__rollout_id"):
        found.summaries[wanted[path]] = _text(blob)
        found.rollout_of[wanted[path]] = rollout_id
    ids = set(found.rollout_of.values()) | set(found.selected)
    if not ids:
        return found
    for rollout_id, blob in RawMemory.objects.filter(
        layout=layout, rollout_id__in=ids - set(found.raw)
    ).values_list("rollout_id", "file__blob_id"):
        found.raw[rollout_id] = _text(blob)
    for rollout_id, blob in Rollout.objects.filter(layout=layout, rollout_id__in=ids).values_list(
        "rollout_id", "file__blob_id"
    ):
        if blob:
            found.items[rollout_id] = rollout_items(documents.content(blob))
    return found


def _run_results(proposal: Proposal) -> list[dict[str, Any]]:
    if proposal.run_id is None:  # an agent's proposal: its rollouts' files are imported
        return []
    assert proposal.run is not None
    return [
        {"rollout_id": rollout_id, "files": files}
        for rollout_id, files in proposal.run.jobs.filter(result__isnull=False).values_list(
            "result__rollout_id", "result__files"
        )
    ]


def _text(blob: str | None) -> str:
    return documents.content(blob).decode("utf-8", "replace") if blob else ""


def rollout_items(data: bytes) -> list[tuple[int, str, str]]:
    """(number, who, text) of every item of a rollout that says something, numbered as
    the rollout page numbers them (1-based, across segments)."""
    out = []
    number = 0
    for segment in tree.parse_rollout(data).segments:
        items = [*segment.input, *segment.generated_items]
        for item in items:
            number += 1
            said = _said(item)
            if said is not None:
                out.append((number, *said))
        if segment.has_final_output_key and segment.final_output not in (None, ""):
            number += 1
            out.append((number, ASSISTANT, _as_text(segment.final_output)))
    return out


def _said(item: Any) -> tuple[str, str] | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type") or ("message" if "role" in item else "")
    if kind == "message":
        role = item.get("role")
        if role in (USER, ASSISTANT):
            return str(role), tree.message_text(item)
        return None
    if kind in _OUTPUT_TYPES or kind.endswith("_output"):
        return TOOL, _as_text(item.get("output", item.get("result", "")))
    if kind == "reasoning":
        return None
    return None  # tool calls are what the agent did, not what anyone said


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            part.get("text", "") if isinstance(part, dict) else _as_text(part) for part in value
        )
    return json.dumps(value, ensure_ascii=False)


# --- checking one entry ---------------------------------------------------------------


def check_entry(text: str, sources: Sources) -> tuple[int, list[dict], list[dict]]:
    """(risk, flags, claims) of one entry text against what it cites. A cited summary
    that ``sources`` lacks (neither the run's own, pending write-back, nor one the
    workspace holds) is a flag."""
    cited = list(dict.fromkeys(m.group(0) for m in CITATION_RE.finditer(text)))
    summaries = [(p, sources.summaries[p]) for p in cited if p in sources.summaries]
    rollout_ids = [sources.rollout_of[p] for p in cited if p in sources.rollout_of]
    raws = [(r, sources.raw[r]) for r in rollout_ids if r in sources.raw]
    # An entry citing nothing (a section of memory_summary.md, its User preferences)
    # is traced to the rollouts of the selection: every sentence gets its origin.
    traced = rollout_ids if cited else sources.selected
    items = [
        (f"{r}#{n}|{who}", said)
        for r in traced
        for n, who, said in sources.items.get(r, [])
        if said.strip()
    ]
    summary_index = evidence.index(summaries)
    raw_index = evidence.index(raws)[0]
    item_index = evidence.index(items)[0]
    claims = []
    for claim in evidence.check(text, summaries, labels=True) if summaries else _unchecked(text):
        claims.append(_claim_json(claim, summary_index, raw_index, item_index))
    found = _flags(text, sources, require_cited=True)
    risk = max((f.strength for f in found), default=0)
    return risk, [_flag_json(f) for f in found], claims


def _flags(text: str, sources: Sources, *, require_cited: bool = False) -> list[poison.Flag]:
    """The poisoning flags of one entry text, compared with the user's and the
    assistant's words in the rollouts it cites (those of the selection when it cites
    none). ``require_cited``: a citation of a summary ``sources`` lacks is a flag (every
    path: ``sources`` holds the run's own summaries and everything the workspace
    holds)."""
    cited = list(dict.fromkeys(m.group(0) for m in CITATION_RE.finditer(text)))
    rollout_ids = [sources.rollout_of[p] for p in cited if p in sources.rollout_of]
    voices = sources.voices(rollout_ids or sources.selected)
    found = poison.flags(text, voices if voices.known else None, sources.allowed)
    if require_cited:
        found += [poison.missing_source(text, p) for p in cited if p not in sources.summaries]
    return poison.ordered(found)


def _flag_json(flag: poison.Flag) -> dict:
    return {
        "kind": flag.kind.value,
        "label": flag.label,
        "reason": flag.reason,
        "excerpt": flag.excerpt,
    }


def _unchecked(text: str) -> list[evidence.Claim]:
    found = [(n, t, False) for n, t in evidence.claims_of(text)]
    found += [(n, t, True) for n, t, _ in evidence.labels_of(text)]
    return [evidence.Claim(t, n, None, 0.0, label=label) for n, t, label in sorted(found)]


def _claim_json(claim: evidence.Claim, summaries: Any, raws: Any, items: Any) -> dict:
    out: dict[str, Any] = {
        "text": claim.text,
        "line": claim.line,
        "supported": claim.supported,
        "recall": round(claim.recall, 2),
        "label": claim.label,
        "missing": list(claim.missing),
    }
    if claim.passage is not None:
        out["passage"] = {
            "source": claim.passage.source,
            "runs": evidence.highlight(claim.passage.text, claim.matched),
        }
    raw, raw_recall, _ = evidence.best_passage(claim.text, raws)
    if raw is not None and raw_recall >= ORIGIN_RECALL:
        out["raw"] = {"source": f"raw_memories/{raw.source}.md", "text": raw.text[:300]}
    out.update(_origin(claim.text, items))
    return out


# A summary paraphrases (the user said "use ISO dates", the entry says "default to ISO
# 8601 dates"): the item an entry most likely came from needs fewer shared words than a
# supporting passage does, and the user's and the assistant's words win a tie.
ORIGIN_RECALL = 0.45


def _origin(claim: str, items: list[Any]) -> dict[str, Any]:
    """Who said the claim: the best matching rollout item among the user's and the
    assistant's words, else a tool's output ("from tool output")."""
    spoken = [i for i in items if not i.passage.source.endswith("|" + TOOL)]
    tools = [i for i in items if i.passage.source.endswith("|" + TOOL)]
    said, said_recall, _ = evidence.best_passage(claim, spoken)
    tool, tool_recall, _ = evidence.best_passage(claim, tools)
    if said is not None and said_recall >= ORIGIN_RECALL and said_recall >= tool_recall:
        best = said
    elif tool is not None and tool_recall >= ORIGIN_RECALL:
        best = tool
    else:
        return {}
    where, who = best.source.split("|", 1)
    rollout, number = where.rsplit("#", 1)
    return {
        "origin": {"rollout": rollout, "item": int(number), "who": who, "text": best.text[:300]},
        "tool_only": who == TOOL,
    }


# --- stored per proposal ----------------------------------------------------------------


def proposed_texts(proposal: Proposal) -> list[tuple[str, str, str]]:
    """(document, key, text) of every decidable entry the proposal brings."""
    out = []
    for document, base, proposed in (
        (MemoryVersion.Document.MEMORY_MD, proposal.base_memory_md, proposal.memory_md),
        (
            MemoryVersion.Document.MEMORY_SUMMARY,
            proposal.base_memory_summary,
            proposal.memory_summary,
        ),
    ):
        base_text = documents.text(base.blob_id) if base and base.blob_id else ""
        for change in review.changed(base_text, proposed):
            if change.status != "removed" and change.proposed:
                out.append((str(document), change.key, change.proposed))
    return out


class CheckRow(NamedTuple):
    """A stored check as cards and decisions read it, without its claims (the evidence
    fold reads those from ``EntryCheck``): a page reads hundreds of them, and a model
    instance each cost five times the query (16 ms for 543 on a 100,000-rollout
    workspace)."""

    document: str
    key: str
    sha256: str
    risk: int
    flags: list
    claim_count: int
    unsupported: int
    tool_only: int
    label_count: int
    labels_missing: int
    judged: JudgeVerdict | None = None

    @classmethod
    def of(cls, check: EntryCheck) -> CheckRow:
        return cls(*(getattr(check, name) for name in cls._fields[:-1]))


Checks = dict[tuple[str, str, str], CheckRow]


def ensure(
    proposal: Proposal,
    extra: Iterable[tuple[str, str, str]] = (),
    *,
    only: tuple[str, str] | None = None,
) -> Checks:
    """Every stored check of the proposal by (document, key, sha256), computing (once)
    those of its proposed entries and of ``extra`` texts (reviewers' edits) that have
    none yet; ``only``: of that one (document, key). Once computed, one query."""
    # The evidence fold loads the claims; the card shows the model judge's verdict.
    rows = proposal.checks.values_list(*CheckRow._fields[:-1], "judged_id")
    texts = [*proposed_texts(proposal), *extra]
    if only is not None:
        rows = rows.filter(document=only[0], key=only[1])
        texts = [t for t in texts if (t[0], t[1]) == only]
    found = list(rows)
    judged = {row[-1] for row in found if row[-1] is not None}
    verdicts = JudgeVerdict.objects.in_bulk(judged) if judged else {}
    stored: Checks = {
        (row[0], row[1], row[2]): CheckRow._make((*row[:-1], verdicts.get(row[-1])))
        for row in found
    }
    wanted = {(d, k, check_key(t)): t for d, k, t in texts}
    missing = {key: text for key, text in wanted.items() if key not in stored}
    if missing:
        stored.update(_compute(proposal, missing))
    return stored


def _compute(proposal: Proposal, texts: dict[tuple[str, str, str], str]) -> Checks:
    cited = {m.group(0) for text in texts.values() for m in CITATION_RE.finditer(text)}
    uncited = any(not CITATION_RE.search(text) for text in texts.values())
    sources = load_sources(proposal, cited, everyone=uncited)
    rows = []
    for (document, key, digest), text in texts.items():
        risk, flags, claims = check_entry(text, sources)
        rows.append(
            EntryCheck(
                proposal=proposal,
                document=document,
                key=key,
                sha256=digest,
                risk=risk,
                flags=flags,
                claims=claims,
                claim_count=sum(1 for c in claims if not c["label"]),
                unsupported=sum(1 for c in claims if not c["supported"] and not c["label"]),
                tool_only=sum(1 for c in claims if c.get("tool_only") and not c["label"]),
                label_count=sum(1 for c in claims if c["label"]),
                labels_missing=sum(1 for c in claims if not c["supported"] and c["label"]),
            )
        )
    # Two requests computing the same check at once store it once.
    EntryCheck.objects.bulk_create(rows, ignore_conflicts=True)
    if GenerationSettings.objects.filter(layout_id=proposal.layout_id, judge_entries=True).exists():
        transaction.on_commit(partial(queue_judge, proposal.pk))
    return {(r.document, r.key, r.sha256): CheckRow.of(r) for r in rows}


def queue_judge(proposal_id: int) -> None:
    """The layout's model judge reads the new texts in a worker (``memoryui.judging``).
    Best effort: without a broker the cards show the rule checks alone."""
    from kombu.exceptions import OperationalError  # noqa: PLC0415 (deferred: Celery loads when a task is sent)

    try:
        task_queue.send("memoryui.tasks.judge_entries", proposal_id)
    except OperationalError as exc:
        log.warning("could not queue the model judge for proposal %s: %s", proposal_id, exc)


def check_of(checks: Checks, document: str, key: str, text: str) -> CheckRow | None:
    return checks.get((document, key, check_key(text))) if text else None


def flagged_keys(proposal: Proposal) -> dict[tuple[str, str], list[dict]]:
    """(document, key) -> flags of every proposed entry that carries a poisoning flag."""
    checks = ensure(proposal)
    return {
        (d, k): checks[(d, k, check_key(t))].flags
        for d, k, t in proposed_texts(proposal)
        if checks[(d, k, check_key(t))].risk
    }


def forget_pending(workspace: Workspace) -> None:
    """Drop the stored checks of the workspace's pending proposals (its allow-list
    changed): they are computed again, with it, when next read."""
    EntryCheck.objects.filter(
        proposal__layout__workspace=workspace, proposal__status=Proposal.Status.PENDING
    ).delete()


def held_entries(proposal: Proposal) -> dict[tuple[str, str], list[dict]]:
    """(document, key) -> flags of the proposal's flagged entries that no reviewer has
    decided: an approval keeps them out, and phase one's files holding their text are
    held back with them."""
    if not proposal.checks.filter(risk__gt=0).exists():
        return {}  # one query: an approval stored every check it kept entries out by
    decided = set(proposal.decisions.values_list("document", "key"))
    return {k: flags for k, flags in flagged_keys(proposal).items() if k not in decided}


# --- agent versions ----------------------------------------------------------------------


def agent_version_flags(version: MemoryVersion) -> list[poison.Flag]:
    """The poisoning flags of the entries an agent's own version (found on disk by an
    import or an upload) adds or changes, against the version before it: the same
    checks as a proposal's, against the rollouts the entries cite (imported, or brought
    by the same upload); an entry citing a summary the workspace does not hold is
    flagged for it."""
    before = entry_lineage.previous_blob_id(version)
    old, new = _text(before), _text(version.blob_id)
    changed = _agent_changes(old, new)
    cited = {m.group(0) for text in changed for m in CITATION_RE.finditer(text)}
    allowed = version.layout.workspace.allowed_hosts()
    sources = _load_workspace(version.layout, cited, Sources(allowed=allowed))
    return [flag for text in changed for flag in _flags(text, sources, require_cited=True)]


def agent_entry_flags(old: str, new: str, sources: Sources) -> list[dict]:
    """``agent_version_flags`` of a change from ``old`` to ``new`` with the ``sources``
    given (the bench and tests: no database)."""
    return [
        _flag_json(flag)
        for text in _agent_changes(old, new)
        for flag in _flags(text, sources, require_cited=True)
    ]


# --- people's edits ----------------------------------------------------------------------


def edit_flags(layout: Layout, text: str) -> list[poison.Flag]:
    """The poisoning flags of a person's edit of an entry of ``layout``'s memory: the
    checks a proposal's entry gets, against the rollouts it cites that the workspace
    holds (their user's and assistant's words) and the workspace's allow-list; a
    citation of a summary the workspace does not hold is flagged."""
    cited = {m.group(0) for m in CITATION_RE.finditer(text)}
    allowed = layout.workspace.allowed_hosts()
    sources = _load_workspace(layout, cited, Sources(allowed=allowed))
    return _flags(text, sources, require_cited=True)


def entry_flags(text: str, sources: Sources) -> list[dict]:
    """``edit_flags`` of ``text`` with the ``sources`` given (the bench and tests: no
    database)."""
    return [_flag_json(flag) for flag in _flags(text, sources, require_cited=True)]


def _agent_changes(old: str, new: str) -> list[str]:
    return [
        change.proposed
        for change in review.compare(old, new, pairing=False)
        if change.status in ("added", "changed")
    ]
