"""What a new user meets in the first hour, as they meet it: the demo's proposals, whose
citations of the summaries their own run wrote open those summaries (pending, from the
proposal); the demo login kept across restarts; HEAD answered wherever GET is; every
configuration error one line naming its setting, whichever process reads it (manage.py, the
Celery worker and beat, gunicorn); the local model's server deaf to the dashboard's PORT and
HOST."""

import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from generation import local_model
from memoryui import pipeline
from memoryui.demo import prepare_demo_workspace
from memoryui.models import Layout, Proposal
from tests.factories import make_user
from tests.test_bin_scripts import free_port, listening

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def demo_layout(settings, tmp_path, db):
    """The demo as bin/start sets it up: a copy of the sample, the offline demo model."""
    settings.VAR_DIR = tmp_path / "var"
    settings.MEMORYUI_WORKSPACE_ROOTS = [(tmp_path / "var" / "workspaces").resolve()]
    settings.MEMORYUI_DEMO_MODEL = "offline"
    workspace = prepare_demo_workspace()
    return Layout.objects.get(workspace=workspace, memories_dir="memories/engineering")


def citation_links(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'class="citation" href="([^"]+)"', html)]


# --- citations on a proposal --------------------------------------------------------------


def test_every_citation_on_a_demo_proposal_opens_the_summary_pending_ones_from_the_proposal(
    demo_layout,
):
    run = pipeline.run_inline(pipeline.start_run(demo_layout, reextract=True).pk, threads=1)
    proposal = Proposal.objects.get(run=run)
    client = Client()
    client.force_login(make_user("demo", staff=True))
    review = reverse(
        "memoryui:proposal_review", args=[demo_layout.workspace.name, demo_layout.pk, proposal.pk]
    )

    links = citation_links(client.get(review, {"show": "all"}).content.decode())

    assert links, "the demo's proposal cites rollout summaries"
    pending = 0
    for link in links:
        response = client.get(link, follow=True)
        assert response.status_code == 200, link
        html = response.content.decode()
        if "pending write-back" in html:
            pending += 1
            assert f"proposal #{proposal.pk}" in html and "Rollout summary" in html
    # The run wrote summaries the workspace does not have yet (what used to be 404s).
    assert pending > 0


def test_a_pending_citation_shows_the_summarys_text_from_the_proposal(demo_layout):
    from tests.test_writeback import NEW_ID, approved_proposal  # noqa: PLC0415

    proposal = approved_proposal(demo_layout)
    client = Client()
    client.force_login(make_user("vera"))
    url = reverse(
        "memoryui:citation",
        args=[demo_layout.workspace.name, demo_layout.pk, f"{NEW_ID}_new-task.md"],
    )

    for query in ({"proposal": proposal.pk}, {}):  # from the proposal; awaiting write-back
        html = client.get(url, query).content.decode()
        assert "Did a new task." in html and "pending write-back" in html
        assert f"memories/engineering/rollout_summaries/{NEW_ID}_new-task.md" in html
    # A summary no proposal wrote is still missing, and says so.
    missing = client.get(url.replace(NEW_ID, "nope"))
    assert missing.status_code == 404 and "Missing citation" in missing.content.decode()
    assert client.get(url, {"proposal": "x"}).status_code == 404  # names no proposal


# --- the demo login -------------------------------------------------------------------------


def password_of(output: str) -> str:
    return re.search(r"Log in as\s+demo\s+with password\s+(\S+)", output).group(1)


def demo_password_is(password: str) -> bool:
    return get_user_model().objects.get(username="demo").check_password(password)


def test_the_demo_password_is_kept_across_restarts_until_reset(demo_layout, settings):
    def setup_demo(*args: str) -> str:
        from io import StringIO  # noqa: PLC0415

        out = StringIO()
        call_command("setup_demo", *args, stdout=out)
        return out.getvalue()

    first = password_of(setup_demo())
    again = password_of(setup_demo())
    assert again == first  # a restart logs nobody out
    assert demo_password_is(first)
    kept = Path(settings.VAR_DIR) / "demo-password"
    assert kept.stat().st_mode & 0o077 == 0  # its owner's only

    reset = password_of(setup_demo("--reset-password"))

    assert reset != first
    assert not demo_password_is(first)
    assert demo_password_is(reset)
    assert password_of(setup_demo()) == reset


# --- HEAD -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_head_is_answered_where_get_is_with_the_same_status_and_no_body():
    client = Client()
    client.force_login(make_user("staff", staff=True))
    for path in ("/", "/accounts/login/", "/workspaces/", "/healthz"):
        get, head = client.get(path), client.head(path)
        assert head.status_code == get.status_code != 405, path
        assert head.content == b"", path
        assert head.headers.get("Content-Type") == get.headers.get("Content-Type"), path
    anonymous = Client()
    assert anonymous.head("/workspaces/").status_code == anonymous.get("/workspaces/").status_code


