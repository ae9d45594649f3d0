"""Task names are part of the broker's protocol: a message queued by one version names the
task a later version must run. They are explicit in memoryui/tasks.py; this list is the
contract, so renaming or moving a function cannot silently strand queued messages."""

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

from memoryui import task_queue, tasks
from memoryui.celery import app

ROOT = Path(__file__).resolve().parent.parent

NAMES = {
    "memoryui.tasks.reimport_workspace",
    "memoryui.tasks.import_new_workspace",
    "memoryui.tasks.sync_workspaces",
    "memoryui.tasks.sync_workspace",
    "memoryui.tasks.phase_one_task",
    "memoryui.tasks.phase_two_task",
    "memoryui.tasks.recover_stalled_runs",
    "memoryui.tasks.start_generation",
    "memoryui.tasks.heartbeat",
    "memoryui.tasks.lint_version",
    "memoryui.tasks.lint_proposal",
    "memoryui.tasks.compare_version",
    "memoryui.tasks.lint_workspace",
    "memoryui.tasks.send_notification",
    "memoryui.tasks.send_digests",
    "memoryui.tasks.judge_entries",
    "memoryui.tasks.index_search",
    "memoryui.webhooks.deliver_webhook",
    # Former names, forwarded to the tasks above.
    "generation.tasks.reimport_workspace",
    "generation.tasks.phase_one_task",
    "generation.tasks.phase_two_task",
    "generation.tasks.recover_stalled_runs",
    "generation.tasks.start_generation",
}


def test_every_task_name_a_queued_message_may_carry_is_registered():
    registered = {name for name in app.tasks if not name.startswith("celery.")}
    assert registered == NAMES


def test_each_task_is_named_in_its_decorator_not_by_where_its_function_lives():
    source = inspect.getsource(tasks)
    decorators = source.count("@app.task(")
    assert decorators == source.count("@app.task(\n    name=") + source.count('@app.task(name="')
    assert decorators == len([n for n in NAMES if not n.startswith("generation.")])


def test_every_task_a_service_sends_by_name_is_registered_under_that_name():
    """The services below ``memoryui.tasks`` send tasks through ``memoryui.task_queue`` by
    name (they never import the tasks): a misspelt name would fail only when sent."""
    root = Path(__file__).resolve().parent.parent / "memoryui"
    sent = {
        match
        for path in root.rglob("*.py")
        for match in re.findall(r"task_queue\.send\w*\(\s*\"([\w.]+)\"", path.read_text())
    }
    assert {"memoryui.webhooks.deliver_webhook", "memoryui.tasks.lint_version"} <= sent
    assert sent <= NAMES
    for name in sent:
        assert task_queue.task(name) is app.tasks[name]


def test_a_process_that_never_loaded_the_tasks_sends_one_by_name(tmp_path):
    """A web server or a command sends its first task from a service (a version's lint
    after an approval) without having imported ``memoryui.tasks``: the name is found."""
    code = (
        "import django, sys; django.setup()\n"
        "assert 'memoryui.tasks' not in sys.modules\n"
        "from memoryui import task_queue\n"
        "task = task_queue.task('memoryui.tasks.lint_version')\n"
        "assert task.name == 'memoryui.tasks.lint_version', task\n"
        "assert 'memoryui.tasks' in sys.modules\n"
        "print('ok')\n"
    )
    env = {**os.environ, "MEMORYUI_VAR_DIR": str(tmp_path), "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
