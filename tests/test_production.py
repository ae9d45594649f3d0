"""The production setup as separate processes on this machine: the commands of
compose.yaml (migrate, gunicorn, the Celery workers, Celery beat) with DEBUG=0 on PostgreSQL
and Redis, run from a runtime-only environment built as the Dockerfile builds it,
driven over real HTTP like a browser (login with CSRF, import, generate, review, approve,
write back, export, a static file), and /healthz for load balancers.

There is no TLS here, so the HTTPS settings are turned off (SECURE_SSL_REDIRECT=0 and the
secure cookies); everything else is the production configuration. The database is a new
one on the PostgreSQL server of TEST_POSTGRES_URL, the broker TEST_REDIS_URL's Redis db."""

import asyncio
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import requests
import yaml

from memoryui.health import PATH as HEALTHZ
from memoryui_client import SnapshotClient
from tests.scripted_model import FakeOpenAI
from tests.test_snapshot_store import APPROVED_MD, SUMMARY_MD, M, S, raw_memory, rollout
from tests.test_webhooks import Receiver

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()


RUNTIME_ENV = ROOT / "var" / "runtime-venv"


def uv() -> str:
    found = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    assert Path(found).exists(), "uv is needed to build the runtime environment (bin/setup)"
    return found


@pytest.fixture(scope="session")
def runtime_bin() -> Path:
    """The image's environment, built the way the Dockerfile builds it (the locked
    runtime dependencies only, no dev group) into var/runtime-venv; uv's cache makes it
    quick after the first time. Not the test environment: a dependency only the tests
    bring along would hide a missing one."""
    sync = re.search(r"^RUN (uv sync [^\n&]+)", DOCKERFILE, re.M).group(1).split()
    assert sync[:5] == ["uv", "sync", "--frozen", "--no-default-groups", "--no-install-project"]
    flags = [f for f in sync[2:] if f != "--no-cache"]  # the image keeps no cache; we reuse it
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(RUNTIME_ENV)}
    env.pop("VIRTUAL_ENV", None)
    built = subprocess.run(
        [uv(), "sync", *flags, "--exact", "--python", sys.executable],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return RUNTIME_ENV / "bin"


def command(service: str, bin: Path) -> list[str]:
    """A compose service's command, as it runs outside the image (whose PATH starts with
    the runtime environment's bin)."""
    argv = list(COMPOSE["services"][service]["command"])
    return [str(bin / argv[0]), *argv[1:]]


def docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    info = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    return info.returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def database():
    """A new PostgreSQL database for the deployment, dropped afterwards."""
    name = f"memoryui_production_{uuid.uuid4().hex[:8]}"
    server = urlsplit(POSTGRES_URL)
    admin = urlunsplit(server._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield urlunsplit(server._replace(path=f"/{name}"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Deployment:
    def __init__(self, env: dict[str, str], base_url: str, logs: Path) -> None:
        self.env, self.base_url, self.logs = env, base_url, logs
        self.processes: dict[str, subprocess.Popen] = {}
        self.started = time.monotonic()

    def step(self, what: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f} s] {what}")

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        if check:
            assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
        return result

    def start(self, name: str, argv: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.processes[name] = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name)
        if process.poll() is None:
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.logs.glob("*.log"))
        )

    def wait_for(self, condition, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            for name, process in self.processes.items():
                assert process.poll() is None, f"{name} exited waiting for {what}\n{self.log()}"
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.log()}")


@pytest.fixture
def deployment(database, broker, tmp_path, runtime_bin):
    port = free_port()
    model = FakeOpenAI().start()
    (tmp_path / "logs").mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MEMORYUI_", "DJANGO_"))},
        "DEBUG": "0",
        "SECRET_KEY": "production-test-" + uuid.uuid4().hex * 2,
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": database,
        "DATABASE_CONN_MAX_AGE": "60",
        "CELERY_BROKER_URL": broker,
        # No TLS on this machine: the HTTPS-only settings are off, nothing else is.
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "STATIC_ROOT": str(tmp_path / "static"),
        "MEMORYUI_VAR_DIR": str(tmp_path / "var"),
        "MEMORYUI_WORKSPACE_ROOTS": str(tmp_path / "workspaces"),
        "MEMORYUI_SNAPSHOT_BASE_PATH": str(tmp_path / "snapshots"),
        "MEMORYUI_BASE_URL": f"http://127.0.0.1:{port}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "",
        "MEMORYUI_RETRY_BASE_SECONDS": "0",
        "MEMORYUI_OUTBOUND_ALLOW": "127.0.0.1",  # the test's webhook receiver
        "MEMORYUI_HEARTBEAT_SECONDS": "1",
        "MEMORYUI_HEARTBEAT_STALE_SECONDS": "3",
        "WEB_CONCURRENCY": "1",
        "CELERY_WORKER_CONCURRENCY": "2",
    }
    deployed = Deployment(env, f"http://127.0.0.1:{port}", tmp_path / "logs")
    deployed.bin = runtime_bin
    try:
        yield deployed, port
    finally:
        for name in list(deployed.processes):
            deployed.stop(name)
        model.close()


