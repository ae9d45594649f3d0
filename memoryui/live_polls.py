"""Live review's cheap answer: a review page's poll that finds nothing changed is answered
304 before the session, the user or the database is read.

Each proposal has a *stamp* in Django's cache (Redis where ``CACHE_URL`` names it), a
random word replaced whenever something a review page shows of it changes (an entry's
change row, the proposal's status or reservation, someone moving to another card: see
``memoryui.live_review``). The live endpoint's full answer puts the stamp in its ETag
and hands the page a *poll token*: the endpoint's path, the card the person is at and a
digest of their session cookie, signed (``django.core.signing``, its own salt) with the
time it was made. ``LivePollMiddleware`` answers a poll 304 when its token is valid and
younger than ``TOKEN_SECONDS``, names this path, this card and this session cookie, and
its ``If-None-Match`` carries the current stamp; anything else goes on to the full path
(login, role, the proposal's state). So a person signed out or removed from the workspace
gets at most ``TOKEN_SECONDS`` more of "nothing changed" and never any data, and every
page still takes the full path (which refreshes its presence) at least that often.

The stamp must be shared by every web process, so the early answer is on only with a
shared cache (``MEMORYUI_LIVE_FAST_POLLS``, on by default when ``CACHE_URL`` is set); with the
default per-process memory cache every poll takes the full path."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable

from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified

logger = logging.getLogger(__name__)

# How long a poll token answers 304 without the full path: also how late a page may
# learn of what changes without a stamp (someone's presence expiring, a reservation
# running out), and how long a signed-out or removed member may still be told "nothing
# changed". live_review refreshes a presence at a full poll once it is this old.
TOKEN_SECONDS = 4
TOKEN_HEADER = "X-Live-Token"
_SALT = "memoryui.live-poll"
# A stamp outlives any open page's interest; a missing one is made again.
_STAMP_SECONDS = 24 * 3600


def _key(proposal_pk: int) -> str:
    return f"memoryui:live-stamp:{proposal_pk}"


def stamp(proposal_pk: int) -> str:
    """The proposal's current stamp (made when there is none; "" when the cache fails)."""
    try:
        current = cache.get(_key(proposal_pk))
        if current is None:
            cache.add(_key(proposal_pk), secrets.token_hex(6), _STAMP_SECONDS)
            current = cache.get(_key(proposal_pk))
    except Exception:  # the cache down: the full path answers every poll
        logger.warning("live review: the cache is unavailable", exc_info=True)
        return ""
    return current or ""


def bump(proposal_pk: int) -> None:
    """Something a review page of the proposal shows changed: the next polls go the full
    path. (A cache that fails here is logged; pages catch up within ``TOKEN_SECONDS``.)"""
    try:
        cache.set(_key(proposal_pk), secrets.token_hex(6), _STAMP_SECONDS)
    except Exception:
        logger.warning("live review: the stamp could not be replaced", exc_info=True)


def _session_digest(request: HttpRequest) -> str:
    cookie = request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")
    return hashlib.sha256(cookie.encode()).hexdigest()[:32] if cookie else ""


def token(request: HttpRequest, card: str) -> str:
    """A poll token for this request's path, ``card`` and session cookie."""
    return signing.dumps([request.path, card, _session_digest(request)], salt=_SALT)


def etag(stamp_: str, rest: str) -> str:
    """The endpoint's ETag: the stamp, then what the full path computed."""
    return f'"{stamp_}.{rest}"'


def _unchanged(request: HttpRequest, signed: str) -> bool:
    if not settings.MEMORYUI_LIVE_FAST_POLLS:
        return False
    try:
        path, card, session = signing.loads(signed, salt=_SALT, max_age=TOKEN_SECONDS)
    except (signing.BadSignature, ValueError, TypeError):
        return False
    if path != request.path or card != request.GET.get("at") or not session:
        return False
    if session != _session_digest(request):
        return False
    tag = request.headers.get("If-None-Match", "")
    if not tag.startswith('"') or "." not in tag:
        return False
    pk = path.rstrip("/").split("/")[-2]
    if not pk.isdigit():
        return False
    current = stamp(int(pk))
    return bool(current) and tag[1:].split(".", 1)[0] == current


class LivePollMiddleware:
    """A live review poll with a valid token and the current stamp: 304, nothing read
    but the cache (placed before the session and authentication middleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        signed = request.headers.get(TOKEN_HEADER)
        if signed and request.method == "GET" and _unchanged(request, signed):
            response = HttpResponseNotModified()
            response["ETag"] = request.headers["If-None-Match"]
            response["Cache-Control"] = "private, no-cache"
            return response
        return self.get_response(request)
