"""Slow clients through the shipped web server: gunicorn started with compose.yaml's own
command line (gthread workers, WEB_CONCURRENCY=1 as the README's default), from the
runtime-only environment, on PostgreSQL and Redis (tests/test_production.py's
deployment).

A dashboard upload sent at 10 MB/s for longer than gunicorn's 30 s timeout succeeds, and
20 clients that open a sandbox restore and stop reading neither stop the dashboard nor
another restore; each stalled client is cut off once it has not moved for
``MEMORYUI_CLIENT_STALL_SECONDS``. ``MEMORYUI_TEST_UPLOAD_MB`` sets the upload's size
(the README's 2 GiB measurement: ``MEMORYUI_TEST_UPLOAD_MB=2044``); timings are printed
(``-s``)."""

import hashlib
import http.client
import io
import os
import re
import socket
import tarfile
import threading
import time
import uuid
from pathlib import Path

import requests

from tests.test_production import (  # noqa: F401 (fixtures)
    command,
    csrf,
    database,
    deployment,
    runtime_bin,
)

UPLOAD_MB = int(os.environ.get("MEMORYUI_TEST_UPLOAD_MB", "400"))  # 40 s at 10 MB/s
RATE = 10 * 1000 * 1000  # bytes a second
STALL = 8  # MEMORYUI_CLIENT_STALL_SECONDS here
STALLED = 20
PASSWORD = "a-long-test-password-42"


def archive_of(path: Path, megabytes: int) -> None:
    """A workspace archive of about ``megabytes`` MB: a memory layout and data files of
    random bytes (1 MiB each)."""
    with tarfile.open(path, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mtime, info.mode = len(data), 1_790_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))

        add("memories/engineering/MEMORY.md", b"# Task Group: deploys\n\nscope: deploys\n")
        block = os.urandom(1024 * 1024)
        for i in range(megabytes * 1000 * 1000 // len(block)):
            add(f"data/blob-{i:05}.bin", hashlib.sha256(str(i).encode()).digest() + block[32:])


def throttled_upload(base: str, session: requests.Session, path: Path, name: str):
    """POST ``path`` to the dashboard's upload form as a browser would (multipart, the
    session's cookie and CSRF token), sending at most RATE bytes a second. Returns the
    response and the seconds the body took to send."""
    token = csrf(session, base + "/workspaces/new/")
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="csrfmiddlewaretoken"\r\n\r\n'
        f"{token}\r\n--{boundary}\r\n"
        f'Content-Disposition: form-data; name="name"\r\n\r\n{name}\r\n--{boundary}\r\n'
        f'Content-Disposition: form-data; name="snapshot"; filename="{name}.tar"\r\n'
        "Content-Type: application/x-tar\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = len(head) + path.stat().st_size + len(tail)
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.putrequest("POST", "/workspaces/new/upload/")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    conn.putheader("Content-Length", str(size))
    conn.putheader("Cookie", "; ".join(f"{k}={v}" for k, v in session.cookies.items()))
    conn.putheader("Referer", base + "/workspaces/new/")
    conn.endheaders()
    started = time.monotonic()
    sent = 0
    chunk = RATE // 10
    with path.open("rb") as data:
        for piece in (head, *iter(lambda: data.read(chunk), b""), tail):
            conn.send(piece)
            sent += len(piece)
            ahead = sent / RATE - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    took = time.monotonic() - started
    response = conn.getresponse()
    return response.status, response.getheader("Location"), took


def stalled_restore(port: int, path: str, secret: str) -> socket.socket:
    """A client that asks for a restore, reads the first bytes of the answer, and stops."""
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    client.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secret}\r\n\r\n".encode()
    )
    assert client.recv(4096).startswith(b"HTTP/1.1 200")
    return client


def drained(client: socket.socket, limit: float) -> tuple[int, bool]:
    """Read what the server sent until it closed the connection (or ``limit`` s)."""
    client.settimeout(limit)
    got = 0
    try:
        while chunk := client.recv(1024 * 1024):
            got += len(chunk)
    except (TimeoutError, ConnectionResetError):
        return got, False
    return got, True


