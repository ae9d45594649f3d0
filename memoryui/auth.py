"""Login throttling (django-axes): who the client is, when a login is refused, and the
page a locked-out person sees.

The policy: failures are counted per (username, address) pair, so failures from an
attacker's address never lock the real user out from theirs; and per address across all
usernames, with a higher limit, so one address cannot try password after password over
many accounts. Either limit refuses logins for the cool-off (``lockout.LockoutHandler``)."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_ip(request: HttpRequest) -> str | None:
    """The connecting address, or behind ``MEMORYUI_TRUSTED_PROXIES`` proxies the address
    the outermost of them saw (entries before it in X-Forwarded-For are the client's to
    make up)."""
    address = request.META.get("REMOTE_ADDR")
    proxies = settings.MEMORYUI_TRUSTED_PROXIES
    if proxies:
        forwarded = [
            part.strip()
            for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if part.strip()
        ]
        if len(forwarded) >= proxies:
            address = forwarded[-proxies]
    try:
        return str(ipaddress.ip_address(address or ""))
    except ValueError:  # stored in an inet column on PostgreSQL: never garbage
        return None


def login_choices() -> dict[str, object]:
    """What the login page offers: the identity provider's button, and whether the
    password form is for everyone or for staff only."""
    return {
        "oidc_enabled": bool(settings.MEMORYUI_OIDC_ISSUER),
        "oidc_name": settings.MEMORYUI_OIDC_NAME,
        "local_login": settings.MEMORYUI_LOCAL_LOGIN,
    }


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """The login page again, with why the login was refused and until when."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    return render(
        request,
        "registration/login.html",
        {
            "form": AuthenticationForm(
                request, initial={"username": attempt_username(request, credentials) or ""}
            ),
            "locked_out": True,
            "cooloff_minutes": minutes,
            "next": request.POST.get("next", request.GET.get("next", "")),
            **login_choices(),
        },
        status=429,
    )


def attempt_username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """The username a failed login is counted against. A longer one than a username can
    be is nobody's, so it is cut (the admin's login form does not limit it)."""
    if credentials:
        username = credentials.get("username")
    else:
        username = request.POST.get("username")
    return None if username is None else str(username).replace("\x00", "")[:150]


class PasswordBackend(ModelBackend):
    """Django's password login; with ``MEMORYUI_LOCAL_LOGIN`` off (people sign in with the
    identity provider, ``memoryui.signin``), for staff only: the break-glass accounts."""

    def user_can_authenticate(self, user: Any) -> bool:
        if not super().user_can_authenticate(user):
            return False
        return settings.MEMORYUI_LOCAL_LOGIN or bool(user.is_staff or user.is_superuser)
