"""A client for memoryui's remote snapshot store, for the OpenAI Agents SDK's
``RemoteSnapshotSpec``. Standard library only (``urllib``): no Django, nothing to install.

    from agents.sandbox.session.dependencies import Dependencies
    from agents.sandbox.snapshot import RemoteSnapshotSpec
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from memoryui_client import SnapshotClient

    store = SnapshotClient("https://memoryui.example.com", token, workspace="support-bot")
    client = UnixLocalSandboxClient(
        dependencies=Dependencies().bind_value("memoryui", store)
    )
    session = await client.create(snapshot=RemoteSnapshotSpec(client_dependency_key="memoryui"))

``upload`` sends the workspace archive the SDK persists, ``download`` returns the curated
snapshot (approved memory applied) as a stream, ``exists`` says whether the id is there.

All three are coroutines: the SDK awaits what its client returns, and the HTTP work runs
in a worker thread (``asyncio.to_thread``), so the sandbox's event loop keeps running.
From synchronous code, ``asyncio.run(store.exists("id"))``.

Every failure raises ``MemoryuiError`` with the HTTP status (``None`` when no answer
arrived: connection refused, timeout, a cut connection). A download is kept only when
its length and sha256 match what the server announced (``Content-Length`` and
``X-Memoryui-Sha256``); a redirect to another origin is refused, so the bearer token is
only ever sent to ``base_url``'s origin.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import io
import json
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Any

__all__ = ["MemoryuiError", "SnapshotClient"]

SPOOL_BYTES = 8 * 1024 * 1024
CHUNK = 1024 * 1024
SHA256_HEADER = "X-Memoryui-Sha256"


class MemoryuiError(Exception):
    """A request to memoryui failed. ``status`` is the HTTP status of the answer (also
    for a download whose body turned out short or corrupt), or ``None`` when no answer
    arrived; ``detail`` says why in words."""

    def __init__(self, status: int | None, detail: str) -> None:
        if status is None:
            super().__init__(f"memoryui could not be reached: {detail}")
        else:
            super().__init__(f"memoryui answered {status}: {detail}")
        self.status = status
        self.detail = detail


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or default


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only within ``base_url``'s origin: urllib would otherwise
    resend the ``Authorization`` header to wherever the server points."""

    def __init__(self, origin: tuple[str, str, int | None]) -> None:
        self.origin = origin

    def redirect_request(  # type: ignore[no-untyped-def]
        self, req, fp, code, msg, headers, newurl
    ):
        target = urllib.parse.urljoin(req.full_url, newurl)
        if _origin(target) != self.origin:
            fp.close()
            scheme, host, port = _origin(target)
            raise MemoryuiError(
                code, f"refused a redirect to another origin ({scheme}://{host}:{port})"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    body = exc.read()
    exc.close()
    try:
        return str(json.loads(body)["detail"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")[:500] or str(exc.reason)


class SnapshotClient:
    """The remote snapshot client protocol of ``agents.sandbox.snapshot.RemoteSnapshot``:
    ``await upload(snapshot_id, data)``, ``await download(snapshot_id) -> IOBase``,
    ``await exists(snapshot_id) -> bool``, against one workspace of one memoryui."""

    def __init__(self, base_url: str, token: str, *, workspace: str, timeout: float = 300) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.workspace = workspace
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_SameOriginRedirects(_origin(self.base_url)))

    def _url(self, snapshot_id: str, suffix: str = "") -> str:
        quote = urllib.parse.quote
        return (
            f"{self.base_url}/api/workspaces/{quote(self.workspace, safe='')}"
            f"/snapshots/{quote(snapshot_id, safe='')}{suffix}"
        )

    def _open(self, method: str, url: str, data: IO[bytes] | None = None, length: int = 0) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        if data is not None:
            headers["Content-Type"] = "application/x-tar"
            headers["Content-Length"] = str(length)
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            return self._opener.open(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise MemoryuiError(exc.code, _error_detail(exc)) from None
        except urllib.error.URLError as exc:
            raise MemoryuiError(None, str(exc.reason)) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise MemoryuiError(None, str(exc) or type(exc).__name__) from exc

    def _json(self, response: Any) -> Any:
        try:
            return json.loads(response.read())
        except ValueError as exc:
            raise MemoryuiError(response.status, "the answer is not JSON") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise MemoryuiError(None, f"the connection broke: {exc}") from exc

    async def upload(self, snapshot_id: str, data: io.IOBase | IO[bytes]) -> dict[str, Any]:
        """Send the archive; answers memoryui's import summary."""
        return await asyncio.to_thread(self._upload, snapshot_id, data)

    async def download(self, snapshot_id: str) -> io.IOBase:
        """The curated snapshot in a temporary file, rewound (the SDK reads it with
        ``tarfile``, which seeks), once its length and sha256 are verified."""
        return await asyncio.to_thread(self._download, snapshot_id)

    async def exists(self, snapshot_id: str) -> bool:
        return await asyncio.to_thread(self._exists, snapshot_id)

    def _upload(self, snapshot_id: str, data: io.IOBase | IO[bytes]) -> dict[str, Any]:
        # Spooled (in memory up to 8 MB, then to a temporary file) to announce its length.
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            shutil.copyfileobj(data, spool)
            length = spool.tell()
            spool.seek(0)
            with self._open("PUT", self._url(snapshot_id), spool, length) as response:
                answer: dict[str, Any] = self._json(response)
                return answer

    def _download(self, snapshot_id: str) -> io.IOBase:
        local = tempfile.TemporaryFile()
        try:
            with self._open("GET", self._url(snapshot_id)) as response:
                _receive_verified(response, local)
        except BaseException:
            local.close()
            raise
        local.seek(0)
        return local

    def _exists(self, snapshot_id: str) -> bool:
        with self._open("GET", self._url(snapshot_id, "/exists")) as response:
            answer = self._json(response)
        try:
            return bool(answer["exists"])
        except (KeyError, TypeError) as exc:
            raise MemoryuiError(response.status, "the answer has no 'exists'") from exc


def _receive_verified(response: Any, local: IO[bytes]) -> None:
    """Copy the body to ``local``; raise MemoryuiError unless it has exactly the
    announced length and sha256."""
    status = response.status
    expected_digest = (response.headers.get(SHA256_HEADER) or "").strip().lower()
    if not expected_digest:
        raise MemoryuiError(status, f"the download has no {SHA256_HEADER} header to verify")
    announced = response.headers.get("Content-Length")
    expected_length = int(announced) if announced and announced.isdigit() else None
    digest = hashlib.sha256()
    received = 0
    try:
        while chunk := response.read1(CHUNK):
            received += len(chunk)
            digest.update(chunk)
            local.write(chunk)
    except http.client.IncompleteRead as exc:
        received += len(exc.partial)
        raise MemoryuiError(status, _cut_short(received, expected_length)) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise MemoryuiError(status, f"the download broke after {received} bytes: {exc}") from exc
    if expected_length is not None and received != expected_length:
        raise MemoryuiError(status, _cut_short(received, expected_length))
    if digest.hexdigest() != expected_digest:
        raise MemoryuiError(
            status, f"the download is corrupt: its sha256 is not the {expected_digest} announced"
        )


def _cut_short(received: int, expected: int | None) -> str:
    return f"the download was cut short: {received} of {expected} bytes arrived"
