"""Configuration from the environment: production settings are safe, bad values are
explained."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """manage.py in development (``DEBUG=1``) unless the test says otherwise."""
    clean = {
        k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS")
    }
    clean.update({"DEBUG": "1", **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean, capture_output=True, text=True
    )


def test_production_settings_pass_the_deploy_check(tmp_path):
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DEBUG="0",
        SECRET_KEY="a-long-random-production-secret-" + "x9" * 20,
        ALLOWED_HOSTS="memory.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/0",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_without_secret_key_refuses_to_start():
    result = manage("check", DEBUG="0", ALLOWED_HOSTS="memory.example.com")
    assert result.returncode == 1
    assert "SECRET_KEY must be set" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_command_run_without_debug_or_a_secret_key_says_what_to_set_without_a_traceback():
    """The usual slip: a second terminal without ``export DEBUG=1``."""
    clean = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")}
    result = subprocess.run(
        [sys.executable, "manage.py", "writeback", "--help"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "manage.py: configuration error: SECRET_KEY must be set when DEBUG is off.",
        "  For development on this machine, `export DEBUG=1` first (bin/start does); "
        "in production set SECRET_KEY and ALLOWED_HOSTS (docs/configuration.md).",
    ]


def test_bad_boolean_is_explained():
    result = manage("check", DEBUG="maybe")
    assert result.returncode == 1
    assert "DEBUG must be a boolean" in result.stderr
    assert "Traceback" not in result.stderr

    traced = manage("check", "--traceback", DEBUG="maybe")  # for whoever debugs the settings
    assert traced.returncode == 1
    assert "Traceback" in traced.stderr and "DEBUG must be a boolean" in traced.stderr


def test_postgres_connections_run_without_jit_unless_the_url_says_otherwise():
    show = (
        "from django.db import connection; c = connection.cursor(); "
        "c.execute('SHOW jit'); print(c.fetchone()[0])"
    )
    url = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    default = manage("shell", "-c", show, DATABASE_URL=url)
    chosen = manage("shell", "-c", show, DATABASE_URL=url + "?options=-c%20jit%3Don")
    assert default.stdout.split()[-1] == "off", default.stderr
    assert chosen.stdout.split()[-1] == "on", chosen.stderr


def test_a_lease_renewed_too_rarely_to_survive_one_late_renewal_is_refused():
    result = manage("check", MEMORYUI_JOB_LEASE_SECONDS="60", MEMORYUI_LEASE_RENEW_SECONDS="45")
    assert result.returncode != 0
    assert "at most half of MEMORYUI_JOB_LEASE_SECONDS" in result.stderr


def test_with_the_default_settings_a_dead_workers_work_is_taken_over_within_two_minutes():
    """Computed from the defaults, as the worker tests measure it on a shorter clock: a
    dead worker's lease runs out at most a lease after its last renewal, and beat looks
    at most an interval later. A live worker renews every quarter lease, so a slow model
    call (up to MEMORYUI_MODEL_TIMEOUT, 300 s, and its repair) keeps its lease."""
    names = [
        "MEMORYUI_JOB_LEASE_SECONDS",
        "MEMORYUI_LEASE_RENEW_SECONDS",
        "MEMORYUI_RECOVERY_SECONDS",
        "MEMORYUI_MODEL_TIMEOUT",
    ]
    show = f"from django.conf import settings; print(*(getattr(settings, n) for n in {names!r}))"
    env = {k: v for k, v in os.environ.items() if k not in names}
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", show],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    lease, renew, recovery, model_timeout = map(float, result.stdout.splitlines()[-1].split())

    assert (lease, renew, recovery, model_timeout) == (60, 15, 30, 300)
    assert lease + recovery < 120  # the worst case after a worker's death: 90 s
    assert 4 * renew <= lease


def test_commands_link_to_the_address_bin_start_serves_on(tmp_path):
    """bin/start writes its address to VAR_DIR/base-url; MEMORYUI_BASE_URL wins."""
    show = "from django.conf import settings; print(settings.MEMORYUI_BASE_URL)"
    env = {k: v for k, v in os.environ.items() if k != "MEMORYUI_BASE_URL"}
    env["MEMORYUI_VAR_DIR"] = str(tmp_path)

    def base_url(**more: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", show],
            cwd=ROOT,
            env={**env, **more},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[-1]

    assert base_url() == "http://127.0.0.1:8000"
    (tmp_path / "base-url").write_text("http://127.0.0.1:8931\n")
    assert base_url() == "http://127.0.0.1:8931"
    assert base_url(MEMORYUI_BASE_URL="https://memory.example.com/") == (
        "https://memory.example.com"
    )


def test_debug_is_off_unless_set_and_importing_the_settings_makes_no_folder(tmp_path):
    """A fresh MEMORYUI_VAR_DIR stays absent: importing the settings reads the
    environment and writes nothing (the folders are made where they are used)."""
    var = tmp_path / "var"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DEBUG", "STATIC_ROOT", "DATABASE_URL", "CELERY_BROKER_URL")
    }
    env.update(SECRET_KEY="a-secret-for-this-test", ALLOWED_HOSTS="x", MEMORYUI_VAR_DIR=str(var))
    show = "import memoryui.settings as s; print(s.DEBUG, s.ALLOWED_HOSTS, s.SECURE_SSL_REDIRECT)"
    result = subprocess.run(
        [sys.executable, "-c", show], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "['x']", "True"]
    assert not var.exists()

    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); import memoryui.celery"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "memoryui.settings"},
        capture_output=True,
        text=True,
    )
    assert started.returncode == 0, started.stderr
    assert {p.name for p in var.iterdir()} >= {"celery-broker", "celery-processed"}


def test_cache_url_puts_the_cache_on_redis_and_turns_the_quick_live_polls_on():
    show = (
        "from django.conf import settings; "
        "print(settings.CACHES['default']['BACKEND'], settings.MEMORYUI_LIVE_FAST_POLLS)"
    )
    result = manage("shell", "-c", show, CACHE_URL="redis://127.0.0.1:6379/11")
    assert result.stdout.splitlines()[-1].split() == [
        "django.core.cache.backends.redis.RedisCache",
        "True",
    ]
    result = manage("shell", "-c", show, CACHE_URL="")
    assert result.stdout.splitlines()[-1].split() == [
        "django.core.cache.backends.locmem.LocMemCache",
        "False",
    ]
    result = manage("check", CACHE_URL="memcached://127.0.0.1:11211")
    assert result.returncode == 1
    assert "CACHE_URL must be a redis:// or rediss:// URL." in result.stderr
