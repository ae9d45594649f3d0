"""Wait, before a browser test's database is flushed, until the live server has
answered every request the test's pages made.

A page that leaves (closed, navigated away) still talks to the server: the live
review's ``pagehide`` beacon arrives after the test's last line. On PostgreSQL a request
that writes while the teardown's ``TRUNCATE`` runs can deadlock it, and the next test
then starts on the tables it left behind. The live server's application is wrapped once
to count the requests under way; the teardown waits for none, and, when the test opened
a page of the live review, for a quiet spell long enough for its leave beacon to land."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# A beacon is queued as the page goes; it lands within milliseconds on an idle machine.
QUIET_SECONDS = 0.5
LONGEST_WAIT_SECONDS = 15.0


class _Answered:
    """A response body that tells the tracker when the server has finished with it."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self.body = body
        self.done = done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.done()


class RequestTracker:
    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.changed = threading.Condition()
        self.under_way = 0
        self.last_activity = 0.0
        self.live_review_seen = False

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with self.changed:
            self.under_way += 1
            self.last_activity = time.monotonic()
            if "/live/" in environ.get("PATH_INFO", ""):
                self.live_review_seen = True
        try:
            body = self.app(environ, start_response)
        except BaseException:
            self._finished()
            raise
        return _Answered(body, self._finished)

    def _finished(self) -> None:
        with self.changed:
            self.under_way -= 1
            self.last_activity = time.monotonic()
            self.changed.notify_all()

    def start_test(self) -> None:
        with self.changed:
            self.live_review_seen = False

    def wait_until_quiet(self) -> None:
        deadline = time.monotonic() + LONGEST_WAIT_SECONDS
        with self.changed:
            while True:
                now = time.monotonic()
                quiet_for = now - self.last_activity
                settled = self.under_way == 0 and (
                    not self.live_review_seen or quiet_for >= QUIET_SECONDS
                )
                if settled or now >= deadline:
                    return
                wait = QUIET_SECONDS - quiet_for if self.under_way == 0 else deadline - now
                self.changed.wait(timeout=max(0.01, min(wait, deadline - now)))


def tracker_of(live_server: Any) -> RequestTracker:
    """The live server's tracker, wrapped around its application the first time."""
    httpd = live_server.thread.httpd
    app = httpd.get_app()
    if not isinstance(app, RequestTracker):
        app = RequestTracker(app)
        httpd.set_app(app)
    return app
