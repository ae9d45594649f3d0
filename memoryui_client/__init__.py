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
"""

from __future__ import annotations

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


class MemoryuiError(Exception):
    """memoryui refused a request; ``status`` is the HTTP status, ``detail`` its reason."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"memoryui answered {status}: {detail}")
        self.status = status
        self.detail = detail


class SnapshotClient:
    """The remote snapshot client protocol of ``agents.sandbox.snapshot.RemoteSnapshot``:
    ``upload(snapshot_id, data)``, ``download(snapshot_id) -> IOBase``,
    ``exists(snapshot_id) -> bool``, against one workspace of one memoryui."""

    def __init__(self, base_url: str, token: str, *, workspace: str, timeout: float = 300) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.workspace = workspace
        self.timeout = timeout

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
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            body = exc.read()
            exc.close()
            try:
                detail = json.loads(body)["detail"]
            except (ValueError, KeyError, TypeError):
                detail = body.decode("utf-8", "replace")[:500] or exc.reason
            raise MemoryuiError(exc.code, str(detail)) from None

    def upload(self, snapshot_id: str, data: io.IOBase | IO[bytes]) -> dict[str, Any]:
        """Send the archive; answers memoryui's import summary. The archive is spooled
        (in memory up to 8 MB, then to a temporary file) to announce its length."""
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            shutil.copyfileobj(data, spool)
            length = spool.tell()
            spool.seek(0)
            with self._open("PUT", self._url(snapshot_id), spool, length) as response:
                return json.loads(response.read())

    def download(self, snapshot_id: str) -> io.IOBase:
        """The curated snapshot, streamed into a temporary file and rewound (the SDK
        reads the archive with ``tarfile``, which needs to seek)."""
        local = tempfile.TemporaryFile()
        try:
            with self._open("GET", self._url(snapshot_id)) as response:
                shutil.copyfileobj(response, local, CHUNK)
        except BaseException:
            local.close()
            raise
        local.seek(0)
        return local

    def exists(self, snapshot_id: str) -> bool:
        with self._open("GET", self._url(snapshot_id, "/exists")) as response:
            return bool(json.loads(response.read())["exists"])