# --- configuration errors -------------------------------------------------------------------


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, "DEBUG": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql://memoryui:s3cret@db/memoryui"),
        ("DATABASE_URL", "memoryui.sqlite3"),
        ("DATABASE_CONN_MAX_AGE", "forever"),
        ("DEBUG", "maybe"),
        ("MEMORYUI_MODEL_TIMEOUT", "soon"),
        ("MEMORYUI_STORAGE", "ftp"),
        ("MEMORYUI_DEMO_MODEL", "huge"),
        ("SENTRY_TRACES_SAMPLE_RATE", "half"),
        ("SENTRY_DSN", "sentry.invalid/1"),
        ("LOG_LEVEL", "loud"),
        ("MEMORYUI_NOTIFICATION_RETRY_BASE_SECONDS", "a minute"),
        ("MEMORYUI_DIGEST_HOUR", "24"),  # else Celery's crontab refuses it in the worker
        ("CELERY_BROKER_URL", "bogus"),  # else a RabbitMQ host named "bogus", tried for ever
        ("CELERY_BROKER_URL", "redis://:s3cret@redis:6379/x"),  # else a worker's traceback
        ("CELERY_BROKER_URL", "http://redis:6379/0"),
    ],
)
def test_a_configuration_error_is_one_line_naming_the_setting(name, value):
    result = manage("check", **{"SENTRY_DSN": "https://key@sentry.invalid/1", name: value})

    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"manage.py: configuration error: {name} "), lines[0]
    assert "s3cret" not in result.stderr  # a URL's password is never printed


ENTRY_POINTS = {
    # What compose and the docs start, each reading the settings on its own.
    "celery worker": "-m celery -A memoryui worker --pool=solo".split(),
    "celery beat": "-m celery -A memoryui beat".split(),
    "gunicorn": "-m gunicorn memoryui.wsgi --bind 127.0.0.1:0 --no-control-socket".split(),
}
PROGRAMS = {"celery worker": "celery", "celery beat": "celery", "gunicorn": "memoryui.wsgi"}
# gunicorn's own log lines ("[2026-12-04 09:50:17 +0000] [21520] [ERROR] Shutting down: ...").
GUNICORN_LOG_LINE = re.compile(r"^\[[^]]+\] \[\d+\] \[[A-Z]+\] ")


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql://memoryui:s3cret@db/memoryui"),
        ("MEMORYUI_MODEL_TIMEOUT", "soon"),
        ("CELERY_BROKER_URL", "bogus"),
    ],
)
def test_a_configuration_error_is_one_line_also_for_the_worker_beat_and_the_web_server(
    entry_point, name, value, tmp_path
):
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    result = subprocess.run(
        [sys.executable, *ENTRY_POINTS[entry_point]],
        cwd=ROOT,
        env={**base, "DEBUG": "1", "MEMORYUI_VAR_DIR": str(tmp_path / "var"), name: value},
        capture_output=True,
        text=True,
        timeout=120,
    )

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output and "s3cret" not in output, output
    # gunicorn says it started a worker and stops (its "App failed to load", not a
    # worker booted again and again); the error itself is our one line.
    lines = [line for line in output.splitlines() if not GUNICORN_LOG_LINE.match(line)]
    assert len(lines) == 1, output
    assert lines[0].startswith(f"{PROGRAMS[entry_point]}: configuration error: {name} "), output


# --- the local model's server ---------------------------------------------------------------


def test_the_model_servers_environment_keeps_none_of_the_dashboards_settings():
    env = local_model.server_environment(
        {
            "PATH": "/usr/bin",
            "HOME": "/home/x",
            "LC_ALL": "C.UTF-8",
            "PORT": "8600",
            "HOST": "0.0.0.0",
            "port": "8600",
            "MODEL": "/elsewhere.gguf",
            "N_CTX": "64",
            "DATABASE_URL": "postgres://secret@db/x",
            "OPENAI_API_KEY": "sk-x",
        }
    )
    assert env == {"PATH": "/usr/bin", "HOME": "/home/x", "LC_ALL": "C.UTF-8"}


def test_the_local_model_serves_on_its_own_port_on_loopback_whatever_port_and_host_say(
    monkeypatch,
):
    dashboard_port = free_port()
    monkeypatch.setenv("PORT", str(dashboard_port))  # as bin/start's caller sets them
    monkeypatch.setenv("HOST", "0.0.0.0")
    try:
        server_cm = local_model.run_llama_server(startup_timeout=120)
        server = server_cm.__enter__()
    except local_model.LlamaServerError as exc:  # never a skip: say why
        raise AssertionError(str(exc)) from exc
    try:
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        assert port != dashboard_port
        assert server.client().models.list().data  # it answers on its own port
        assert listening(port) == {"0100007F"}  # 127.0.0.1 only
        assert listening(dashboard_port) == set()  # the dashboard's port is left free
    finally:
        server_cm.__exit__(None, None, None)


def test_an_empty_database_url_means_the_default():
    result = manage("check", DATABASE_URL="")

    assert result.returncode == 0, result.stderr
