"""bin/test's PostgreSQL run leaves out only the tests that never use the test database."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collected(tmp_path: Path, *, database_tests_only: bool) -> set[str]:
    env = {**os.environ, "MEMORYUI_VAR_DIR": str(tmp_path)}
    if database_tests_only:
        env["MEMORYUI_TEST_DATABASE_TESTS_ONLY"] = "1"
    else:
        env.pop("MEMORYUI_TEST_DATABASE_TESTS_ONLY", None)
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_tree.py",
            "tests/test_writeback.py",
            "tests/test_production.py",
            "tests/test_browser.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return {line for line in listed.stdout.splitlines() if "::" in line}


def test_the_postgresql_run_keeps_every_database_test_and_drops_only_the_others(tmp_path):
    everything = collected(tmp_path, database_tests_only=False)
    database = collected(tmp_path, database_tests_only=True)

    assert database < everything
    dropped = everything - database
    # Parsing the on-disk format and a deployment that brings its own database: once.
    assert {test.split("::")[0] for test in dropped} == {
        "tests/test_tree.py",
        "tests/test_production.py",
    }
    # Every write-back test (the database records each one) and every browser test
    # (a live server on the test database) runs on PostgreSQL too.
    assert {t for t in everything if t.startswith("tests/test_writeback.py")} <= database
    assert {t for t in everything if t.startswith("tests/test_browser.py")} <= database


def test_a_clone_made_elsewhere_finds_the_fixtures_beside_the_checkout_it_came_from(tmp_path):
    """CI clones the repository anywhere (``git clone . /tmp/x``): the fixtures it reads
    are the ones beside the checkout it was cloned from."""
    from tests.conftest import FIXTURES, fixtures_of  # noqa: PLC0415 (the suite's own lookup)

    clone = tmp_path / "x"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)

    assert fixtures_of(clone) == fixtures_of(ROOT) == FIXTURES.resolve()
    assert (fixtures_of(clone) / "small-a" / "workspace").is_dir()
