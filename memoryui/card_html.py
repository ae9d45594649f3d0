"""The review card's HTML that is built in Python, not in the template: the page shows
25 to 200 cards, and the template's tags for a card's header badges, its form and its
evidence line took about a quarter of the review page's CPU (bench/README.md). Each function
gives exactly what the template's ``{% spaceless %}`` gave (``strip_spaces_between_tags``
over the same text), escaping every value; ``templatetags/cards.py`` registers them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.humanize.templatetags.humanize import intcomma
from django.template.defaultfilters import pluralize, truncatechars
from django.template.loader import render_to_string
from django.utils.html import conditional_escape, strip_spaces_between_tags
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import is_aware, localtime

from .review_cards import Card
from .usage import EntryUsage

_DUPLICATE_TITLE = (
    "Cites mostly the same rollouts in mostly the same words as another entry of what "
    "approving makes"
)
_LINT_TITLE = (
    "A lint finding (a secret, instruction-like text, a path into another layout) is in "
    "this entry: a write-back waits for an admin to allow it"
)


def header_html(
    card: Card, row: dict[str, Any], *, can_decide: bool, duplicate_url: str
) -> SafeString:
    """The badges of a card's header (what it is, its flags, its duplicates, its
    approval, how often agents read it, its decision), as the review page shows them."""
    e = conditional_escape
    change, flags = card.change, card.flags
    parts = [
        f'<span class="badge change-{e(change.status)}">{e(change.status)}</span>'
        f'<b class="entry-title">{e(change.title or change.kind)}</b>'
    ]
    if row.get("group_title"):
        parts.append(f'<span class="muted entry-group">in <q>{e(row["group_title"])}</q></span>')
    if flags.get("unsupported"):
        parts.append('<span class="badge warn" title="Cites no rollout summary">unsupported</span>')
    if flags.get("rejected_before"):
        parts.append(
            '<span class="badge bad" title="People rejected this entry before">reintroduced</span>'
        )
    if flags.get("pinned"):
        parts.append(
            '<span class="badge pin" title="Kept verbatim by every consolidation">pinned</span>'
        )
    if flags.get("lint"):
        parts.append(f'<a class="badge bad" href="#lint" title="{_LINT_TITLE}">lint</a>')
    if flags.get("stale"):
        parts.append(
            '<span class="badge warn" title="Every rollout this entry cites is one this '
            'consolidation forgets">stale</span>'
        )
    for dup in row.get("duplicates") or ():
        parts.append(_duplicate_html(dup, row, can_decide=can_decide, url=duplicate_url))
    if card.check is not None and card.check.flags:
        first = card.check.flags[0]
        parts.append(f'<span class="badge bad">poisoning: {e(_field(first, "label"))}</span>')
    if card.approval in ("approved", "outdated"):
        where = f" in proposal #{card.approved_in}" if card.approved_in else ""  # an int
        parts.append(
            f'<span class="badge decision-accept" title="Approved{where}; this proposal keeps '
            'that text">still approved</span>'
            if card.approval == "approved"
            else f'<span class="badge warn" title="Approved{where}; this proposal changes it '
            'again">outdated</span>'
        )
    if card.read is not None:
        parts.append(_read_html(card.read))
    if card.decision is not None:
        decision = card.decision
        edits = " with edits" if decision.edited_text else ""
        parts.append(
            f'<span class="badge decision-{e(decision.decision)}">'
            f"{e(decision.get_decision_display())}{edits} by {e(str(decision.user))}</span>"
        )
    # As the template's {% spaceless %} had it: no whitespace between tags, even where a
    # value (a title of spaces) left only whitespace between them.
    return mark_safe(strip_spaces_between_tags("".join(parts)))  # noqa: S308 (escaped)


def _duplicate_html(dup: dict[str, Any], row: dict[str, Any], *, can_decide: bool, url: str) -> str:
    e = conditional_escape
    ack = dup.get("ack")
    html_ = (
        f'<span class="duplicate-of"><span class="badge {"muted" if ack else "warn"}" '
        f'title="{_DUPLICATE_TITLE}">duplicate</span> of <a href="{e(dup.get("url", ""))}">'
        f"{e(dup.get('title', ''))}</a>"
    )
    if ack:
        label, by = e(dup.get("ack_label", "")), e(dup.get("ack_by", ""))
        html_ += f'<span class="muted small">({label}, {by})</span>'
    if can_decide:
        first, second = e(dup.get("first", "")), e(dup.get("second", ""))
        buttons = (
            '<button type="submit" name="ack" value="" class="link">undo</button>'
            if ack
            else '<button type="submit" name="ack" value="keep">Keep both</button>'
            '<button type="submit" name="ack" value="different">Not a duplicate</button>'
        )
        html_ += (
            f'<form class="inline duplicate-ack" method="post" action="{e(url)}" '
            f'hx-post="{e(url)}" hx-target="#{e(row["id"])}" hx-swap="outerHTML">'
            f'{e(row["hidden"])}<input type="hidden" name="first" value="{first}">'
            f'<input type="hidden" name="second" value="{second}">{buttons}</form>'
        )
    return html_ + "</span>"


def _read_html(used: EntryUsage) -> str:
    if not used.reads:
        return (
            '<span class="badge entry-read warn" title="No imported rollout read the entry '
            'this changes">never read</span>'
        )
    failing = used.read_by_failing_runs
    title = (
        f"Read by {used.runs} run{_s(used.runs)}"
        f"{f' ({failing} failing)' if failing else ''}, last {_day(used.last_read)}"
    )
    return (
        f'<span class="badge entry-read" title="{title}">'
        f"read {_count(used.reads)} time{_s(used.reads)}</span>"
    )


# What the template's filters gave, without their cost on every card (two of them took
# a third of a card's header): ``pluralize``, ``intcomma`` (a number under 1,000 has no
# separator in any locale) and ``date:"Y-m-d"`` in the current time zone.
def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _count(n: int) -> str:
    return str(n) if 0 <= n < 1000 else str(conditional_escape(intcomma(n)))


def _day(when: datetime | None) -> str:
    if when is None:
        return ""
    day = localtime(when) if is_aware(when) else when
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"


def bar_html(
    card: Card,
    row: dict[str, Any],
    *,
    can_decide: bool,
    can_edit: bool,
    urls: dict[str, str],
    csrf_input: str,
) -> SafeString:
    """The card's form: accept, reject and undo (for a reviewer who may decide), viewed,
    and pin (for an editor)."""
    e = conditional_escape
    state, pinned = card.state, bool(card.flags.get("pinned"))
    parts = [
        f'<form class="card-bar" method="post" action="{e(urls.get("decide", ""))}" '
        f'hx-post="{e(urls.get("decide", ""))}">{csrf_input}{e(row["hidden"])}'
    ]
    if can_decide and card.change.status != "unchanged":
        accepted = {"accept": "✓ Accepted", "edited": "✓ Accepted, edited"}.get(state, "Accept")
        parts.append(
            '<div class="entry-actions" role="group" aria-label="Decision">'
            '<button name="decision" value="accept" aria-keyshortcuts="a" aria-pressed="'
            f'{"true" if state in ("accept", "edited") else "false"}" class="decide accept">'
            f"{accepted}</button>"
            '<button name="decision" value="reject" aria-keyshortcuts="r" aria-pressed="'
            f'{"true" if state == "reject" else "false"}" class="decide reject">'
            f"{'✗ Rejected' if state == 'reject' else 'Reject'}</button>"
        )
        if card.decision is not None:
            parts.append(
                f'<button formaction="{e(urls.get("undo", ""))}" class="link" '
                'aria-keyshortcuts="u">Undo</button>'
            )
        parts.append("</div>")
    viewed = card.viewed
    parts.append(
        '<div class="entry-tools">'
        f'<button name="action" value="{"off" if viewed else "on"}" '
        f'formaction="{e(urls.get("viewed", ""))}" class="link" aria-keyshortcuts="v" '
        f'aria-pressed="{"true" if viewed else "false"}">'
        f"{'☑ Viewed' if viewed else '☐ Viewed'}</button>"
    )
    if can_edit and row.get("pinnable"):
        parts.append(
            f'<button name="action" value="{"unpin" if pinned else "pin"}" '
            f'formaction="{e(urls.get("pin", ""))}" class="link" aria-keyshortcuts="p" '
            f'aria-pressed="{"true" if pinned else "false"}">'
            f"{'Unpin' if pinned else 'Pin'}</button>"
        )
    parts.append("</div></form>")
    return mark_safe(strip_spaces_between_tags("".join(parts)))  # noqa: S308 (escaped)


def evidence_html(card: Card, row: dict[str, Any]) -> SafeString:
    """The card's poisoning flags, the model judge's verdict and the evidence line (the
    sentences and the title and keywords checked against what the entry cites)."""
    e = conditional_escape
    check = card.check
    if not check:
        if card.change.status in ("changed", "added"):
            return mark_safe('<p class="evidence muted small">Evidence: not checked yet.</p>')
        return mark_safe("")
    out = ""
    if check.flags:
        quarantined = (
            ""
            if card.decision
            else " — quarantined: approval keeps it out until you accept or reject it"
        )
        flags = "".join(_flag_html(flag) for flag in check.flags)
        # The line break after the text stays, as the template left it there.
        out += (
            '<div class="poison-flags" role="alert"><b>Possible memory poisoning</b>'
            f"{quarantined}\n      <ul>{flags}</ul></div>"
        )
    if check.judged:
        out += render_to_string("memoryui/_judge_verdict.html", {"verdict": check.judged})
    if check.claim_count or check.label_count:
        out += (
            '<details class="evidence" data-fold><summary aria-keyshortcuts="i">'
            f"Evidence: {_evidence_summary(check)}</summary>"
            f'<div class="evidence-body"><a href="evidence/?{e(row["entry_query"])}">'
            "Show each sentence with its evidence</a></div></details>"
        )
    else:
        out += (
            '<p class="evidence muted small">Evidence: nothing to check (no sentence, '
            "title or keyword).</p>"
        )
    return mark_safe(strip_spaces_between_tags(out.strip()))  # noqa: S308 (escaped)


def _flag_html(flag: Any) -> str:
    e = conditional_escape
    excerpt = _field(flag, "excerpt")
    shown = f": <code>{e(truncatechars(excerpt, 160))}</code>" if excerpt else ""
    return (
        f'<li><span class="badge bad">{e(_field(flag, "label"))}</span> '
        f"{e(_field(flag, 'reason'))}{shown}</li>"
    )


def _field(flag: Any, name: str) -> Any:
    """A stored flag's field (a dict from JSON), "" when it has none, as a template's
    lookup gives it."""
    return flag.get(name, "") if isinstance(flag, dict) else getattr(flag, name, "")


def _evidence_summary(check: Any) -> str:
    claims = (
        f"{check.claim_count} sentence{pluralize(check.claim_count)}"
        if check.claim_count
        else "no sentence"
    )
    if check.unsupported:
        claims += f', <span class="bad">{check.unsupported} unsupported</span>'
    if check.tool_only:
        claims += f', <span class="bad">{check.tool_only} from tool output</span>'
    if check.label_count:
        claims += " · title and keywords: " + (
            f'<span class="warn">{check.labels_missing} of {check.label_count} not in what '
            "it cites</span>"
            if check.labels_missing
            else f"all {check.label_count} in what it cites"
        )
    return claims
