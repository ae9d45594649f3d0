"""The API's one convention: bearer tokens, the caller's workspace role as in the
browser, ``{"detail": ...}`` error bodies, ``limit``/``offset`` pages of
``{"count", "items"}``."""

from __future__ import annotations

import functools
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from ninja import Field, NinjaAPI, Schema, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.operation import Operation
from ninja.pagination import LimitOffsetPagination
from ninja.security import HttpBearer

from .. import tokens
from ..models import ApiToken, Layout, Role, Workspace
from ..roles import require_role


class TokenAuth(HttpBearer):
    """``Authorization: Bearer <token>``: a personal API token, active, of an active
    person. The request then acts as that person."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        found = tokens.authenticate(token)
        if found is not None:
            request.user = found.user
            request.api_token = found  # type: ignore[attr-defined]
        return found


def signed_in_or_token(view: Any) -> Any:
    """The schema and the docs, like every page, only for people signed in to the
    dashboard or callers with a valid API token: the browser is sent to the login page,
    anything else gets the API's 401."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
        if request.user.is_authenticated or (
            scheme.lower() == "bearer" and tokens.authenticate(secret.strip()) is not None
        ):
            return view(request, *args, **kwargs)
        if request.path.endswith("/openapi.json"):
            response = JsonResponse(
                {"detail": "Sign in to the dashboard or send Authorization: Bearer <token>."},
                status=401,
            )
            response["WWW-Authenticate"] = "Bearer"
            return response
        return redirect_to_login(request.get_full_path())

    return wrapper


class LocalSwagger(Swagger):
    """Swagger UI from django-ninja's own files, no CDN. Ninja renders that page only
    when it is an installed app, which it is not (see the settings): its other page,
    the template given here, is the same local one."""

    template_cdn = str(settings.NINJA_DIR / "templates" / "ninja" / "swagger.html")


ENDPOINTS = f"{__package__}.endpoints"


class API(NinjaAPI):
    def get_openapi_operation_id(self, operation: Operation) -> str:
        """The ids the schema gave the endpoints when they were one module
        (``memoryui_api_endpoints_<view>``), now that ``endpoints`` is a package of
        modules by purpose: clients generated from the schema call them by these."""
        view = operation.view_func
        if view.__module__.startswith(f"{ENDPOINTS}."):
            return f"{ENDPOINTS}.{view.__name__}".replace(".", "_")
        return super().get_openapi_operation_id(operation)


api = API(
    title="memoryui API",
    version="1",
    description=(
        "Everything the dashboard does, as JSON. Authenticate with a personal API token "
        "(created on the dashboard's API tokens page) as `Authorization: Bearer <token>`. "
        "A token acts as its owner, with the owner's role, in the workspaces it names only.\n\n"
        'Errors are `{"detail": "<message>"}` (422 adds `errors`: one per invalid '
        "field). Lists take `limit` (1-200, default 50) and `offset` and answer "
        '`{"count": <total>, "items": [...]}`.'
    ),
    auth=TokenAuth(),
    urls_namespace="api",
    docs=LocalSwagger(),
    docs_url="/docs",
    openapi_url="/openapi.json",
    docs_decorator=signed_in_or_token,
)


def _error(request: HttpRequest, status: int, detail: str, **extra: Any) -> HttpResponse:
    return api.create_response(request, {"detail": detail, **extra}, status=status)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, str(exc) or "Not found.")


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return _error(request, 403, str(exc) or "Not allowed.")


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = _error(
        request,
        401,
        "A valid API token is needed: Authorization: Bearer <token> "
        "(it may have expired or been revoked).",
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {
            "field": ".".join(
                str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")
            ),
            "message": e.get("msg", "invalid"),
        }
        for e in exc.errors
    ]
    summary = "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errors)
    return _error(request, 422, f"Invalid input: {summary}", errors=errors)


@api.exception_handler(RequestDataTooBig)
def _too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    """A body past DATA_UPLOAD_MAX_MEMORY_SIZE: 413 with the limit, also with DEBUG on
    (where ninja would answer 500 with a traceback)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _error(
        request,
        413,
        f"The request body is larger than the {limit:,} bytes the API accepts "
        "(snapshots go to the snapshot store's upload endpoint, which streams).",
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return _error(request, exc.status_code, exc.message)


def workspace(request: HttpRequest, name: str, role: Role) -> Workspace:
    """The workspace, if the token names it and its owner has ``role`` there. 404 as for
    a page when the caller may not see it, 403 for a missing role."""
    token = getattr(request, "api_token", None)
    found = Workspace.objects.filter(name=name).first()
    if found is None or not tokens.in_scope(token, name):
        raise Http404("No such workspace (or the token does not name it).")
    require_role(request.user, found, role)
    return found


def layout(request: HttpRequest, name: str, layout_id: int, role: Role) -> Layout:
    ws = workspace(request, name, role)
    found = get_object_or_404(
        Layout.objects.select_related("workspace"), pk=layout_id, workspace=ws
    )
    return found


def conflict(message: str) -> HttpError:
    return HttpError(409, message)


def conflict_422(message: str) -> HttpError:
    return HttpError(422, message)


class Detail(Schema):
    detail: str


ERRORS = {401: Detail, 403: Detail, 404: Detail, 409: Detail, 422: Detail}

DocumentName = Literal["memory_md", "memory_summary"]
SNAPSHOT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class Pages(LimitOffsetPagination):
    class Input(Schema):
        limit: int = Field(50, ge=1, le=200, description="items per page, 1-200")
        offset: int = Field(0, ge=0, description="items to skip")


class Mapped:
    """A queryset whose slices are mapped (so the paginator counts and slices in SQL)."""

    def __init__(self, queryset: Any, fn: Any) -> None:
        self.queryset, self.fn = queryset, fn

    def all(self) -> Mapped:
        return self

    def count(self) -> int:
        return int(self.queryset.count())

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, index: Any) -> list[Any]:
        return [self.fn(x) for x in self.queryset[index]]
