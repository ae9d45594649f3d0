"""Commands start fast: starting Django, reversing a dashboard link and ``manage.py help``
load neither Celery's app, the admin's modules, django-ninja (and pydantic), the
``openai`` client, markdown-it nor the webhooks' HTTP client. Each case runs in a fresh
interpreter and looks at ``sys.modules``; the tasks, the admin and the API still load
when used."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("openai", "celery.app", "memoryui.celery", "ninja", "pydantic", "markdown_it")
# What the admin's autodiscovery pulled into every command (the importer, the curation).
ADMIN_WORK = ("memoryui.admin", "memoryui.importer", "memoryui.curation")
# The webhooks' HTTP client (0.1 s of CPU): the webhooks' signals load with Django, the
# client with the first delivery.
HTTP_CLIENT = ("httpx2", "httpcore2", "memoryui.outbound")
# The tree reader (its archive code and dataclasses: ~5 % of a command's start): the
# models need only the file kinds (generation.kinds).
TREE_READER = ("generation.tree", "tarfile")
# The review's stack (curation, the entry checks and their poisoning rules): a write-back
# or an export of reviewed memory needs none of it (a tenth of the write-back's imports).
REVIEW_STACK = ("memoryui.curation", "memoryui.entry_checks", "generation.poison")
# The Redis client (~20 MB of a process's memory): it loads with the cache's or the
# broker's first use, not with Django.
CACHE_CLIENT = ("redis",)

REPORT = """
import json, sys
print("\\n" + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
    {"openai", "celery", "memoryui", "ninja", "pydantic", "markdown_it",
     "httpx2", "httpcore2", "generation", "tarfile", "redis"})))
"""


def last_json_line(argv: list[str], tmp_path: Path, **more_env: str) -> Any:
    """What a new Python process running ``argv`` printed last, as JSON."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "memoryui.settings", **more_env}
    env["MEMORYUI_VAR_DIR"] = str(tmp_path / "var")
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def loaded(code: str, tmp_path: Path, **more_env: str) -> set[str]:
    """The modules of interest in ``sys.modules`` after ``code`` ran in a new process."""
    return set(last_json_line(["-c", code + REPORT], tmp_path, **more_env))


def heavy_in(modules: set[str], heavy: tuple[str, ...] = HEAVY + ADMIN_WORK) -> list[str]:
    return sorted(m for m in modules for name in heavy if m == name or m.startswith(name + "."))


def test_starting_django_loads_nothing_heavy(tmp_path: Path) -> None:
    modules = loaded("import django; django.setup()", tmp_path)
    assert "memoryui.webhooks" in modules  # the app's ready() ran
    assert "generation.kinds" in modules  # the models' file kinds
    assert heavy_in(modules, HEAVY + ADMIN_WORK + HTTP_CLIENT + TREE_READER + CACHE_CLIENT) == []


def test_reversing_a_dashboard_link_loads_neither_the_api_nor_the_admin(tmp_path: Path) -> None:
    """The commands' links need no routes at all; reversing another page loads the
    dashboard's routes (``memoryui.urls``) only."""
    code = (
        "import sys, django; django.setup()\n"
        "from django.urls import reverse\n"
        "from memoryui.management.common import dashboard_url\n"
        "url = dashboard_url('memoryui:layout_writeback', 'w', 1)\n"
        "assert url == 'http://dash.test:8123/w/w/layouts/1/writeback/', url\n"
        "assert 'memoryui.urls' not in sys.modules  # the link printed without the views\n"
        "assert reverse('login', urlconf='memoryui.urls') == '/accounts/login/'\n"
    )
    modules = loaded(code, tmp_path, MEMORYUI_BASE_URL="http://dash.test:8123")
    assert "memoryui.urls" in modules
    assert heavy_in(modules, HEAVY + ("memoryui.admin", "memoryui.api")) == []


