"""Live review: what a proposal's open review page polls (``proposal_live``: the
entries others changed since it last asked, who is at which card; 304 while nothing
changed), the card it then fetches again (``proposal_live_card``) and what it sends
as it closes (``proposal_live_leave``). The page's side
is ``static/memoryui/live.js``; the state is ``memoryui.live_review``."""

from __future__ import annotations

from datetime import UTC, datetime

from django import forms as django_forms
from django.http import Http404, HttpResponse, HttpResponseNotModified, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from .. import forms, live_polls, live_review
from ..models import Role
from ..review_cards import key_slug
from ..roles import workspace_view
from .common import HtmxHttpRequest, bad_request
from .entry_actions import card_response, invalid
from .review_common import proposal_of


class LiveForm(django_forms.Form):
    """``at``: the card the person is at (an element id of the page, empty for none);
    ``since``: the last change the page has (else ``drawn``: when the page was drawn,
    in seconds since the epoch)."""

    at = django_forms.RegexField(r"^(entry-[a-z_]{1,32}-[0-9a-f]{12})?$", required=False)
    since = django_forms.IntegerField(min_value=0, max_value=2**62, required=False)
    drawn = django_forms.IntegerField(min_value=0, max_value=2**40, required=False)


# A page drawn at second N may have missed a change of the second before.
DRAWN_SLACK_SECONDS = 2


@workspace_view(Role.VIEWER)
@require_GET
def proposal_live(request: HtmxHttpRequest, name: str, layout_pk: int, pk: int) -> HttpResponse:
    """The proposal's live state for its open review page, as JSON: the entries changed
    since the page's last change (``since``) and the cards they are, the other people on
    the page and their cards, the proposal's status and reservation. 304 when the
    page's ETag is still current. Also records which card this person is at, and hands
    the page a new poll token (``X-Live-Token``), with which ``live_polls`` answers its
    next unchanged polls 304 before this view."""
    form = LiveForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=request.workspace)
    data = form.cleaned_data
    since, drawn = data["since"], data["drawn"]
    stamp = live_polls.stamp(pk)  # read first: a change after it replaces it
    live = live_review.state(
        pk,
        request.layout,
        request.user,
        card=data["at"] if "at" in request.GET else None,
        since=since,
        since_time=(
            datetime.fromtimestamp(drawn - DRAWN_SLACK_SECONDS, tz=UTC)
            if since is None and drawn is not None
            else None
        ),
    )
    if live is None:
        raise Http404("No such proposal.")
    etag = live_polls.etag(stamp, live.tag)
    if request.headers.get("If-None-Match", "").strip('"').split(".")[-1] == live.tag:
        response: HttpResponse = HttpResponseNotModified()
    else:
        response = JsonResponse(
            {
                "cursor": live.cursor,
                "status": live.status,
                "status_label": live.status_label,
                "reserved_by": live.reserved_by,
                "people": [{"name": p.name, "card": p.card} for p in live.people],
                "changes": [
                    {"document": d, "key": k, "card": f"entry-{d}-{key_slug(k)}", "n": n}
                    for (d, k), n in live.changes.items()
                ],
                "reload": live.too_many,
            }
        )
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"
    if "at" in request.GET and stamp:
        response[live_polls.TOKEN_HEADER] = live_polls.token(request, data["at"])
    return response


@workspace_view(Role.VIEWER)
@require_GET
def proposal_live_card(
    request: HtmxHttpRequest, name: str, layout_pk: int, pk: int
) -> HttpResponse:
    """One entry's card as it is now (and the progress bar, out of band), for a page
    on which someone else changed it: the card an entry action answers with."""
    proposal = proposal_of(request, pk)
    form = forms.EntryActionForm(request.GET)
    form.fields["anchor"].required = False
    if not form.is_valid():
        return invalid(request, proposal, form)
    document, key = form.cleaned_data["document"], form.cleaned_data["key"]
    return card_response(request, proposal, document, key, form)


@workspace_view(Role.VIEWER)
@require_POST
def proposal_live_leave(
    request: HtmxHttpRequest, name: str, layout_pk: int, pk: int
) -> HttpResponse:
    """The page is closing (``navigator.sendBeacon`` on ``pagehide``, with the CSRF
    token): this person is no longer on it, and the others' pages say so at their next
    poll rather than after ``live_review.PRESENCE_SECONDS``."""
    live_review.leave(pk, request.layout, request.user)
    return HttpResponse(status=204)