def test_slow_uploads_and_stalled_restores_never_hold_the_web_server(deployment, tmp_path):  # noqa: F811
    prod, port = deployment
    prod.env["MEMORYUI_CLIENT_STALL_SECONDS"] = str(STALL)
    base = prod.base_url
    web = command("web", prod.bin)
    assert web[web.index("--worker-class") + 1] == "gthread" and "--timeout" not in web
    web[web.index("--bind") + 1] = f"127.0.0.1:{port}"
    python = str(prod.bin / "python")
    prod.run(*command("migrate", prod.bin))
    prod.run(python, "manage.py", "collectstatic", "--noinput")
    prod.start("web", web)
    for service in ("worker", "beat"):
        prod.start(service, command(service, prod.bin))
    secret = prod.run(
        python,
        "manage.py",
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from memoryui import tokens; "
        f"u = User.objects.create_superuser('admin', '', '{PASSWORD}'); "
        "print(tokens.create_token(u, 'sandboxes', ['slow']).secret)",
    ).stdout.split()[-1]
    archive = tmp_path / "slow.tar"
    archive_of(archive, UPLOAD_MB)
    size = archive.stat().st_size
    login = base + "/accounts/login/"

    def answering() -> bool:
        try:
            return requests.get(login, timeout=5).status_code == 200
        except requests.ConnectionError:
            return False

    prod.wait_for(answering, 60, "gunicorn")
    s = requests.Session()
    s.post(
        login,
        data={"username": "admin", "password": PASSWORD, "csrfmiddlewaretoken": csrf(s, login)},
        headers={"Referer": login},
    )

    # The upload, at 10 MB/s: longer than gunicorn's 30 s timeout.
    prod.step(f"uploading {size / 1e6:.0f} MB at {RATE / 1e6:.0f} MB/s")
    started = time.monotonic()
    try:
        status, location, sending = throttled_upload(base, s, archive, "slow")
    except OSError as exc:
        raise AssertionError(f"the upload was cut off: {exc}\n{prod.log()}") from exc
    answered = time.monotonic() - started
    prod.step(f"body sent in {sending:.1f} s, answered {status} after {answered:.1f} s")
    web_log = (prod.logs / "web.log").read_text(errors="replace")
    assert status == 302 and re.fullmatch(r"/imports/\d+/progress/", location or ""), (
        status,
        web_log,
    )
    assert sending > 30 or UPLOAD_MB < 300
    assert "WORKER TIMEOUT" not in web_log and "SIGKILL" not in web_log, web_log[-3000:]

    def imported() -> bool:
        page = s.get(base + location, allow_redirects=False, timeout=30)
        assert 'id="import-error"' not in page.text, page.text
        return page.status_code == 302

    prod.wait_for(imported, 600, "the import")
    prod.step(f"imported {time.monotonic() - started:.1f} s after the upload started")

    # A workspace as a sandbox persisted it (60 MB: more than the sockets' buffers hold),
    # restored by the SDK client's route.
    small = tmp_path / "restore.tar"
    archive_of(small, 60)
    with small.open("rb") as data:
        put = requests.put(
            base + "/api/workspaces/slow/snapshots/s1",
            data=data,
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/x-tar"},
            timeout=300,
        )
    assert put.status_code == 202, put.text
    restore = "/api/workspaces/slow/snapshots/s1"
    whole = requests.get(base + restore, headers={"Authorization": f"Bearer {secret}"})
    assert whole.status_code == 200 and len(whole.content) > 50_000_000

    # Twenty clients open the restore and stop reading.
    stalled = [stalled_restore(port, restore, secret) for _ in range(STALLED)]
    opened = time.monotonic()
    prod.step(f"{STALLED} restores stalled")
    try:
        took = []
        for _ in range(5):
            t = time.monotonic()
            assert s.get(base + "/", timeout=10).status_code == 200  # the dashboard
            took.append(time.monotonic() - t)
        t = time.monotonic()
        other = requests.get(
            base + restore, headers={"Authorization": f"Bearer {secret}"}, timeout=60
        )
        restored = time.monotonic() - t
        assert other.status_code == 200 and other.content == whole.content
        prod.step(
            f"while stalled: dashboard {max(took):.2f} s at most, another restore {restored:.1f} s"
        )
        assert max(took) < 3 and time.monotonic() - opened < STALL

        # Each stalled client is cut off once it has not moved for STALL seconds.
        results = [None] * STALLED

        def drain(i: int) -> None:
            results[i] = drained(stalled[i], STALL + 30)

        readers = [threading.Thread(target=drain, args=(i,)) for i in range(STALLED)]
        time.sleep(STALL + 2)
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        prod.step(f"stalled clients cut off: {sum(closed for _, closed in results)}")
        assert all(closed and got < len(whole.content) for got, closed in results), results
    finally:
        for client in stalled:
            client.close()
    assert s.get(base + "/", timeout=10).status_code == 200
    web_log = (prod.logs / "web.log").read_text(errors="replace")
    assert "WORKER TIMEOUT" not in web_log, web_log[-3000:]