@pytest.mark.parametrize("argv", [["help"], ["writeback", "--help"], ["export_snapshot", "--help"]])
def test_manage_py_help_loads_nothing_heavy(tmp_path: Path, argv: list[str]) -> None:
    code = (
        "import sys, contextlib, io\n"
        "from django.core.management import execute_from_command_line\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        f"        execute_from_command_line(['manage.py', *{argv!r}])\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0\n"
        "assert 'usage' in out.getvalue().lower() or 'subcommands' in out.getvalue().lower()\n"
    )
    # A command's own module loads with its help (the write-back's needs the importer).
    heavy = HEAVY + HTTP_CLIENT + REVIEW_STACK
    heavy += ADMIN_WORK + TREE_READER if argv == ["help"] else ("memoryui.admin",)
    assert heavy_in(loaded(code, tmp_path), heavy) == []


def test_sending_a_task_loads_the_configured_celery_app(tmp_path: Path) -> None:
    """Tasks import the app themselves: what sends one (a view, a command) uses the
    settings' broker, not Celery's default."""
    code = (
        "import django; django.setup()\n"
        "from memoryui import tasks, celery_app\n"
        "assert tasks.start_generation.app is celery_app\n"
        "assert celery_app.conf.broker_url.startswith('filesystem://')\n"
        "assert 'memoryui.webhooks.deliver_webhook' in celery_app.tasks\n"
        "assert 'memoryui.tasks.phase_one_task' in celery_app.tasks\n"
    )
    assert "memoryui.celery" in loaded(code, tmp_path)


def test_the_admin_and_the_api_load_on_their_first_request(tmp_path: Path) -> None:
    code = (
        "import django; django.setup()\n"
        "from django.urls import resolve, reverse\n"
        "assert reverse('api:openapi-json') == '/api/openapi.json'\n"
        "assert resolve('/admin/').url_name == 'index'\n"
        "assert reverse('memoryui:workspace_list') == '/'\n"
        "from django.contrib import admin\n"
        "from memoryui.models import Workspace\n"
        "assert admin.site.is_registered(Workspace)\n"
    )
    modules = loaded(code, tmp_path)
    assert {"ninja", "memoryui.api", "memoryui.admin"} <= modules


def test_celery_finds_the_app_by_the_package_name(tmp_path: Path) -> None:
    """``celery -A memoryui`` (bin/start, the Dockerfile) finds the app as Celery does."""
    code = (
        "import django; django.setup()\n"
        "from celery.app.utils import find_app\n"
        "app = find_app('memoryui')\n"
        "app.loader.import_default_modules()  # as a starting worker does\n"
        "assert app.main == 'memoryui' and 'memoryui.tasks.heartbeat' in app.tasks\n"
    )
    assert "memoryui.tasks" in loaded(code, tmp_path)


def test_a_web_process_loads_every_route_before_its_first_request(tmp_path: Path) -> None:
    """The other side of the coin: gunicorn's workers (and runserver) load the views, the
    admin and the API as they start, so no request waits on those imports."""
    db = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    modules = loaded("import memoryui.wsgi", tmp_path, DATABASE_URL=db, DEBUG="1")
    assert {"ninja", "pydantic", "memoryui.api", "memoryui.admin", "memoryui.views"} <= {
        m for m in modules if m.count(".") <= 1
    }


def test_a_command_starts_without_collecting_garbage_then_collects_as_usual(
    tmp_path: Path,
) -> None:
    """Start-up's objects live as long as the command: ``manage.py`` keeps the garbage
    collector off until the command is loaded (it ran ~140 collections in a write-back's
    start, an eighth of its CPU), then freezes them out of it and turns it back on."""
    code = (
        "import gc, json; print(json.dumps([gc.isenabled(), gc.get_freeze_count(),"
        " [s['collections'] for s in gc.get_stats()]]))"
    )
    enabled, frozen, collections = last_json_line(
        ["manage.py", "shell", "-v0", "-c", code], tmp_path, DEBUG="1"
    )
    assert enabled  # the command itself runs with the collector
    assert frozen > 50_000  # Django, the settings, the models and the command's modules
    assert collections[1:] == [0, 0]  # no older generation was walked during the start
