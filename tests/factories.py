"""Small builders for the rows a test needs."""

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.test.utils import override_settings

from memoryui import curation
from tests.scripted_model import FakeOpenAI


def make_user(username: str = "reviewer", *, staff: bool = False, password: str = "pw-for-tests-9"):
    user = get_user_model().objects.create_user(username=username, password=password)
    if staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return user


def copy_workspace(fixtures_dir: Path, name: str, target: Path) -> Path:
    """A writable copy of a fixture workspace (the fixtures are shared without write bits)."""
    shutil.copytree(fixtures_dir / name / "workspace", target, symlinks=True)
    for p in [target, *target.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
    return target


@contextmanager
def built_once(django_db_blocker: Any, build: Callable[[], Any]) -> Iterator[Any]:
    """What ``build`` makes in the database, made once for many tests (a module-scoped
    fixture): inside a transaction that each test's own transaction nests in (its changes
    are rolled back after it) and that is rolled back at the end. ``build`` runs with a
    local test model (the ``model`` fixture's server) for the generations it needs."""

    with django_db_blocker.unblock(), transaction.atomic():
        with (
            FakeOpenAI() as server,
            override_settings(
                OPENAI_API_KEY="",
                OPENAI_BASE_URL=server.base_url,
                MEMORYUI_DEMO_MODEL="off",
                MEMORYUI_RETRY_BASE_SECONDS=0,
            ),
        ):
            built = build()
        yield built
        transaction.set_rollback(True)


def curate(layout: Any, document: str, text: str, user: Any = None) -> Any:
    """A person's edit: a new current version, as the curation pages make it."""
    current = curation.latest(layout, document)
    return curation.save_document(
        layout,
        document,
        text,
        user=user,
        reason="curated in a test",
        based_on=current.number if current else None,
    )
