"""What the commands print, run as a person runs them (a separate process on the test
database): the demo model without configuration, quiet HTTP logs unless -v 2, progress
on stderr, the dashboard URL of what each command made, and whether a worker listens."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.urls import reverse

from memoryui import curation
from memoryui.management.common import COMMAND_LINKS, dashboard_url
from memoryui.models import GenerationRun, Layout, Proposal

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://memory.example.test"

pytestmark = pytest.mark.django_db(transaction=True)


def database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def manage(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """manage.py as a user runs it in development (``DEBUG=1``, as bin/start sets): no
    model configured, the default broker."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "MEMORYUI_", "CELERY_")) and k != "DEBUG"
    }
    clean.update(
        DEBUG="1",
        DATABASE_URL=database_url(),
        MEMORYUI_VAR_DIR=str(tmp_path / "var"),
        MEMORYUI_BASE_URL=BASE,
        **env,
    )
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def layout(ws):
    """Without generation settings: the command's defaults."""
    return Layout.objects.get(workspace__name="a", memories_dir="memories/engineering")


def test_generate_wait_uses_the_demo_model_quietly_and_ends_with_the_proposal_url(layout, tmp_path):
    result = manage(
        "generate", "a", "--layout", "memories/engineering", "--wait", "--reextract",
        tmp_path=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    proposal = Proposal.objects.get(run__layout=layout)
    assert proposal.run.offline_demo
    url = f"{BASE}/w/a/layouts/{layout.pk}/proposals/{proposal.pk}/"
    assert result.stdout.splitlines()[-1].strip() == url
    assert "HTTP Request" not in result.stdout + result.stderr
    progress = result.stderr.splitlines()
    assert progress[0] == "phase 1: 0/3"
    assert "phase 1: 3/3" in progress and progress[-1] == "phase 2: 1/1"


def test_generate_shows_each_model_request_at_verbosity_2(layout, tmp_path):
    result = manage(
        "generate", "a", "--layout", "memories/engineering", "--wait", "--reextract", "-v", "2",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    turns = GenerationRun.objects.latest("pk").phase_two_turns
    # three rollouts, then each of phase two's turns
    assert turns >= 1 and result.stderr.count("HTTP Request: POST") == 3 + turns


def test_generate_without_wait_says_no_worker_listens_and_where_to_follow_the_run(layout, tmp_path):
    result = manage("generate", "a", "--layout", "memories/engineering", tmp_path=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("queued a: memories/engineering run #")
    assert lines[1].strip().startswith(f"{BASE}/w/a/layouts/{layout.pk}/runs/")
    assert "No Celery worker answered" in result.stdout
    assert "celery -A memoryui worker" in result.stdout
    assert result.stderr == ""  # no kombu warning about a missing host name


def test_import_prints_progress_and_the_workspace_url(tmp_path, workspace_copy):
    path = workspace_copy("small-b")
    result = manage("import_workspace", str(path), "--name", "b", tmp_path=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].strip() == f"{BASE}/w/b/"
    progress = result.stderr.splitlines()
    assert progress[0].startswith("read: ") and progress[-1] == "store: 5/5"


def test_writeback_and_export_print_progress_and_their_page_urls(layout, tmp_path):
    current = curation.latest(layout, "memory_md")
    curation.save_document(
        layout,
        "memory_md",
        curation.text_of(current) + "\n# Task Group: curated\n",
        user=None,
        reason="a test",
        based_on=current.number,
    )
    written = manage("writeback", "a", "--layout", "memories/engineering", tmp_path=tmp_path)
    assert written.returncode == 0, written.stdout + written.stderr
    assert written.stdout.splitlines()[-1].strip() == (f"{BASE}/w/a/layouts/{layout.pk}/writeback/")
    assert written.stderr.splitlines() == ["write: 0/1", "write: 1/1"]

    exported = manage(
        "export_snapshot", "a", "--base-path", str(tmp_path / "snapshots"),
        "--snapshot-id", "s1", tmp_path=tmp_path,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert exported.stdout.splitlines()[-1].strip() == f"{BASE}/w/a/export/"
    steps = [line.removeprefix("export: ").split("/") for line in exported.stderr.splitlines()]
    assert steps[0][0] == "1" and steps[-1][0] == steps[-1][1] and len(steps) == 5  # quarters
    assert (tmp_path / "snapshots" / "s1.tar").exists()


def test_every_link_a_command_prints_is_the_page_the_dashboard_routes(settings):
    """The commands build their links without loading the dashboard's views."""
    for name, route in COMMAND_LINKS.items():
        args = ("team-1.x", 2, 3)[: route.count("{}")]
        assert dashboard_url(name, *args) == settings.MEMORYUI_BASE_URL + reverse(name, args=args)
