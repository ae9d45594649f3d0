"""The login lockout's second limit (see ``auth``): per address, across usernames, on top
of axes' per-(username, address) one, and the password reset that clears an account's
failures. Loaded (by axes, ``AXES_HANDLER``, and the URLs) once the apps are ready."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from axes.utils import reset
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordResetForm, SetPasswordForm
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from .auth import client_ip
from .models import PasswordResetRequest

logger = logging.getLogger(__name__)


def address_failures(ip_address: str | None) -> int:
    """Failed logins from this address within the cool-off, whatever the username."""
    if not ip_address:
        return 0
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    recent = AccessAttempt.objects.filter(ip_address=ip_address, attempt_time__gte=since)
    return recent.aggregate(total=Sum("failures_since_start"))["total"] or 0


class LockoutHandler(AxesDatabaseHandler):
    """Axes' database handler with the per-address limit on top of the per-pair one
    (``AXES_LOCKOUT_PARAMETERS``)."""

    def is_locked(self, request: HttpRequest, credentials: dict | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        address = getattr(request, "axes_ip_address", None) or client_ip(request)
        if address_failures(address) < settings.MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT:
            return False
        request.axes_locked_out = True  # type: ignore[attr-defined]  # the lockout page
        return True


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    """Setting a new password from the e-mailed link also clears the failed logins
    counted against the account (from every address): the person proved who they are."""

    def form_valid(self, form: SetPasswordForm) -> HttpResponse:
        response = super().form_valid(form)
        reset(username=form.user.get_username())
        return response


RESET_WINDOW = timedelta(hours=1)


class ThrottledPasswordResetForm(PasswordResetForm):
    """Mails a reset link to an account at most ``MEMORYUI_PASSWORD_RESET_ACCOUNT_LIMIT``
    times an hour; the page after the form reads the same either way (it never says
    whether an account exists, nor that its mails ran out)."""

    address: str | None = None

    def get_users(self, email: str) -> Any:
        since = timezone.now() - RESET_WINDOW
        for user in super().get_users(email):
            sent = PasswordResetRequest.objects.filter(user=user, created_at__gte=since)
            if sent.count() >= settings.MEMORYUI_PASSWORD_RESET_ACCOUNT_LIMIT:
                logger.warning("password reset for user %s not mailed: hourly limit", user.pk)
                continue
            PasswordResetRequest.objects.create(user=user, address=self.address)
            yield user


class PasswordResetView(auth_views.PasswordResetView):
    """The reset form, sent at most ``MEMORYUI_PASSWORD_RESET_ADDRESS_LIMIT`` times an
    hour from one client address (as the login judges it): then 429."""

    form_class = ThrottledPasswordResetForm

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        address = client_ip(request)
        since = timezone.now() - RESET_WINDOW
        PasswordResetRequest.objects.filter(created_at__lt=since).delete()
        asked = PasswordResetRequest.objects.filter(
            user=None, address=address, created_at__gte=since
        )
        if asked.count() >= settings.MEMORYUI_PASSWORD_RESET_ADDRESS_LIMIT:
            return render(
                request,
                "registration/password_reset_form.html",
                {"form": self.get_form(), "throttled": True},
                status=429,
            )
        PasswordResetRequest.objects.create(address=address)
        return super().post(request, *args, **kwargs)

    def get_form(self, form_class: Any = None) -> Any:
        form = super().get_form(form_class)
        form.address = client_ip(self.request)
        return form
