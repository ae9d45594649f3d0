"""``memoryui_client`` as the SDK uses it: awaited without blocking the event loop,
downloads verified before the SDK may empty a workspace, redirects kept to memoryui's
origin, every failure one error type. Real HTTP to a live memoryui, through small local
proxies and servers that misbehave on purpose."""

import asyncio
import hashlib
import http.server
import io
import os
import socket
import tarfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox.errors import SnapshotRestoreError
from agents.sandbox.manifest import Manifest
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.snapshot import RemoteSnapshotSpec
from django.test import Client

from memoryui import tokens
from memoryui_client import MemoryuiError, SnapshotClient
from tests.factories import make_user

SPEC = RemoteSnapshotSpec(client_dependency_key="memoryui")


@pytest.fixture
def store(settings, tmp_path):
    settings.MEMORYUI_REMOTE_STORE_DIR = tmp_path / "store"
    return tmp_path / "store"


@pytest.fixture
def secret(db):
    return tokens.create_token(make_user("ops", staff=True), "sandbox", ["sandbox"]).secret


def workspace_tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def upload_files(url: str, secret: str, snapshot_id: str, files: dict[str, bytes]) -> None:
    remote = SnapshotClient(url, secret, workspace="sandbox")
    asyncio.run(remote.upload(snapshot_id, io.BytesIO(workspace_tar(files))))


THIRTY_SEVEN_FILES = {
    f"notes/file-{i:02d}.md": f"# Note {i}\n\n{'detail ' * 100 * (i % 5 + 1)}\n".encode()
    for i in range(37)
}


def resumed_session(remote: Any, snapshot_id: str, root: Path) -> Any:
    """A sandbox that resumes ``snapshot_id`` from memoryui into ``root``."""
    client = UnixLocalSandboxClient(dependencies=Dependencies().bind_value("memoryui", remote))
    return client.deserialize_session_state(
        {
            "type": "unix_local",
            "snapshot": SPEC.build(snapshot_id).model_dump(),
            "manifest": {"root": str(root)},
        }
    ), client


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class FaultyProxy:
    """A TCP proxy to memoryui that cuts each answer after ``cut_at`` bytes or flips
    the byte at ``flip_at`` (offsets count the status line and headers too)."""

    def __init__(
        self, upstream: str, *, cut_at: int | None = None, flip_at: int | None = None
    ) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.cut_at, self.flip_at = cut_at, flip_at
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.cut = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        up = socket.create_connection(self.upstream)
        threading.Thread(target=_pump, args=(conn, up), daemon=True).start()
        sent = 0
        with conn, up:
            while chunk := up.recv(65536):
                data = bytearray(chunk)
                if self.flip_at is not None and sent <= self.flip_at < sent + len(data):
                    data[self.flip_at - sent] ^= 0xFF
                if self.cut_at is not None and sent + len(data) > self.cut_at:
                    conn.sendall(data[: self.cut_at - sent])
                    self.cut += 1
                    conn.shutdown(socket.SHUT_RDWR)  # close() alone waits for _pump
                    return
                conn.sendall(data)
                sent += len(data)

    def close(self) -> None:
        self.server.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass


