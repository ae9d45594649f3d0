"""One presenter for the review: what a proposal's entry card says (its decision,
its approval state, its flags, whether the person viewed it) and how far the review
got. The review page, the single card an htmx action answers with and the JSON API
all read entries through ``card`` and progress through ``progress``, and show a card
through ``page_card`` (the page and the htmx card) or ``card_json`` (the API), so
they cannot disagree."""

from __future__ import annotations

import hashlib
import html
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from django.utils.html import conditional_escape, escape, format_html
from django.utils.safestring import SafeString, mark_safe

from generation import review

from . import diffs, documents, entry_checks
from .models import (
    ApprovedEntry,
    EntryDecision,
    EntryView,
    MemoryVersion,
    Pin,
    Proposal,
    RejectedEntry,
)
from .usage import EntryUsage, usage_of

Document = MemoryVersion.Document
Entry = tuple[str, str]  # (document, key)


def changes(proposal: Proposal, document: str) -> list[review.Change]:
    """One document's changes, from the proposal alone (the comparison is cached, by
    texts: the same objects each time, see ``documents.same_text``)."""
    return review.compare(*_texts(proposal, document))


def changed(proposal: Proposal, document: str) -> tuple[review.Change, ...]:
    """``changes`` without the unchanged entries (kept, like the comparison)."""
    return review.changed(*_texts(proposal, document))


def _texts(proposal: Proposal, document: str) -> tuple[str, str]:
    """One document's base and proposed texts, as the caches know them."""
    if document == Document.MEMORY_MD:
        base, proposed = proposal.base_memory_md, proposal.memory_md
    else:
        base, proposed = proposal.base_memory_summary, proposal.memory_summary
    base_text = documents.text(base.blob_id) if base is not None and base.blob_id else ""
    return base_text, documents.same_text(proposed)


def decidable(proposal: Proposal) -> dict[Entry, review.Change]:
    """Every entry a reviewer decides on, of both documents, in page order."""
    return {
        (document, change.key): change
        for document in (Document.MEMORY_MD, Document.MEMORY_SUMMARY)
        for change in changed(proposal, document)
    }


