"""Commands the documentation gives, run as written: the compose commands (through a stand-in
for `docker` that checks what compose itself checks first: every variable compose.yaml
requires is set) and the export command, which writes the archive and the session state
the documentation promises."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent
OPERATE = ROOT / "docs" / "operate.md"  # the compose commands
SANDBOXES = ROOT / "docs" / "sandboxes.md"  # the export command


# --- docker compose ---------------------------------------------------------------------------

DOCKER_STAND_IN = r'''#!{python}
"""docker, as far as compose goes before it starts anything: every ${{NAME:?message}} of
compose.yaml must be set (compose refuses the whole file otherwise)."""
import os, re, sys
text = open({compose!r}).read()
for name, message in re.findall(r"\$\{{([A-Z_][A-Z0-9_]*):\?([^}}]*)\}}", text):
    if not os.environ.get(name):
        sys.exit(
            f"error while interpolating: required variable {{name}} is missing a value: "
            f"{{message}}"
        )
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
'''


def compose_block() -> str:
    return re.search(r"```sh\n(.*?docker compose.*?)```", OPERATE.read_text(), re.S).group(1)


def run_in_shell(script: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    docker = bin_dir / "docker"
    docker.write_text(
        DOCKER_STAND_IN.format(
            python=sys.executable, compose=str(ROOT / "compose.yaml"), log=str(log)
        )
    )
    docker.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "MINIO_ROOT_PASSWORD")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    # "..." in the documentation stands for a value the reader chooses.
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace("...", "a-long-random-string")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, log.read_text().splitlines() if log.exists() else []


def test_the_readmes_compose_commands_run_as_written(tmp_path):
    block = compose_block()

    result, ran = run_in_shell(block, tmp_path)

    assert result.returncode == 0, result.stderr
    assert ran == ["compose up -d", "compose run --rm web python manage.py createsuperuser"]


def test_the_stand_in_fails_as_compose_does_without_a_required_variable(tmp_path):
    """What the README's command used to be: MINIO_ROOT_PASSWORD missing."""
    result, ran = run_in_shell(
        "SECRET_KEY=... ALLOWED_HOSTS=memory.example.com docker compose up -d", tmp_path
    )

    assert result.returncode != 0 and ran == []
    assert "required variable MINIO_ROOT_PASSWORD is missing a value" in result.stderr


# --- export_snapshot ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_readmes_export_command_writes_the_archive_and_the_session_state(layout, tmp_path):
    command = re.search(r"`manage\.py (export_snapshot [^`]+)`", SANDBOXES.read_text()).group(1)
    argv = shlex.split(
        command.replace("WORKSPACE", "a")
        .replace("DIR", str(tmp_path / "snapshots"))
        .replace("ID", "curated-1")
    )

    call_command(*argv)

    written = sorted(p.name for p in (tmp_path / "snapshots").iterdir())
    assert written == ["curated-1.session_state.json", "curated-1.tar"]
