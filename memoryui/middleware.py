from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase


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


class HeadAsGetMiddleware:
    """HEAD is answered wherever GET is (RFC 9110: a HEAD gets GET's status and headers,
    without the body): link checkers, monitors and ``curl -I`` then see what a browser
    would, not a 405 from views that accept GET only. The view runs as for GET (GET has no
    side effects here); the body is dropped, its Content-Length kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.method != "HEAD":
            return self.get_response(request)
        request.method = "GET"
        try:
            response = self.get_response(request)
        finally:
            request.method = "HEAD"
        if isinstance(response, StreamingHttpResponse):
            response.close()  # nothing of a streamed body is read
            response.streaming_content = []
        elif isinstance(response, HttpResponse):
            response.content = b""
        return response