@dataclass
class Marks:
    """What the cards need from the database, read in a fixed number of queries (for
    every entry of the proposal, or for one ``key``): decisions, the person's views,
    pins, rejections and approvals remembered from earlier proposals. ``lint`` and
    ``stale`` are filled by the page from the proposal's lint findings; ``checks``
    (evidence, provenance and poisoning flags by document, key and sha256 of the text)
    and ``poisoned`` by ``note_checks``."""

    decisions: dict[Entry, EntryDecision]
    viewed: set[Entry]
    pinned: set[Entry]
    rejected_before: set[Entry]
    # Approvals remembered from earlier proposals (the text, and the proposal that
    # approved it), read per entry as cards need them (``need_approvals``): a layout's
    # approvals hold the text of every entry ever approved, megabytes in a large one.
    approved: dict[Entry, tuple[str, int | None]]
    proposal: Proposal | None = None
    approvals_read: set[Entry] = field(default_factory=set)
    lint: set[Entry] = field(default_factory=set)
    stale: set[Entry] = field(default_factory=set)
    checks: entry_checks.Checks = field(default_factory=dict)
    poisoned: set[Entry] = field(default_factory=set)
    # How often agents read the base MEMORY.md entries each card changes or removes
    # (memoryui.usage), by the card's key, read for the cards shown as they need them
    # (``need_usage``): a layout's usage counts every read of every run.
    usage: dict[str, EntryUsage] = field(default_factory=dict)
    usage_read: set[str] = field(default_factory=set)

    def check(self, document: str, change: review.Change) -> entry_checks.CheckRow | None:
        """The check of the text approval would apply: a reviewer's edit, else the
        model's."""
        decision = self.decisions.get((document, change.key))
        edited = decision.edited_text if decision is not None else ""
        return entry_checks.check_of(self.checks, document, change.key, edited or change.proposed)

    def note_checks(
        self, proposal: Proposal, changes: dict[str, list[review.Change]], *, key: str | None = None
    ) -> None:
        """Read (computing what is missing) the checks of ``changes``, reviewers' edits
        included, and mark the entries with a poisoning flag."""
        edits = [
            (document, k, d.edited_text)
            for (document, k), d in self.decisions.items()
            if d.edited_text and (key is None or k == key)
        ]
        only = (next(iter(changes)), key) if key is not None else None
        self.checks = entry_checks.ensure(proposal, edits, only=only)
        # Only entries with a flagged check can be poisoned: those few are looked at,
        # not every change's text hashed to find its check (hundreds a page view).
        flagged = {(d, k) for (d, k, _), row in self.checks.items() if row.risk}
        self.poisoned = set()
        for document, cs in changes.items():
            for c in cs:
                if (document, c.key) in flagged:
                    check = self.check(document, c)
                    if check is not None and check.risk:
                        self.poisoned.add((document, c.key))

    def risk_order(self, document: str, change: review.Change) -> tuple[int, int, int]:
        """Sort key of the risk filter: the strongest flag first, then content found only
        in tool output, then unsupported sentences."""
        check = self.check(document, change)
        if check is None:
            return (0, 0, 0)
        return (-check.risk, -check.tool_only, -check.unsupported)

    def risky(self, document: str, change: review.Change) -> bool:
        """What the risk filter lists: a poisoning flag, content only from tool output,
        or a sentence its evidence does not support."""
        check = self.check(document, change)
        return check is not None and bool(check.risk or check.tool_only or check.unsupported)

    @classmethod
    def load(
        cls,
        proposal: Proposal,
        user: Any,
        *,
        key: str | None = None,
        decisions: dict[Entry, EntryDecision] | None = None,
        rejected: Iterable[Entry] | None = None,
    ) -> Marks:
        """The marks of ``proposal`` for ``user`` (``key``: of that entry only);
        ``decisions`` and ``rejected`` (the entries rejected in the layout's other
        proposals): when the caller has read them already."""

        def only(qs: Any) -> Any:
            return qs.filter(key=key) if key is not None else qs

        if decisions is None:
            decisions = {
                (d.document, d.key): d
                for d in only(
                    EntryDecision.objects.filter(proposal=proposal).select_related("user")
                )
            }
        viewed = only(EntryView.objects.filter(proposal=proposal, user_id=getattr(user, "pk", 0)))
        pins = only(Pin.objects.filter(layout_id=proposal.layout_id))
        if rejected is None:
            rejected = only(
                RejectedEntry.objects.filter(layout_id=proposal.layout_id).exclude(
                    proposal=proposal
                )
            ).values_list("document", "key")
        return cls(
            decisions=decisions,
            viewed=set(viewed.values_list("document", "key")),
            pinned=set(pins.values_list("document", "key")),
            rejected_before=set(rejected),
            approved={},
            proposal=proposal,
        )

    def need_approvals(self, document: str, changes: Iterable[review.Change]) -> None:
        """Read the approvals of ``changes`` (their keys and the keys they were) not read
        yet: one query per 500 keys."""
        self.need_approvals_of({document: changes})

    def need_approvals_of(self, changes: Mapping[str, Iterable[review.Change]]) -> None:
        """``need_approvals`` for the changes of each document, in the same queries."""
        wanted = {(d, k) for d, cs in changes.items() for c in cs for k in (c.key, *c.previous)}
        missing = wanted - self.approvals_read
        self.approvals_read |= wanted
        keys = sorted({k for _, k in missing})
        if self.proposal is None or not keys:
            return
        documents = sorted({d for d, _ in missing})
        for start in range(0, len(keys), 500):
            rows = (
                ApprovedEntry.objects.filter(
                    layout_id=self.proposal.layout_id,
                    document__in=documents,
                    key__in=keys[start : start + 500],
                )
                .exclude(proposal=self.proposal)
                .values_list("document", "key", "text", "proposal_id")
            )
            self.approved.update(
                ((d, k), (text, pk)) for d, k, text, pk in rows if (d, k) in missing
            )

    def need_usage(self, document: str, changes: Iterable[review.Change]) -> None:
        """Read the usage of the base ``MEMORY.md`` entries each of ``changes`` changes
        or removes, for the changes not read yet (three queries, and the text of a
        version not read before)."""
        if document != Document.MEMORY_MD or self.proposal is None:
            return
        groups = {
            c.key: c.previous or (c.key,)
            for c in changes
            if c.key not in self.usage_read and (c.status != "added" or c.previous)
        }
        self.usage_read |= set(groups)
        base = self.proposal.base_memory_md
        if groups and base is not None and base.blob_id:
            self.usage.update(usage_of(self.proposal.layout, base, groups))


