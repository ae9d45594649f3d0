"""Sign-in with the company's identity provider (OpenID Connect), and local passwords.

mozilla-django-oidc runs the authorization-code flow (state, nonce and PKCE kept in the
session, each state usable once); this module adds what it leaves out:

- the provider's endpoints come from discovery (``<issuer>/.well-known/openid-configuration``,
  whose ``issuer`` must be the configured one), fetched once an hour;
- the ID token is checked with PyJWT against the provider's published keys: signature,
  issuer, audience (our client id), expiry, issue time, and the nonce of this sign-in;
- people are found by (issuer, subject), never by a username or an e-mail address that a
  local account may share; the first sign-in creates the account (no usable password);
- the groups claim is mapped to workspace roles (``MEMORYUI_OIDC_GROUP_ROLES`` and the
  admin's *Group roles*) at every sign-in: memberships a group gave are changed or taken
  back when the groups change; memberships made by hand are left alone.

The views' routes load this module with the first sign-in (``views/signin.py``); the
password login's backend is ``auth.PasswordBackend``. API tokens go through none of it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from .auth import login_choices
from .models import ROLE_ORDER, AuditEvent, GroupRole, Membership, ProviderIdentity, Role, Workspace

log = logging.getLogger("memoryui.signin")

DISCOVERY_SECONDS = 3600
SIGNING_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


class ProviderUnavailable(Exception):
    """The identity provider could not be asked (down, or not what it says it is)."""


def enabled() -> bool:
    return bool(settings.MEMORYUI_OIDC_ISSUER)


# --- discovery and keys ---------------------------------------------------------------------

_lock = threading.Lock()
_discovered: dict[str, tuple[float, dict[str, Any]]] = {}
_key_clients: dict[str, jwt.PyJWKClient] = {}


def provider() -> dict[str, Any]:
    """The provider's discovery document (cached for an hour)."""
    issuer = settings.MEMORYUI_OIDC_ISSUER
    with _lock:
        cached = _discovered.get(issuer)
    if cached and time.monotonic() - cached[0] < DISCOVERY_SECONDS:
        return cached[1]
    url = issuer + "/.well-known/openid-configuration"
    try:
        answer = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        answer.raise_for_status()
        document = answer.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"could not read {url} ({exc.__class__.__name__})") from exc
    if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != issuer:
        raise ProviderUnavailable(f"{url} names another issuer than {issuer}")
    missing = [
        name
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")
        if not isinstance(document.get(name), str)
    ]
    if missing:
        raise ProviderUnavailable(f"{url} has no {', '.join(missing)}")
    with _lock:
        _discovered[issuer] = (time.monotonic(), document)
    return document


def forget_provider() -> None:
    """Drop the cached discovery documents and keys (tests; a provider that moved)."""
    with _lock:
        _discovered.clear()
        _key_clients.clear()


def _signing_key(token: str) -> Any:
    uri = provider()["jwks_uri"]
    with _lock:
        client = _key_clients.get(uri)
        if client is None:
            client = _key_clients[uri] = jwt.PyJWKClient(
                uri, cache_keys=True, lifespan=300, timeout=settings.OIDC_TIMEOUT
            )
    try:
        return client.get_signing_key_from_jwt(token).key
    except jwt.PyJWKClientConnectionError as exc:
        raise ProviderUnavailable(f"could not read the provider's keys ({exc})") from exc
    except jwt.PyJWTError as exc:
        raise SuspiciousOperation(f"the ID token's key is not the provider's ({exc})") from exc


_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


