"""The identity provider's sign-in routes (``memoryui.signin``): that module, the OpenID
Connect client and its HTTP and JWT libraries load with the first sign-in, not with the
routes every command may reverse."""

from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse

from ..auth import login_choices


@login_not_required
def start(request: HttpRequest) -> HttpResponse:
    from .. import signin  # noqa: PLC0415 (deferred: the OIDC client loads with a sign-in)

    return signin.start(request)


@login_not_required
def callback(request: HttpRequest) -> HttpResponse:
    from .. import signin  # noqa: PLC0415 (deferred: the OIDC client loads with a sign-in)

    return signin.callback(request)


class LoginView(auth_views.LoginView):
    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **login_choices()}