@dataclass(frozen=True)
class Card:
    """One entry of a proposal as every view presents it."""

    document: str
    change: review.Change
    decision: EntryDecision | None
    state: str  # "", "accept", "reject" or "edited" (accepted with a person's text)
    approval: str  # "", "approved" (the proposed text is the approved one) or "outdated"
    approved_in: int | None  # the earlier proposal that approved it
    viewed: bool
    flags: dict[str, bool]
    check: entry_checks.CheckRow | None = None
    # How often agents read the entry (or entries) it changes or removes; None for an
    # added entry, and for memory_summary.md (read whole, by injection).
    read: EntryUsage | None = None

    @property
    def edited_text(self) -> str:
        return self.decision.edited_text if self.decision is not None else ""

    @property
    def flagged(self) -> bool:
        return any(self.flags.values())


def card(document: str, change: review.Change, marks: Marks, *, unsupported: bool = False) -> Card:
    """The card of one entry; ``unsupported``: it cites no rollout summary that exists."""
    entry = (document, change.key)
    decision = marks.decisions.get(entry)
    approval, approved_in = approval_state(document, change, marks)
    state = ""
    if decision is not None:
        state = "edited" if decision.edited_text else decision.decision
    return Card(
        document=document,
        change=change,
        decision=decision,
        state=state,
        approval=approval,
        approved_in=approved_in,
        viewed=entry in marks.viewed,
        flags={
            "pinned": entry in marks.pinned,
            "rejected_before": entry in marks.rejected_before,
            "unsupported": unsupported,
            "outdated": approval == "outdated",
            "lint": entry in marks.lint,
            "stale": entry in marks.stale,
            "poisoning": entry in marks.poisoned,
        },
        check=marks.check(document, change),
        read=_read(document, change, marks),
    )


def _read(document: str, change: review.Change, marks: Marks) -> EntryUsage | None:
    if document != Document.MEMORY_MD or (change.status == "added" and not change.previous):
        return None
    marks.need_usage(document, [change])  # read already for a page's cards
    return marks.usage.get(change.key) or EntryUsage()


def approval_state(document: str, change: review.Change, marks: Marks) -> tuple[str, int | None]:
    """ "approved" while the proposed text is the one approved in an earlier proposal;
    "outdated" when an earlier proposal approved the entry and this one changes it
    again. An entry that was only carried along by an approval was not approved."""
    marks.need_approvals(document, [change])  # read already for a page's cards
    for key in (change.key, *change.previous):
        found = marks.approved.get((document, key))
        if found is None:
            continue
        text, proposal_pk = found
        if change.proposed and review.same_text(text, change.proposed):
            return "approved", proposal_pk
        if change.status != "unchanged":
            return "outdated", proposal_pk
    return "", None


def key_slug(key: str) -> str:
    """A short, stable id for an entry key (keys are titles: any text), for anchors."""
    return hashlib.sha1(key.encode()).hexdigest()[:12]


FOLD_LINES = 40
CITES_INLINE = 5