def oidc_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings, its provider endpoints from discovery."""
    if attr in _ENDPOINTS:
        return provider().get(_ENDPOINTS[attr], *default)
    return import_from_settings(attr, *default)


# --- the role mapping -------------------------------------------------------------------------


def roles_for_groups(groups: list[str]) -> dict[int, str]:
    """{workspace id: the highest role} that these groups give, from the setting (where
    ``*`` is every workspace) and the admin's group roles."""
    wanted: dict[int, str] = {}

    def give(workspace_id: int, role: str) -> None:
        current = wanted.get(workspace_id)
        if current is None or ROLE_ORDER.index(Role(role)) > ROLE_ORDER.index(Role(current)):
            wanted[workspace_id] = role

    names = set(groups)
    by_name: dict[str, list[tuple[str, str]]] = {}
    for group, workspace, role in settings.MEMORYUI_OIDC_GROUP_ROLES:
        if group in names:
            by_name.setdefault(workspace, []).append((group, role))
    if by_name:
        for pk, name in Workspace.objects.values_list("pk", "name"):
            for _, role in by_name.get("*", []) + by_name.get(name, []):
                give(pk, role)
    for workspace_id, role in GroupRole.objects.filter(group__in=names).values_list(
        "workspace_id", "role"
    ):
        give(workspace_id, role)
    return wanted


def apply_group_roles(identity: ProviderIdentity, groups: list[str]) -> None:
    """Make the person's memberships what the groups say: create or change those of
    mapped workspaces, remove those an earlier sign-in gave that no group gives now."""
    user = identity.user
    username = user.get_username()
    wanted = roles_for_groups(groups)
    before = {int(k): v for k, v in identity.granted.items()}
    existing = {m.workspace_id: m for m in Membership.objects.filter(user=user)}
    workspaces = Workspace.objects.in_bulk(set(wanted) | set(before))
    for workspace_id, role in wanted.items():
        membership = existing.get(workspace_id)
        workspace = workspaces[workspace_id]
        if membership is None:
            Membership.objects.create(workspace=workspace, user=user, role=role)
            AuditEvent.record(
                workspace, "member.add", actor="sign-in", target=username, role=role, groups=groups
            )
        elif membership.role != role:
            old, membership.role = membership.role, role
            membership.save(update_fields=["role"])
            AuditEvent.record(
                workspace,
                "member.role",
                actor="sign-in",
                target=username,
                before=old,
                role=role,
                groups=groups,
            )
    for workspace_id in before:
        membership = existing.get(workspace_id)
        if workspace_id in wanted or membership is None or workspace_id not in workspaces:
            continue
        membership.delete()
        AuditEvent.record(
            workspaces[workspace_id],
            "member.remove",
            actor="sign-in",
            target=username,
            role=membership.role,
            groups=groups,
        )
    identity.granted = {str(k): v for k, v in wanted.items()}
    identity.last_sign_in = timezone.now()
    identity.save(update_fields=["granted", "last_sign_in"])
    user._memoryui_roles = None  # type: ignore[attr-defined]


# --- the backends -----------------------------------------------------------------------------


def _username(claims: dict[str, Any]) -> str:
    """A free username from the claims: preferred_username, else the e-mail's local part,
    else the subject; ``-2``, ``-3`` ... after it when a local account has it already."""
    raw = (
        claims.get("preferred_username")
        or str(claims.get("email") or "").split("@")[0]
        or claims["sub"]
    )
    base = re.sub(r"[^\w.@+-]", "-", str(raw))[:140].strip("-") or "user"
    User = get_user_model()
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


class ProviderBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with discovery, full ID-token checks, accounts keyed
    by (issuer, subject) and the role mapping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Endpoints are looked up when a sign-in needs them, not whenever Django loads
        # the backends (every password login does).
        self.UserModel = get_user_model()

    get_settings = staticmethod(oidc_setting)
    OIDC_RP_IDP_SIGN_KEY = None

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:  # noqa: N802 (the library's attribute name)
        return settings.OIDC_RP_CLIENT_ID

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:  # noqa: N802
        return settings.OIDC_RP_CLIENT_SECRET

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802
        return provider()["token_endpoint"]

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str | None:  # noqa: N802
        return provider().get("userinfo_endpoint")

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        if not enabled() or request is None or "code" not in request.GET:
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's signature, issuer, audience, expiry and nonce, or refused."""
        if not isinstance(token, str) or not token:
            raise SuspiciousOperation("the provider sent no ID token")
        try:
            claims = jwt.decode(
                token,
                _signing_key(token),
                algorithms=SIGNING_ALGORITHMS,
                audience=settings.OIDC_RP_CLIENT_ID,
                issuer=provider()["issuer"],
                leeway=settings.MEMORYUI_OIDC_CLOCK_SKEW_SECONDS,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise SuspiciousOperation("the ID token has expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise SuspiciousOperation("the ID token was issued to another client") from exc
        except jwt.InvalidIssuerError as exc:
            raise SuspiciousOperation("the ID token names another issuer") from exc
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"the ID token is not valid ({exc})") from exc
        if "nonce" in kwargs and claims.get("nonce") != kwargs["nonce"]:
            raise SuspiciousOperation("the ID token's nonce is not this sign-in's (a replay?)")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: dict) -> dict[str, Any]:
        """The ID token's claims, completed by the userinfo endpoint's for the same subject."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT and access_token:
            info = super().get_userinfo(access_token, id_token, payload)
            if isinstance(info, dict) and info.get("sub") == payload["sub"]:
                claims.update({k: v for k, v in info.items() if k not in ("iss", "aud")})
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(
            provider_identity__issuer=settings.MEMORYUI_OIDC_ISSUER,
            provider_identity__subject=str(claims["sub"]),
        )

    def create_user(self, claims: dict[str, Any]) -> Any:
        with transaction.atomic():
            user = self.UserModel.objects.create_user(
                _username(claims), email=str(claims.get("email") or "")
            )
            identity = ProviderIdentity.objects.create(
                user=user, issuer=settings.MEMORYUI_OIDC_ISSUER, subject=str(claims["sub"])
            )
            apply_group_roles(identity, _groups(claims))
        log.info("signin.created user=%s subject=%s", user.get_username(), claims["sub"])
        return user

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        with transaction.atomic():
            email = str(claims.get("email") or "")
            if email and email != user.email:
                user.email = email
                user.save(update_fields=["email"])
            apply_group_roles(user.provider_identity, _groups(claims))
        return user


def _groups(claims: dict[str, Any]) -> list[str]:
    value = claims.get(settings.MEMORYUI_OIDC_GROUPS_CLAIM) or []
    if isinstance(value, str):
        value = [value]
    return sorted({str(g) for g in value if isinstance(g, str | int)})


# --- the views --------------------------------------------------------------------------------


def refused(request: HttpRequest, reason: str, status: int = 403) -> HttpResponse:
    """The login page again, saying why the provider's sign-in did not sign anyone in."""
    log.warning("signin.refused reason=%r", reason)
    return render(
        request,
        "registration/login.html",
        {"signin_error": reason, "next": "", **login_choices()},
        status=status,
    )


class StartView(OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)


USED = "this sign-in was already used, has expired or was started in another browser; sign in again"


class CallbackView(OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        state = request.GET.get("state")
        if "code" in request.GET and state not in request.session.get("oidc_states", {}):
            # Each state is used once, in the browser that started the sign-in.
            return refused(request, f"Sign-in refused: {USED}.")
        try:
            return super().get(request)
        except SuspiciousOperation as exc:
            return refused(request, f"Sign-in refused: {exc}.")
        except (ProviderUnavailable, requests.RequestException) as exc:
            return refused(request, f"The identity provider could not be reached: {exc}.", 502)

    def login_failure(self) -> HttpResponse:
        error = self.request.GET.get("error_description") or self.request.GET.get("error")
        reason = f"the identity provider answered: {error}" if error else "no account"
        return refused(self.request, f"Sign-in refused: {reason}.")


def start(request: HttpRequest) -> HttpResponse:
    """Send the browser to the provider (with state, nonce and a PKCE challenge)."""
    if not enabled():
        raise Http404("Sign-in with an identity provider is not set up.")
    try:
        provider()
    except ProviderUnavailable as exc:
        return refused(request, f"The identity provider could not be reached: {exc}.", 502)
    return StartView.as_view()(request)


def callback(request: HttpRequest) -> HttpResponse:
    if not enabled():
        raise Http404("Sign-in with an identity provider is not set up.")
    return CallbackView.as_view()(request)