def csrf(session: requests.Session, url: str) -> str:
    page = session.get(url)
    assert page.status_code == 200, page.text[:500]
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)


def test_the_production_setup_serves_the_main_flow_and_reports_its_health(
    deployment, fixtures_dir, tmp_path, request
):
    prod, port = deployment
    base = prod.base_url

    # The image's build step (collectstatic) and compose's one-shot migrate, side by side;
    # then compose's services.
    collectstatic = subprocess.Popen(
        [str(prod.bin / "python"), "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=prod.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    python = str(prod.bin / "python")
    prod.run(*command("migrate", prod.bin))
    assert collectstatic.wait(timeout=120) == 0, collectstatic.stdout.read()
    # Every module the settings name imports in the runtime environment, the Redis
    # transport the workers need included.
    checked = prod.run(python, "manage.py", "check_deployment")
    assert "modules import" in checked.stdout
    web = command("web", prod.bin)
    web[web.index("--bind") + 1] = f"127.0.0.1:{port}"
    prod.start("web", web)
    for service in ("worker", "webhooks", "beat"):
        prod.start(service, command(service, prod.bin))
    prod.step("services started")

    # An operator's commands on the server: import a workspace, create a superuser.
    workspace = tmp_path / "workspaces" / "small-a"
    shutil.copytree(fixtures_dir / "small-a" / "workspace", workspace, symlinks=True)
    for p in [workspace, *workspace.rglob("*")]:  # the fixtures are shared without write bits
        p.chmod(p.stat().st_mode | 0o200)
    imported = prod.run(python, "manage.py", "import_workspace", str(workspace))
    assert imported.stdout.rstrip().endswith(f"{base}/w/small-a/")
    receiver = Receiver().__enter__()
    request.addfinalizer(lambda: receiver.__exit__(None, None, None))
    layout_pk = prod.run(
        python,
        "manage.py",
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from memoryui.models import Layout; "
        "User.objects.create_superuser('admin', '', 'a-long-test-password-42'); "
        "from memoryui.models import Webhook, Workspace; "
        "Webhook.objects.create(workspace=Workspace.objects.get(name='small-a'), "
        f"url='{receiver.url}', secret='whsec_prod', events=['proposal.approved']); "
        "print(Layout.objects.get(workspace__name='small-a', "
        "memories_dir='memories/engineering').pk)",
    ).stdout.split()[-1]
    prod.step("imported")

    def healthz() -> requests.Response | None:
        try:
            return requests.get(base + HEALTHZ, timeout=5)
        except requests.ConnectionError:
            return None

    # Healthy once gunicorn answers and a worker ran beat's heartbeat; no login needed.
    prod.wait_for(lambda: (r := healthz()) is not None and r.status_code == 200, 60, "healthz")
    prod.step("healthy")
    assert healthz().json() == {
        "status": "ok",
        "database": True,
        "migrations": True,
        "broker": True,
        "worker": True,
    }

    s = requests.Session()
    assert s.get(base + "/").url.startswith(base + "/accounts/login/")  # login required
    login = base + "/accounts/login/"
    response = s.post(
        login,
        data={
            "username": "admin",
            "password": "a-long-test-password-42",
            "csrfmiddlewaretoken": csrf(s, login),
        },
        headers={"Referer": login},
    )
    assert response.status_code == 200 and "small-a" in response.text, response.text[:500]
    assert "HttpOnly" in str(response.history[0].headers.get("Set-Cookie", ""))

    # The search vectors of what the import wrote: the import's commit queued a worker's
    # task. Until it ran, the search matches words as typed and says so; after it, word
    # forms too ("promoting" is in no file; "promotion" is, with the same stem).
    rollouts = f"{base}/w/small-a/layouts/{layout_pk}/rollouts/"

    def found_by_word_form() -> bool:
        html = s.get(rollouts, params={"q": "promoting"}).text
        found = re.search(r"(\d+) rollouts? matching", html)
        assert found, html[:500]
        return int(found[1]) > 0 and 'id="search-indexing"' not in html

    prod.wait_for(found_by_word_form, 60, "the search vectors, computed by a worker")
    prod.step("searched")

    # The static file of the pages: hashed, compressed, cached for a year.
    css = re.search(r'href="(/static/memoryui/app\.[0-9a-f]{12}\.css)"', response.text).group(1)
    asset = s.get(base + css, headers={"Accept-Encoding": "gzip"})
    assert asset.status_code == 200 and asset.headers["Content-Type"].startswith("text/css")
    assert "max-age=315360000" in asset.headers["Cache-Control"]
    assert "immutable" in asset.headers["Cache-Control"]
    assert asset.headers.get("Content-Encoding") == "gzip"

    # Generate from the dashboard: the worker runs it against the model server (every
    # rollout extracted again: the SDK already extracted the sample's).
    layout = f"{base}/w/small-a/layouts/{layout_pk}/"
    started = s.post(
        layout + "generation/start/",
        data={"csrfmiddlewaretoken": csrf(s, layout + "generation/"), "reextract": "on"},
        headers={"Referer": layout + "generation/"},
    )
    assert re.search(r"/runs/\d+/$", started.url), started.text[:500]

    def proposal_url() -> str | None:
        found = re.search(
            r'href="(/w/small-a/layouts/\d+/proposals/\d+/)"', s.get(started.url).text
        )
        return found and base + found.group(1)

    review = prod.wait_for(proposal_url, 60, "the run's proposal")
    prod.step("generated")
    page = s.get(review)  # review: the proposal, entry by entry
    assert page.status_code == 200 and "Approve" in page.text

    approved = s.post(
        review + "approve/",
        data={"csrfmiddlewaretoken": csrf(s, review)},
        headers={"Referer": review},
    )
    assert approved.url == layout + "memory/" and "Proposal approved" in approved.text
    receiver.wait(1, timeout=60)  # delivered by the webhooks worker, from its own queue
    _, headers, body = receiver.requests[0]
    assert headers["X-Memoryui-Event"] == "proposal.approved"
    assert json.loads(body)["workspace"] == "small-a"

    # Prometheus scrapes /metrics by address (loopback is allowed by default).
    metrics = requests.get(base + "/metrics", timeout=10)
    assert metrics.status_code == 200
    assert 'memoryui_queue_depth{queue="webhooks"}' in metrics.text
    assert 'memoryui_operations_total{operation="phase_two",outcome="ok"} 1.0' in metrics.text

    writeback = layout + "writeback/"
    written = s.post(
        writeback,
        data={"csrfmiddlewaretoken": csrf(s, writeback), "action": "write"},
        headers={"Referer": writeback},
    )
    assert written.status_code == 200 and "Wrote " in written.text, written.text[-2000:]
    on_disk = (workspace / "memories" / "engineering" / "MEMORY.md").read_text()
    original = fixtures_dir / "small-a" / "workspace" / "memories" / "engineering" / "MEMORY.md"
    assert on_disk != original.read_text()
    title = on_disk.splitlines()[0].removeprefix("# Task Group: ")
    assert title in s.get(layout + "memory/").text

    export = f"{base}/w/small-a/export/"
    archive = s.post(
        export,
        data={
            "csrfmiddlewaretoken": csrf(s, export),
            "snapshot_id": "prod-test",
            "destination": "download",
        },
        headers={"Referer": export},
    )
    assert archive.headers["Content-Type"] == "application/x-tar", archive.text[:500]
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        member = tar.extractfile("./memories/engineering/MEMORY.md")
        assert member.read().decode() == on_disk

    # The command line sees the worker that takes what it queues.
    queued = prod.run(python, "manage.py", "generate", "small-a", "--layout", "memories")
    assert "A worker is listening" in queued.stdout, queued.stdout + queued.stderr

    # A worker gone: beat's heartbeat goes unanswered and /healthz says so, with no detail.
    prod.stop("worker", signal.SIGKILL)
    prod.wait_for(lambda: healthz().status_code == 503, 30, "healthz to fail")
    prod.step("unhealthy without a worker")
    assert healthz().json() == {
        "status": "unavailable",
        "database": True,
        "migrations": True,
        "broker": True,
        "worker": False,
    }

    # No Docker engine here: the image and compose file are checked as text, and the
    # commands above are compose's own.
    if not docker_engine():
        print(
            "Docker is not available on this machine (no engine): compose.yaml's commands "
            "ran as processes above; the Dockerfile and compose.yaml are checked as text."
        )
    assert DOCKERFILE.startswith("#") and "FROM python:3.11-slim" in DOCKERFILE
    user = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "uv sync --frozen --no-default-groups" in DOCKERFILE
    assert "manage.py collectstatic --noinput" in DOCKERFILE
    cmd = json.loads(re.search(r"^CMD (.+)$", DOCKERFILE, re.M).group(1))
    assert cmd == COMPOSE["services"]["web"]["command"]
    services = COMPOSE["services"]
    assert {"web", "worker", "webhooks", "beat", "db", "redis", "migrate"} <= set(services)
    for name in APP_SERVICES:
        assert services[name]["environment"]["DEBUG"] == "0"


APP_SERVICES = [n for n, s in COMPOSE["services"].items() if s.get("image") == "memoryui"]


def compose_environment(service: str, root: Path) -> dict[str, str]:
    """The service's environment as compose would pass it (``${X:-default}`` gives the
    default, a required ``${X:?...}`` a placeholder), with /app/ moved under ``root``
    so that loading the settings here creates nothing outside the test's directory."""
    env = {}
    for key, value in COMPOSE["services"][service]["environment"].items():
        value = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
        value = re.sub(r"\$\{\w+:\?[^}]*\}", "placeholder", value)
        env[key] = value.replace("/app/", f"{root}/app/")
    return env


def depends_on(service: str) -> set[str]:
    """The services ``service`` waits for, directly or through others."""
    direct = set(COMPOSE["services"][service].get("depends_on", {}))
    return direct.union(*(depends_on(s) for s in direct))


def test_compose_shares_every_directory_one_service_writes_and_another_reads(tmp_path):
    """Web saves uploads that a worker imports, a worker journals write-backs that recovery
    (in any process) reads, exports land where the web serves them: each directory the
    settings name as shared must be on one named volume mounted in every app service, and
    the rest (uploads, exports, the remote store) in the object store compose runs."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MEMORYUI_", "DJANGO_"))},
        **compose_environment("web", tmp_path),
    }
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, json; django.setup(); "
            "from memoryui.deployment import object_stores, shared_directories; "
            "print(json.dumps({k: [str(p) for p in v] for k, v in shared_directories().items()}));"
            "print(json.dumps(object_stores()))",
        ],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "memoryui.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    shared, stored = map(json.loads, listed.stdout.splitlines()[-2:])
    assert set(shared) == {"workspaces", "journal"}
    assert stored == {
        "snapshots": "s3://memoryui/exports",
        "uploads": "s3://memoryui/uploads",
        "remote store": "s3://memoryui/snapshots",
    }
    services = COMPOSE["services"]
    endpoint = urlsplit(compose_environment("web", tmp_path)["MEMORYUI_S3_ENDPOINT_URL"])
    assert endpoint.hostname == "minio" and "objects:/data" in services["minio"]["volumes"]
    assert services["worker"]["deploy"]["replicas"] == 2
    assert {n: COMPOSE["services"][n]["environment"] for n in APP_SERVICES}, "no app services"
    for service in APP_SERVICES:
        assert (
            COMPOSE["services"][service]["environment"] == COMPOSE["services"]["web"]["environment"]
        ), f"{service} sees other paths than web"
        assert "bucket" in depends_on(service), f"{service} may start before the bucket exists"
        mounts = {}
        for volume in COMPOSE["services"][service]["volumes"]:
            source, target = volume.split(":")[:2]
            assert source in COMPOSE["volumes"], f"{service}: {source} is not a named volume"
            mounts[Path(target.replace("/app/", f"{tmp_path}/app/"))] = source
        for what, paths in shared.items():
            for path in map(Path, paths):
                on = [m for m in mounts if path == m or m in path.parents]
                assert on, f"{service}: {what} ({path}) is on no shared volume"


def test_the_runtime_environment_has_no_test_tools_and_the_check_names_what_is_missing(
    runtime_bin,
):
    python = str(runtime_bin / "python")
    assert subprocess.run([python, "-c", "import pytest"], capture_output=True).returncode
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MEMORYUI_", "DJANGO_"))},
        "MEMORYUI_VAR_DIR": str(ROOT / "var" / "runtime-check"),
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        "DJANGO_SETTINGS_MODULE": "memoryui.settings",
    }
    script = (
        "import sys; sys.modules['packaging'] = None; "  # as if it were not installed
        "from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', 'check_deployment'])"
    )
    without = subprocess.run(
        [python, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert without.returncode == 1
    assert "cannot import kombu.transport.redis" in without.stderr, without.stderr
    checked = subprocess.run(
        [python, "manage.py", "check_deployment"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    assert "uploads: " in checked.stdout and "journal: " in checked.stdout


BLOB_BYTES, BLOBS = 512 * 1024, 200  # 100 MiB of incompressible workspace files


def big_workspace_archive(path: Path) -> dict[str, str]:
    """A ~100 MiB SDK-like workspace archive written to ``path`` as it streams (random
    file data, three rollouts with the memory phase one and two left); answers each
    file's sha256."""
    files: dict[str, str] = {}

    def add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(f"./{name}")
        info.size, info.mtime, info.mode = len(data), 1_790_000_000, 0o644
        archive.addfile(info, io.BytesIO(data))
        files[name] = hashlib.sha256(data).hexdigest()

    with tarfile.open(path, mode="w") as archive:
        add(archive, "README.md", b"# A large sandbox\n")
        for i in range(BLOBS):
            add(archive, f"data/blob-{i:03}.bin", os.urandom(BLOB_BYTES))
        for rid in ("big-1", "big-2", "big-3"):
            add(archive, f"{S}/{rid}.jsonl", rollout(rid, f"task of {rid}"))
            add(archive, f"{M}/raw_memories/{rid}.md", raw_memory(rid))
            add(archive, f"{M}/rollout_summaries/{rid}_work.md", f"# {rid}\n".encode())
        add(archive, f"{M}/MEMORY.md", APPROVED_MD)
        add(archive, f"{M}/memory_summary.md", SUMMARY_MD)
    return files


def test_a_100_mb_persist_through_gunicorn_answers_and_imports_in_a_worker(deployment, tmp_path):
    """The SDK's persist of a ~100 MiB workspace with the client, to gunicorn with its
    default timeout (30 s): the upload is answered once stored, no worker is killed; the
    import runs in the Celery worker with its progress on the job's page, and the
    snapshot downloads back byte for byte."""
    prod, port = deployment
    web = command("web", prod.bin)
    assert "--timeout" not in web and "GUNICORN_CMD_ARGS" not in prod.env  # the default
    web[web.index("--bind") + 1] = f"127.0.0.1:{port}"
    python = str(prod.bin / "python")
    prod.run(*command("migrate", prod.bin))
    prod.run(python, "manage.py", "collectstatic", "--noinput")  # the image's build step
    prod.start("web", web)
    for service in ("worker", "beat"):
        prod.start(service, command(service, prod.bin))
    secret = prod.run(
        python,
        "manage.py",
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from memoryui import tokens; "
        "u = User.objects.create_superuser('admin', '', 'a-long-test-password-42'); "
        "print(tokens.create_token(u, 'sandboxes', ['big']).secret)",
    ).stdout.split()[-1]
    archive = tmp_path / "big.tar"
    try:
        sent = big_workspace_archive(archive)
        size = archive.stat().st_size
        assert size > 100 * 1024 * 1024
        login = prod.base_url + "/accounts/login/"

        def answering() -> bool:
            try:
                return requests.get(login, timeout=5).status_code == 200
            except requests.ConnectionError:
                return False

        prod.wait_for(answering, 60, "gunicorn")
        store = SnapshotClient(prod.base_url, secret, workspace="big", timeout=120)
        prod.step(f"persisting {size / 2**20:.1f} MiB")
        started = time.monotonic()
        with archive.open("rb") as data:
            answer = asyncio.run(store.upload("sandbox-big", data))
        answered = time.monotonic() - started
        prod.step(f"upload answered in {answered:.1f} s")
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        assert answer["size"] == size and answer["sha256"] == digest
        assert answer["import_status"] in ("queued", "running"), answer
        web_log = (prod.logs / "web.log").read_text(errors="replace")
        assert "WORKER TIMEOUT" not in web_log and "SIGKILL" not in web_log, web_log[-3000:]
        assert re.search(r'"PUT /api/workspaces/big/snapshots/sandbox-big HTTP/1.1" 202', web_log)

        # The import's page, as a person watching it: live until the report opens.
        s = requests.Session()
        s.post(
            login,
            data={
                "username": "admin",
                "password": "a-long-test-password-42",
                "csrfmiddlewaretoken": csrf(s, login),
            },
            headers={"Referer": login},
        )
        progress = prod.base_url + answer["progress_url"]
        seen: list[str] = []

        def report() -> str | None:
            page = s.get(progress, allow_redirects=False, timeout=30)
            if page.status_code == 302:
                return page.headers["Location"]
            assert page.status_code == 200 and 'id="import-error"' not in page.text, page.text
            if '<progress aria-label="import progress">' in page.text:
                status = re.search(r'class="status job-(\w+)"', page.text).group(1)
                files = re.search(r"<dt>Files</dt><dd>([\d,]+)</dd>", page.text).group(1)
                seen.append(f"{status} {files}")
            return None

        done = prod.wait_for(report, 240, "the import")
        prod.step(f"imported; the progress page showed {seen}")
        assert seen and seen[0].split()[0] in ("queued", "running")
        assert re.fullmatch(r"/w/big/imports/\d+/", done), done
        imported = s.get(prod.base_url + done)
        assert imported.status_code == 200 and "big-1" in imported.text

        got = asyncio.run(store.download("sandbox-big"))
        with got, tarfile.open(fileobj=got) as restored:
            back = {
                info.name.removeprefix("./"): hashlib.sha256(
                    restored.extractfile(info).read()  # type: ignore[union-attr]
                ).hexdigest()
                for info in restored
                if info.isreg()
            }
        prod.step("downloaded")
        blobs = {name: sha for name, sha in sent.items() if name.startswith("data/")}
        assert len(blobs) == BLOBS and {n: back.get(n) for n in blobs} == blobs
        assert back["README.md"] == sent["README.md"]
        assert back[f"{S}/big-1.jsonl"] == sent[f"{S}/big-1.jsonl"]
        # Restored again, nothing changed: the archive the web host kept, sent as it is.
        cache = Path(prod.env["MEMORYUI_VAR_DIR"]) / "download-cache"
        [kept] = cache.rglob("*.tar")
        again = asyncio.run(store.download("sandbox-big"))
        with again:
            assert hashlib.sha256(again.read()).hexdigest() == kept.name.split(".")[1]
        assert list(cache.rglob("*.tar")) == [kept]
        prod.step("downloaded again, from the kept archive")
        assert "WORKER TIMEOUT" not in (prod.logs / "web.log").read_text(errors="replace")
    finally:
        archive.unlink(missing_ok=True)
        shutil.rmtree(Path(prod.env["MEMORYUI_VAR_DIR"]) / "remote-store", ignore_errors=True)


def test_compose_gives_every_app_service_django_s_cache_on_its_redis():
    """Live review's early 304 needs one cache for every web process (docs/review.md)."""
    for service in APP_SERVICES:
        url = urlsplit(COMPOSE["services"][service]["environment"]["CACHE_URL"])
        assert (url.scheme, url.hostname) == ("redis", "redis"), service