class Recorder(http.server.ThreadingHTTPServer):
    """A server on another origin: records every request's headers, answers 200."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append(dict(self.headers))
                body = b'{"exists": true}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Memoryui-Sha256", hashlib.sha256(body).hexdigest())
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Redirector(http.server.ThreadingHTTPServer):
    """Answers every request with a 302 to ``target`` + the same path."""

    def __init__(self, target: str) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", target + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


# --- awaited, never blocking -------------------------------------------------------------


class Watched:
    """The client as the SDK sees it, noting which of its calls is in flight so that a
    ticker can count the ticks that happen meanwhile."""

    def __init__(self, inner: SnapshotClient) -> None:
        self.inner = inner
        self.in_flight = ""
        self.calls: Counter[str] = Counter()

    async def _watch(self, name: str, pending: Any) -> Any:
        self.in_flight = name
        self.calls[name] += 1
        try:
            return await pending
        finally:
            self.in_flight = ""

    def upload(self, snapshot_id: str, data: Any) -> Any:
        return self._watch("upload", self.inner.upload(snapshot_id, data))

    def download(self, snapshot_id: str) -> Any:
        return self._watch("download", self.inner.download(snapshot_id))

    def exists(self, snapshot_id: str) -> Any:
        return self._watch("exists", self.inner.exists(snapshot_id))


@pytest.mark.django_db(transaction=True)
def test_the_event_loop_keeps_ticking_while_the_sdk_persists_and_restores(
    live_server, store, secret, tmp_path
):
    watched = Watched(SnapshotClient(live_server.url, secret, workspace="sandbox"))
    payload = os.urandom(16 * 1024 * 1024)
    ticks: Counter[str] = Counter()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.005)
            if watched.in_flight:
                ticks[watched.in_flight] += 1

    async def scenario() -> str:
        ticking = asyncio.create_task(ticker())
        client = UnixLocalSandboxClient(dependencies=Dependencies().bind_value("memoryui", watched))
        session = await client.create(snapshot=SPEC, manifest=Manifest(root=str(tmp_path / "one")))
        await session.start()
        (tmp_path / "one" / "data.bin").write_bytes(payload)
        await session.aclose()  # persists through the client's upload
        state, client = resumed_session(watched, session.state.snapshot.id, tmp_path / "two")
        resumed = await client.resume(state)
        await resumed.start()  # restores through the client's download
        await resumed.shutdown()
        ticking.cancel()
        return session.state.snapshot.id

    asyncio.run(scenario())

    assert watched.calls["upload"] == 1 and watched.calls["download"] == 1
    assert ticks["upload"] >= 3, ticks
    assert ticks["download"] >= 3, ticks
    assert (tmp_path / "two" / "data.bin").read_bytes() == payload


# --- verified downloads ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_download_carries_its_length_and_sha256(live_server, store, secret):
    upload_files(live_server.url, secret, "s1", THIRTY_SEVEN_FILES)

    response = Client().get(
        "/api/workspaces/sandbox/snapshots/s1", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    body = b"".join(response.streaming_content)

    assert int(response["Content-Length"]) == len(body)
    assert response["X-Memoryui-Sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_a_download_cut_mid_stream_fails_start_and_leaves_the_workspace_untouched(
    live_server, store, secret, tmp_path
):
    upload_files(live_server.url, secret, "s1", THIRTY_SEVEN_FILES)
    root = tmp_path / "live"
    root.mkdir()
    (root / "work.md").write_text("the sandbox's own work, not persisted yet\n")
    before = files_under(root)
    proxy = FaultyProxy(live_server.url, cut_at=23_300)
    remote = SnapshotClient(proxy.url, secret, workspace="sandbox", timeout=60)

    async def start() -> None:
        state, client = resumed_session(remote, "s1", root)
        session = await client.resume(state)
        await session.start()

    with pytest.raises(Exception) as failed:
        asyncio.run(start())
    proxy.close()

    chain = [failed.value]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    assert any(isinstance(e, SnapshotRestoreError) for e in chain), chain
    cause = chain[-1]
    assert isinstance(cause, MemoryuiError), chain
    assert cause.status == 200 and "cut short" in cause.detail
    assert proxy.cut == 1
    assert files_under(root) == before


@pytest.mark.django_db(transaction=True)
def test_a_corrupt_download_raises_and_an_intact_one_through_the_same_proxy_does_not(
    live_server, store, secret
):
    upload_files(live_server.url, secret, "s1", THIRTY_SEVEN_FILES)
    corrupting = FaultyProxy(live_server.url, flip_at=30_000)
    intact = FaultyProxy(live_server.url)

    with pytest.raises(MemoryuiError) as corrupt:
        asyncio.run(SnapshotClient(corrupting.url, secret, workspace="sandbox").download("s1"))
    fine = asyncio.run(SnapshotClient(intact.url, secret, workspace="sandbox").download("s1"))

    assert corrupt.value.status == 200 and "corrupt" in corrupt.value.detail
    with tarfile.open(fileobj=fine) as archive:
        names = [m.name.removeprefix("./") for m in archive.getmembers() if m.isfile()]
    assert sorted(names) == sorted(THIRTY_SEVEN_FILES)


def test_a_download_without_a_checksum_is_refused():
    class Bare(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # a stray server: a body, but no X-Memoryui-Sha256
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    bare = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Bare)
    threading.Thread(target=bare.serve_forever, daemon=True).start()
    remote = SnapshotClient(f"http://127.0.0.1:{bare.server_address[1]}", "t", workspace="w")

    with pytest.raises(MemoryuiError) as refused:
        asyncio.run(remote.download("s1"))
    bare.shutdown()

    assert refused.value.status == 200 and "X-Memoryui-Sha256" in refused.value.detail


# --- redirects and errors ----------------------------------------------------------------


def test_a_redirect_to_another_origin_is_refused_and_the_token_never_reaches_it():
    elsewhere = Recorder()
    redirector = Redirector(elsewhere.url)
    remote = SnapshotClient(redirector.url, "mui_secret_token", workspace="sandbox")

    with pytest.raises(MemoryuiError) as exists:
        asyncio.run(remote.exists("s1"))
    with pytest.raises(MemoryuiError) as download:
        asyncio.run(remote.download("s1"))
    redirector.shutdown()
    elsewhere.shutdown()

    assert exists.value.status == 302 and "another origin" in exists.value.detail
    assert download.value.status == 302
    assert elsewhere.seen == []  # not even asked, so no Authorization header either


def test_a_redirect_within_the_same_origin_is_followed_with_the_token():
    recorder = Recorder()

    class Moved(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/old"):
                self.send_response(301)
                self.send_header("Location", self.path.removeprefix("/old"))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            recorder.seen.append(dict(self.headers))
            body = b'{"exists": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    remote = SnapshotClient(
        f"http://127.0.0.1:{server.server_address[1]}/old", "mui_secret_token", workspace="w"
    )

    assert asyncio.run(remote.exists("s1")) is True
    server.shutdown()
    recorder.shutdown()
    assert recorder.seen[0]["Authorization"] == "Bearer mui_secret_token"


def test_a_server_that_cannot_be_reached_is_a_memoryui_error_without_a_status():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    remote = SnapshotClient(f"http://127.0.0.1:{port}", "t", workspace="sandbox", timeout=5)

    for call in (remote.exists("s1"), remote.download("s1"), remote.upload("s1", io.BytesIO(b"x"))):
        with pytest.raises(MemoryuiError) as failed:
            asyncio.run(call)
        assert failed.value.status is None
        assert str(failed.value).startswith("memoryui could not be reached")
