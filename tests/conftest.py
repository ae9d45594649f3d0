import os
import shutil
import subprocess
from pathlib import Path

import pytest
import redis
from django.conf import global_settings
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test.utils import override_settings

from generation import lint
from generation.local_model import LlamaServerError, run_llama_server
from memoryui import download_cache, figures
from memoryui.celery import app
from memoryui.importer import import_workspace
from memoryui.models import GenerationSettings, Layout
from tests.live_server_quiet import tracker_of
from tests.scripted_model import FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent


def fixtures_of(repo: Path) -> Path:
    """The SDK-written fixtures: ``shared/fixtures`` beside the checkout, or, for a clone
    made elsewhere (``git clone /work/main /tmp/x``, a clone of that clone), beside the
    checkout it was cloned from (its ``origin``, followed while it is a folder here)."""
    checkout = repo
    for _ in range(5):
        beside = checkout.parent / "shared" / "fixtures"
        if beside.is_dir():
            return beside
        origin = subprocess.run(
            ["git", "-C", str(checkout), "config", "--get", "remote.origin.url"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        origin = origin.removeprefix("file://")
        if not origin or not Path(origin).is_dir():
            break
        checkout = Path(origin).resolve()
    return repo.parent / "shared" / "fixtures"


FIXTURES = Path(os.environ.get("MEMORYUI_FIXTURES") or fixtures_of(ROOT))
FIXTURE_NAMES = ["small-a", "small-b", "medium-300"]


@pytest.fixture(scope="session", autouse=True)
def fast_password_hasher():
    """Every test user's password is hashed with MD5: the production hasher (PBKDF2) is
    made to be slow, 0.6 s of CPU per user. Subprocesses (commands, workers, gunicorn)
    keep the settings' hashers, whose hashes are still checked here."""

    fast = ["django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS]
    with override_settings(PASSWORD_HASHERS=fast):
        yield


@pytest.fixture(autouse=True)
def live_server_answered_everything(request):
    """A test with a live server ends only when the server has answered what the test's
    pages sent, a leaving page's beacon included: nothing may write while the test
    database is flushed (``tests/live_server_quiet.py``). Set up after the database
    fixture, so it is torn down before the flush."""
    if "live_server" not in request.fixturenames:
        yield
        return
    tracker = tracker_of(request.getfixturevalue("live_server"))
    tracker.start_test()
    yield
    tracker.wait_until_quiet()


@pytest.fixture(autouse=True)
def own_figures():
    """Each test starts with nothing kept in Django's cache (the figures and usage kept
    per import, ``memoryui.figures``): test databases give the same primary keys again,
    and a test that freezes the clock the same import stamps."""
    cache.clear()
    figures.forget_shared()
    yield


@pytest.fixture(autouse=True)
def own_download_cache(tmp_path_factory):
    """Each test keeps its sandbox downloads apart: one test's kept archive is never
    another's (a kept archive is only ever served for the same inputs, but a test that
    counts what a download builds must find nothing built before it)."""
    folder = tmp_path_factory.mktemp("download-cache")
    download_cache.forget_last_map()
    with override_settings(MEMORYUI_DOWNLOAD_CACHE_DIR=folder):
        yield folder


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The SDK-written fixture trees (read-only); the suite cannot run without them."""
    assert FIXTURES.is_dir(), f"shared fixtures not found at {FIXTURES}"
    return FIXTURES


@pytest.fixture
def workspace_copy(tmp_path: Path, fixtures_dir: Path):
    """Copy a fixture workspace into a temporary directory that a test may change."""

    def copy(name: str = "small-a") -> Path:
        target = tmp_path / name / "workspace"
        shutil.copytree(fixtures_dir / name / "workspace", target, symlinks=True)
        return target

    return copy


def writable(path: Path) -> Path:
    """The shared fixtures are read-only: a copy a write-back may change needs write bits."""
    for p in path.rglob("*"):
        p.chmod(p.stat().st_mode | 0o200)
    return path


@pytest.fixture
def ws(db, workspace_copy) -> Path:
    """A writable copy of small-a imported as workspace "a": its directory."""

    path = writable(workspace_copy("small-a"))
    import_workspace(path, "a")
    return path


@pytest.fixture
def layout(ws):
    """The memories/engineering layout of ``ws``, generating one rollout at a time.
    (Some modules define a ``layout`` of their own.)"""

    layout = Layout.objects.select_related("workspace").get(
        workspace__name="a", memories_dir="memories/engineering"
    )
    GenerationSettings.objects.create(layout=layout, concurrency=1)
    return layout


@pytest.fixture
def eager():
    """Tasks sent run at once, in the sender's thread (the live server's, for an
    upload): what a worker would run. Restored however the test ends."""

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


# The Redis database the tests with real Celery workers use as their broker (emptied
# around each test).
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


@pytest.fixture
def broker():

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield REDIS_URL
    client.flushdb()


@pytest.fixture(scope="session")
def llama_server():
    """llama.cpp's OpenAI-compatible server with Gemma 3 270M, for the whole test session."""

    manager = run_llama_server()
    failure = None
    try:
        server = manager.__enter__()
    except LlamaServerError as exc:
        failure = str(exc)
    if failure is not None:  # outside the except: the message once, without a traceback
        pytest.fail(failure, pytrace=False)
    try:
        yield server
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture
def model(settings):
    """The local OpenAI-compatible test server as this deployment's model, over real
    HTTP; no retry waits."""

    with FakeOpenAI() as server:
        settings.OPENAI_API_KEY = ""
        settings.OPENAI_BASE_URL = server.base_url
        settings.MEMORYUI_DEMO_MODEL = "off"
        settings.MEMORYUI_RETRY_BASE_SECONDS = 0
        yield server


# bin/test runs the suite twice: everything on SQLite, then on PostgreSQL the tests that use
# the test database (MEMORYUI_TEST_DATABASE_TESTS_ONLY=1). A test that never touches it
# (parsing, the model client, a deployment that brings its own PostgreSQL database) proves
# the same thing on both runs, so it runs once.
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_setup", "live_server"}


def uses_test_database(item: pytest.Item) -> bool:
    if item.get_closest_marker("django_db") is not None:
        return True
    return bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


def on_postgresql() -> bool:
    return django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


def runs_here(item: pytest.Item) -> bool:
    """A test marked ``postgresql`` is about PostgreSQL's own path (``COPY``, its
    statistics): the SQLite run leaves it to the PostgreSQL run instead of skipping it.
    One marked ``sqlite`` is about SQLite's own path (rows it builds itself from JSON,
    the text it keeps a time as): the PostgreSQL run leaves it to the SQLite run."""
    if item.get_closest_marker("postgresql") is not None and not on_postgresql():
        return False
    if item.get_closest_marker("sqlite") is not None and on_postgresql():
        return False
    if os.environ.get("MEMORYUI_TEST_DATABASE_TESTS_ONLY") == "1":
        return uses_test_database(item)
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = [item for item in items if runs_here(item)]
    dropped = [item for item in items if not runs_here(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def secret_scans(monkeypatch):
    """The paths detect-secrets scans from here on, in order; the in-process lint cache
    is emptied first, as in a new process (clear both to start over)."""
    scanned: list[str] = []
    real_scan = lint.find_secrets

    def counting_scan(path: str, text: str) -> list[lint.Finding]:
        scanned.append(path)
        return real_scan(path, text)

    monkeypatch.setattr(lint, "find_secrets", counting_scan)
    lint._LINT_CACHE.clear()
    lint._SCANNED_LINES.clear()
    return scanned
