"""bin/setup and bin/start on a copy of the project with a .venv of its own (never the
checkout's): .venv is reused whatever launcher starts Python, and bin/start ends with
the demo login, once the dashboard answers, and how to stop it; Ctrl-C stops it all."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
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


def listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* writes them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def session_processes(sid: int) -> list[str]:
    """The live processes of session ``sid`` (bin/start's children each have a process
    group of their own, all in its session), as command lines."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # state ppid pgrp session
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append((stat.parent / "cmdline").read_text().replace("\0", " "))
        except (OSError, IndexError, ValueError):
            continue
    return found


def group_ends(sid: int, within: float) -> bool:
    """Whether every process of the session has ended (waiting up to ``within`` seconds)."""
    deadline = time.monotonic() + within
    while True:
        if not session_processes(sid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def kill_session(sid: int) -> None:
    for line in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = line.read_text().rpartition(")")[2].split()
            if int(fields[3]) == sid:
                os.kill(int(line.parent.name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


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
            kill_session(start.pid)

    lines = [line for line in printed.splitlines() if line.strip()]
    assert lines[-1].strip().startswith("Stop with Ctrl-C"), printed
    assert lines[-2].strip().startswith("Log in as  demo  with password"), printed
    assert f"memoryui is at http://127.0.0.1:{port}/" in lines[-3], printed
    assert '"GET /accounts/login/ HTTP/1.1" 200' in printed  # it answered before
    assert printed.count("Watching for file changes") == 1, printed  # each line once
    assert (project / "var" / "base-url").read_text().strip() == f"http://127.0.0.1:{port}"
    # The login waited for the worker too: its start-up lines (a warning when run as
    # root, say) come before it.
    assert (project / "var" / "worker-ready").read_text().strip().isdigit()


def start_and_signal(
    project: Path,
    tmp_path: Path,
    sig: int,
    *args: str,
    env: dict[str, str] | None = None,
    wait_for: str = "Stop with Ctrl-C",
    while_running: Callable[[str], None] | None = None,
) -> str:
    """bin/start until it prints its login (and ``wait_for``), then ``while_running`` with
    what it printed so far, then ``sig`` to the script's process alone (as a supervisor or
    `kill PID` sends it): what it printed, once nothing is left."""
    env = {"PORT": str(free_port()), "PYTHON": str(launcher(tmp_path)), **(env or {})}
    log = tmp_path / f"start-{env['PORT']}.log"
    with log.open("w") as out:
        start = subprocess.Popen(
            ["bin/start", *args],
            cwd=project,
            env=clean_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while not all(s in log.read_text() for s in ("Stop with Ctrl-C", wait_for)):
            assert start.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        if while_running:
            while_running(log.read_text())
        os.kill(start.pid, sig)
        start.wait(timeout=120)
        assert group_ends(start.pid, within=60), (
            f"left behind after {signal.Signals(sig).name}: {session_processes(start.pid)}"
        )
    finally:
        if not group_ends(start.pid, within=0):
            kill_session(start.pid)
    return log.read_text()


def password_in(printed: str) -> str:
    return printed.split("with password", 1)[1].split()[0]


def test_start_stops_its_children_on_sigterm_or_sigint_to_itself_and_keeps_the_password(
    tmp_path,
):
    project = project_copy(tmp_path, with_app=True)

    first = start_and_signal(project, tmp_path, signal.SIGTERM)
    second = start_and_signal(project, tmp_path, signal.SIGINT)
    third = start_and_signal(project, tmp_path, signal.SIGTERM, "--reset-password")

    # The login survives a restart; --reset-password chooses another.
    assert password_in(second) == password_in(first) != password_in(third)
    # What it says is what it does: the dependencies installed on the first start only.
    assert "checking the dependencies" in first and "checking the dependencies" in second
    assert "bin/setup: installing the locked dependencies" in first
    assert "installing" not in second


FAKE_UV = """#!/bin/sh
# uv as bin/setup meets it: nothing installed yet (--check fails), then a sync that says
# what it does, as uv does on a pipe.
case "$*" in *--check*) exit 1 ;; esac
{lines}
"""


def setup_saying(tmp_path: Path, uv_says: str) -> str:
    """bin/setup local-model's own lines, when uv's sync prints ``uv_says``."""
    project = project_copy(tmp_path)
    (project / ".tools").unlink()
    uv = project / ".tools" / "bin" / "uv"
    uv.parent.mkdir(parents=True)
    uv.write_text(FAKE_UV.format(lines=uv_says))
    uv.chmod(0o755)
    result = subprocess.run(
        ["bin/setup", "local-model"],
        cwd=project,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_setup_says_llama_cpp_takes_minutes_only_when_uv_builds_it(tmp_path):
    cached = setup_saying(
        tmp_path / "cached",
        "echo 'Prepared 3 packages in 210ms' >&2; echo 'Installed 3 packages in 12ms' >&2",
    )
    built = setup_saying(
        tmp_path / "built",
        "echo '   Building llama-cpp-python==0.3.36' >&2; "
        "echo '      Built llama-cpp-python==0.3.36' >&2",
    )

    assert "installing llama-cpp-python for the local model" in cached
    assert "minutes" not in cached and "building" not in cached  # a cache hit: seconds
    assert "Installed 3 packages" in cached  # uv's own lines pass through
    assert "building it from source, about 5 minutes" in built
    assert built.index("Building llama-cpp-python") < built.index("building it from source")


def test_start_with_the_local_model_serves_the_dashboard_on_port_and_the_model_on_loopback(
    tmp_path,
):
    """`PORT=... HOST=0.0.0.0 MEMORYUI_DEMO_MODEL=local bin/start`, with the real model: the
    dashboard on PORT on every interface (as HOST says), llama.cpp's server on its own port
    and on loopback only (it reads PORT and HOST from its environment too, and took the
    dashboard's port before); SIGTERM to bin/start leaves no process behind. The copy uses
    the tests' own .venv, where `bin/setup --all-groups` installed the local model: nothing
    to install, so bin/start's own start is what takes the time."""
    project = project_copy(tmp_path, with_app=True)
    (project / ".venv").symlink_to(sys.prefix)  # the environment running the tests
    port, model_port = free_port(), free_port()
    while model_port == port:
        model_port = free_port()
    seen: dict[str, object] = {}

    def while_running(printed: str) -> None:
        get = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # loopback
        seen["dashboard"] = get(f"http://127.0.0.1:{port}/accounts/login/", timeout=30).status
        models = get(f"http://127.0.0.1:{model_port}/v1/models", timeout=30).read()
        seen["model"] = json.loads(models)["data"][0]["id"]
        seen["listening"] = listening(port), listening(model_port)

    printed = start_and_signal(
        project,
        tmp_path,
        signal.SIGTERM,
        env={
            "PORT": str(port),
            "HOST": "0.0.0.0",
            "MEMORYUI_DEMO_MODEL": "local",
            "MEMORYUI_LOCAL_MODEL_PORT": str(model_port),
        },
        wait_for=f"local model gemma-3-270m at http://127.0.0.1:{model_port}/v1",
        while_running=while_running,
    )

    assert "Generation uses the local model gemma-3-270m" in printed
    assert f"memoryui is at http://127.0.0.1:{port}/" in printed  # a link, not 0.0.0.0
    assert "installing" not in printed  # the tests' .venv had it all
    assert seen["dashboard"] == 200 and seen["model"] == "gemma-3-270m"
    # The dashboard on every interface, the model on 127.0.0.1 only (hex, as /proc says).
    assert seen["listening"] == ({"00000000"}, {"0100007F"}), printed
    assert listening(port) == listening(model_port) == set()  # both gone with the rest
