from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    """Memory files are model output: even if markup slipped through, the browser runs
    only our own scripts and loads no third-party content (no tracking images)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy and not request.path.startswith("/admin/"):
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
