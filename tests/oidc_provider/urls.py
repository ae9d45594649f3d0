"""The provider's routes: django-oauth-toolkit's (under /o/: discovery, authorize, token,
userinfo, JWKS), a login page, and /testing/ endpoints with which a test makes people,
puts them in groups, and makes the provider misbehave (a wrong audience, an expired token,
an old nonce) to show that memoryui refuses what it then signs."""

import json
import time
from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.models import Group, User
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from oauth2_provider.oauth2_validators import OAuth2Validator

# What the next ID tokens get instead of the right claims ({"aud": ..., "exp": ...,
# "nonce": ...}); a test sets and clears it.
QUIRKS: dict[str, Any] = {}


class Validator(OAuth2Validator):
    oidc_claim_scope = None  # every claim below in every token (groups has no OIDC scope)

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "name": user.get_full_name() or user.username,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }

    def get_id_token_dictionary(self, token, token_handler, request):
        claims, expiration = super().get_id_token_dictionary(token, token_handler, request)
        quirks = dict(QUIRKS)
        if "exp_offset" in quirks:
            claims["exp"] = int(time.time()) + int(quirks.pop("exp_offset"))
        claims.update(quirks)  # aud, nonce: these replace what oauthlib put in
        return claims, expiration


@csrf_exempt
def testing_user(request: HttpRequest) -> JsonResponse:
    """POST {"username", "password", "email", "groups": [...]}: make or change a person."""
    data = json.loads(request.body)
    user, _ = User.objects.get_or_create(username=data["username"])
    user.email = data.get("email", "")
    user.set_password(data["password"])
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in data["groups"]])
    return JsonResponse({"sub": str(user.pk)})


@csrf_exempt
def testing_quirks(request: HttpRequest) -> JsonResponse:
    QUIRKS.clear()
    QUIRKS.update(json.loads(request.body))
    return JsonResponse(QUIRKS)


urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view()),
    path("testing/user", testing_user),
    path("testing/quirks", testing_quirks),
]
