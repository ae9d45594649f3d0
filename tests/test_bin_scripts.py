"""bin/setup and bin/start on a copy of the project with a .venv of its own (never the
checkout's): .venv is reused whatever launcher starts Python, and bin/start ends with
the demo login, once the dashboard answers, and how to stop it; Ctrl-C stops it all."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def project_copy(tmp_path: Path, *, with_app: bool = False) -> Path:
    target = tmp_path / "memoryui"
    names = ["bin", "pyproject.toml", "uv.lock"]
    if with_app:
        names += ["manage.py", "memoryui", "memoryui_client", "generation", "templates", "sample"]
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    (target / ".tools").symlink_to(ROOT / ".tools")
    return target


def launcher(tmp_path: Path) -> Path:
    """A Python launcher that is not the interpreter, as a pyenv shim is."""
    path = tmp_path / "python3-launcher"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def clean_env(**more: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MEMORYUI_", "CELERY_", "OPENAI_", "UV_PROJECT", "VIRTUAL_ENV"))
        and k not in ("DATABASE_URL", "DEBUG")
    }
    return {**env, **more}


def test_setup_keeps_the_venv_when_python_comes_through_a_launcher(tmp_path):
    project = project_copy(tmp_path)
    env = clean_env(PYTHON=str(launcher(tmp_path)))

    def setup() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bin/setup"], cwd=project, env=env, capture_output=True, text=True, timeout=600
        )

    first = setup()
    assert first.returncode == 0, first.stderr
    venv = (project / ".venv").stat().st_ino
    marker = project / ".venv" / "kept"
    marker.write_text("a file the start before left")

    again = setup()

    assert again.returncode == 0, again.stderr
    assert "installing" not in again.stderr  # nothing to do, said nothing
    assert (project / ".venv").stat().st_ino == venv and marker.exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_ends(pgid: int, within: float) -> bool:
    """Whether every process of the group has ended (waiting up to ``within`` seconds)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def test_start_ends_with_the_login_once_the_dashboard_answers(tmp_path):
    project = project_copy(tmp_path, with_app=True)
    port = free_port()
    log = tmp_path / "start.log"
    with log.open("w") as out:
        start = subprocess.Popen(
            ["bin/start"],
            cwd=project,
            env=clean_env(PORT=str(port), PYTHON=str(launcher(tmp_path))),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while "Stop with Ctrl-C" not in log.read_text() and time.monotonic() < deadline:
            assert start.poll() is None, log.read_text()
            time.sleep(0.5)
        printed = log.read_text()
        os.killpg(start.pid, signal.SIGINT)  # Ctrl-C in its terminal
        start.wait(timeout=120)
        assert group_ends(start.pid, within=120), "a server or the worker outlived Ctrl-C"
    finally:
        if not group_ends(start.pid, within=0):
            os.killpg(start.pid, signal.SIGKILL)

    lines = [line for line in printed.splitlines() if line.strip()]
    assert lines[-1].strip().startswith("Stop with Ctrl-C"), printed
    assert lines[-2].strip().startswith("Log in as  demo  with password"), printed
    assert f"memoryui is at http://127.0.0.1:{port}/" in lines[-3], printed
    assert '"GET /accounts/login/ HTTP/1.1" 200' in printed  # it answered before
    assert (project / "var" / "base-url").read_text().strip() == f"http://127.0.0.1:{port}"
    # The login waited for the worker too: its start-up lines (a warning when run as
    # root, say) come before it.
    assert (project / "var" / "worker-ready").read_text().strip().isdigit()