def page_card(
    card: Card,
    *,
    cites: list,
    comments: list,
    place: dict,
    texts: tuple[str, ...] = (),
    duplicates: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What the review page (and the card an htmx action answers with) shows of
    ``card`` besides the card itself: its diff, folds and forms; ``cites``: the
    rollout summaries it cites (exists, url, path, label); ``place``: the filter and
    page its forms go back to; ``texts``: the proposed and the base MEMORY.md (where a
    task finds its group's title); ``duplicates``: the likely duplicates it is part of."""
    document, change = card.document, card.change
    edited = card.edited_text
    applied = edited or change.proposed
    if edited:  # shown whole, in its own fold, under the suggestion
        head, tail, more = edited, "", 0
    elif change.status == "changed":  # the diff shows it
        head, tail, more = "", "", 0
    else:
        head, tail, more = _fold(change.current if change.status == "removed" else applied)
    diff = (  # a task's number is the proposal's on both sides: renumbering is no change
        diffs.side_by_side(
            review.numbered_like(change.current, change.proposed), change.proposed, context=2
        )
        if change.status == "changed"
        else None
    )
    suggestion = diffs.side_by_side(change.proposed, edited, context=2) if edited else None
    shown = (suggestion if suggestion is not None else diff) or []
    folded = len(shown) > FOLD_LINES + 5
    head_rows = shown[:FOLD_LINES] if folded else shown
    tail_rows = shown[FOLD_LINES:] if folded else None
    slug = f"entry-{document}-{key_slug(change.key)}"
    hidden = hidden_inputs(document, change.key, place, short=True)
    anchor_comments(comments, applied)
    at_line = _placed(comments, {r.right_no for r in head_rows if r.kind != "skip"})
    return {
        "card": card,
        "id": slug,
        "hidden": hidden,
        # The query of the folds' links (rendered, evidence, edit, comment): the card's
        # short id, not its key (titles: up to hundreds of characters, four times).
        "entry_query": mark_safe(  # noqa: S308 (quoted: no character left to escape)
            f"entry={quote(document, safe='/')}-{key_slug(change.key)}"
        ),
        "diff_head": diff_html(head_rows, at_line) if head_rows else None,
        "diff_tail": tail_rows,
        "diff_tail_html": diff_html(tail_rows) if tail_rows else None,
        "suggestion": suggestion,
        "applied": applied,
        "head": head,
        "tail": tail,
        "more": more,
        "cites": citations_html(cites),
        # Those not shown at their line in the diff (on the entry, on a line of a text
        # without diff, outdated); "comment_count" counts them all.
        "comments": [c for c in comments if c.at_line not in at_line],
        "comment_count": len(comments),
        "lines": len(applied.splitlines()),
        # A task or section says which task group it is in (proposed, else current).
        "group_title": review.group_title(texts, change.group) if change.group else "",
        # A moved entry: where it was and where it goes, with its neighbours at each.
        "move": _move(change, texts),
        "duplicates": duplicates or [],
        "pinnable": bool(change.current) and change.status != "added",
    }


def hidden_inputs(document: str, key: str, place: dict, *, short: bool = False) -> SafeString:
    """What a card's forms send besides their own fields: the entry (``short``: by its
    card's id, ``<document>-<key_slug(key)>``, which the actions read back as its
    document and key), and the filter and page to go back to (the card's id is derived
    from the entry, ``back_to_review``)."""
    if short:
        hidden = format_html(
            '<input type="hidden" name="entry" value="{}-{}">', document, key_slug(key)
        )
    else:
        hidden = format_html(
            '<input type="hidden" name="document" value="{}"><input type="hidden" name="key" '
            'value="{}">',
            document,
            key,
        )
    if place.get("show"):
        hidden += format_html('<input type="hidden" name="show" value="{}">', place["show"])
    if place.get("page") and str(place["page"]) != "1":
        hidden += format_html('<input type="hidden" name="page" value="{}">', place["page"])
    return hidden


def _move(change: review.Change, texts: tuple[str, ...]) -> dict[str, Any] | None:
    if change.status != "moved" or len(texts) < 2:
        return None
    proposed, base = texts[0], texts[1]
    before, after = review.place_of(base, change.key), review.place_of(proposed, change.key)
    if before is None or after is None:
        return None
    return {"kind": change.kind.replace("_", " "), "from": before, "to": after}


def anchor_comments(comments: list[Any], text: str) -> list[Any]:
    """Each line comment's place in ``text``, the entry as approval would apply it:
    ``at_line``, the line it was made on while that line still reads the same, else
    the first line that reads so; ``outdated`` when no line does (an edit took it
    away). A comment on the whole entry gets neither."""
    lines = text.splitlines()
    for comment in comments:
        comment.at_line, comment.outdated = None, False
        if comment.line is None:
            continue
        if comment.line <= len(lines) and lines[comment.line - 1] == comment.line_text:
            comment.at_line = comment.line
        elif comment.line_text in lines:
            comment.at_line = lines.index(comment.line_text) + 1
        else:
            comment.outdated = True
    return comments


def _placed(comments: list[Any], shown: set[int | None]) -> dict[int, list[Any]]:
    """The comments anchored to a line the diff shows, by that line."""
    out: dict[int, list[Any]] = {}
    for comment in comments:
        if comment.at_line is not None and comment.at_line in shown:
            out.setdefault(comment.at_line, []).append(comment)
    return out


def _line_comments(comments: list[Any]) -> str:
    """The comments of one diff line, as the row the diff shows under it."""
    notes = "".join(
        format_html(
            '<div class="comment"><b>{}</b> <span class="muted">on line {}</span>'
            "<div>{}</div></div>",
            c.author or "someone",
            c.at_line,
            _breaks(c.text),
        )
        for c in comments
    )
    return f'<tr class="line-comments"><td colspan="4">{notes}</td></tr>'


def _breaks(text: str) -> SafeString:
    return mark_safe("<br>".join(escape(line) for line in text.splitlines()))  # noqa: S308 - escaped


def _fold(text: str) -> tuple[str, str, int]:
    """A long block's first ``FOLD_LINES`` lines, the rest, and how many lines that is."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= FOLD_LINES + 5:  # folding five lines away helps nobody
        return text, "", 0
    return "".join(lines[:FOLD_LINES]), "".join(lines[FOLD_LINES:]), len(lines) - FOLD_LINES


def card_json(card: Card) -> dict[str, Any]:
    """The card as the API gives it (``ChangeOut``): the change with a unified diff,
    the decision so far, and the card's state, approval, viewed mark and flags (those
    set, by name)."""
    change, decision = card.change, card.decision
    return {
        "document": card.document,
        "key": change.key,
        "status": change.status,
        "pairing": change.pairing,
        "previous": list(change.previous),
        "kind": change.kind,
        "title": change.title,
        "current": change.current,
        "proposed": change.proposed,
        "diff": diffs.unified(change.current, change.proposed),
        "decision": decision.decision if decision is not None else None,
        "edited_text": card.edited_text,
        "state": card.state,
        "approval": card.approval,
        "viewed": card.viewed,
        "flags": sorted(name for name, on in card.flags.items() if on),
    }


def progress(proposal: Proposal, user: Any, marks: Marks | None = None) -> dict[str, int]:
    """How far the review got: decided entries (accepted, of which edited; rejected),
    undecided ones, and those ``user`` has viewed (deciding an entry views it). Two
    queries, whatever the size of the proposal (none when ``marks`` holds them)."""
    entries = decidable(proposal)
    if marks is None:
        marks = Marks(
            decisions={
                (d.document, d.key): d
                for d in EntryDecision.objects.filter(proposal=proposal).only(
                    "document", "key", "decision", "edited_text"
                )
            },
            viewed=set(
                EntryView.objects.filter(
                    proposal=proposal, user_id=getattr(user, "pk", 0)
                ).values_list("document", "key")
            ),
            pinned=set(),
            rejected_before=set(),
            approved={},
        )
    counts = dict.fromkeys(("accepted", "edited", "rejected", "viewed"), 0)
    for entry in entries:
        decision = marks.decisions.get(entry)
        if decision is not None and decision.decision == EntryDecision.Decision.REJECT:
            counts["rejected"] += 1
        elif decision is not None:
            counts["accepted"] += 1
            counts["edited"] += bool(decision.edited_text)
        counts["viewed"] += entry in marks.viewed
    total = len(entries)
    decided = counts["accepted"] + counts["rejected"]
    files, files_decided = file_progress(proposal)
    return {
        **counts,
        "total": total,
        "decided": decided,
        "undecided": total - decided,
        "not_viewed": total - counts["viewed"],
        "percent": round(100 * decided / (total or 1)),
        "files": files,
        "files_decided": files_decided,
    }


def file_progress(proposal: Proposal) -> tuple[int, int]:
    """The proposal's files decided one by one (skill files it changes, files an
    agent's upload forgot): how many, and how many have a decision. From the
    proposal's own row: no query."""
    outcomes = {EntryDecision.Decision.ACCEPT, EntryDecision.Decision.REJECT}
    skill_decisions = proposal.skill_decisions or {}
    forgotten_decisions = proposal.forgotten_decisions or {}
    skill_files = list(proposal.skill_changes or {})
    forgotten = list(proposal.forgotten or [])
    decided = sum(skill_decisions.get(path) in outcomes for path in skill_files)
    decided += sum(forgotten_decisions.get(path) in outcomes for path in forgotten)
    return len(skill_files) + len(forgotten), decided


def citations_html(cites: list[tuple[bool, str, str, str]]) -> SafeString:
    """The rollout summaries an entry cites, each a link (``exists``) or marked missing,
    folded past ``CITES_INLINE``; "" for none. Built in Python: an entry can cite
    hundreds, and a template's three escaped variables and a condition each, times 25
    cards, were a fifth of the review page's rendering."""
    if not cites:
        return mark_safe("")
    items = "".join(
        f'<li><a class="citation" href="{html.escape(url)}" title="{html.escape(path)}">'
        f"{html.escape(label)}</a></li>"
        if exists
        else f'<li><span class="citation missing">{html.escape(path)} (missing)</span></li>'
        for exists, url, path, label in cites
    )
    listed = f'<ul class="cite-list">{items}</ul>'
    if len(cites) > CITES_INLINE:
        listed = (
            f'<details class="cites-fold"><summary>{len(cites)} cited rollouts</summary>'
            f"{listed}</details>"
        )
    return mark_safe(f'<div class="citations">{listed}</div>')  # noqa: S308 - escaped above


def diff_html(rows: list[Any], comments: dict[int, list[Any]] | None = None) -> SafeString:
    """``memoryui/_diff.html`` for ``rows`` (``diffs.Row``, cells already escaped), byte
    for byte, built in Python: a review page shows some 150 diff rows, a dozen template
    nodes each (``tests/test_review_cards.py`` checks both give the same HTML).
    ``comments``: line comments by the line of the right-hand text they are shown
    under."""
    comments = dict(comments or {})
    out = [
        '<table class="diff">\n<colgroup><col class="no"><col><col class="no"><col>'
        "</colgroup>\n<tbody>\n"
    ]
    for row in rows:
        if row.kind == "skip":
            out.append('<tr class="skip"><td colspan="4">⋯</td></tr>\n')
        else:
            out.append(
                f'<tr class="{escape(row.kind)}"><td class="no">{row.left_no or ""}</td>'
                f'<td class="l">{conditional_escape(row.left)}</td><td class="no">'
                f'{row.right_no or ""}</td><td class="r">{conditional_escape(row.right)}</td>'
                "</tr>\n"
            )
            if row.right_no in comments:
                out.append(_line_comments(comments.pop(row.right_no)))
    if not rows:
        out.append('<tr><td colspan="4" class="muted">No change.</td></tr>\n')
    out.append("</tbody>\n</table>\n")
    return mark_safe("".join(out))  # noqa: S308 - every value escaped above
