"""The login lockout's second limit (see ``auth``): per address, across usernames, on top
of axes' per-(username, address) one, and the password reset that clears an account's
failures. Loaded (by axes, ``AXES_HANDLER``, and the URLs) once the apps are ready."""

from __future__ import annotations

from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from axes.utils import reset
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import SetPasswordForm
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from .auth import client_ip


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
