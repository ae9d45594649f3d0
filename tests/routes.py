"""Every route of the URLconf with arguments that reach real rows: the access and input
tests walk them all, so a new route is covered (or names the argument it needs)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from generation import review
from memoryui import curation, pipeline
from memoryui.importer import import_workspace
from memoryui.models import (
    GenerationRun,
    GenerationSettings,
    ImportRun,
    Layout,
    Membership,
    MemoryVersion,
    Proposal,
    Role,
    Rollout,
    RolloutSummary,
    SkillFileVersion,
    Webhook,
    WebhookDelivery,
    WorkspaceFile,
)
from tests.factories import built_once, copy_workspace, make_user

MD = MemoryVersion.Document.MEMORY_MD


KINDS = {"StringConverter": "str", "IntConverter": "int", "PathConverter": "path"}


@dataclass
class Route:
    path: str  # the pattern, e.g. "w/<str:name>/audit/"
    name: str  # "memoryui:audit_log"
    converters: dict[str, str] = field(default_factory=dict)  # kwarg -> "str" / "int"


def all_routes() -> list[Route]:
    """Every named route of the URLconf except Django's admin site (Django's own code)
    and the JSON API (token-authenticated; tests/test_api.py sends it bad input)."""
    found: list[Route] = []

    def walk(patterns, prefix: str, namespace: str) -> None:  # type: ignore[no-untyped-def]
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                if entry.app_name == "admin" or (entry.namespace or "").startswith("api"):
                    continue
                ns = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
                walk(entry.url_patterns, route, ns)
            elif isinstance(entry, URLPattern) and entry.name:
                converters = {
                    key: KINDS.get(type(conv).__name__, type(conv).__name__)
                    for key, conv in entry.pattern.converters.items()
                }
                found.append(Route(route, namespace + entry.name, converters))

    walk(get_resolver().url_patterns, "", "")
    return found


@dataclass
class World:
    """A workspace with an import, a layout, a generation run, its proposal, a version
    an agent changed (to review), a skill and a rollout summary."""

    path: Path
    layout: Layout
    import_run: ImportRun
    run: GenerationRun
    proposal: Proposal
    rollout_id: str
    summary_file: str
    skill: str
    member: Any  # a viewer member of the workspace
    webhook: Webhook
    delivery: WebhookDelivery

    def kwargs(self, route: Route) -> dict[str, object]:
        values: dict[str, object] = {
            "name": self.layout.workspace.name,
            "layout_pk": self.layout.pk,
            "rollout_id": self.rollout_id,
            "segment": 1,
            "index": 1,
            "document": MD,
            "number": 1,
            "filename": self.summary_file,
            "run_pk": self.run.pk,
            "skill": self.skill,
            "file": "SKILL.md",
            "user_pk": self.member.pk,
            # The password reset link (an invalid one: the page says so).
            "uidb64": "MQ",
            "token": "set-password",
            # pk: a proposal's, a webhook's or a delivery's on their routes, else the import's
            "pk": self.proposal.pk
            if ":proposal_" in route.name
            else self.webhook.pk
            if route.name.endswith(":webhook_delete")
            else self.delivery.pk
            if route.name.endswith(":webhook_redeliver")
            else self.import_run.pk,
        }
        missing = set(route.converters) - set(values)
        assert not missing, f"tests/routes.py: give {route.name} a value for {missing}"
        return {key: values[key] for key in route.converters}

    def entry_key(self) -> str:
        return review.entries(curation.text_of(curation.latest(self.layout, MD)))[0].key


def make_world(workspace_copy, name: str = "a") -> World:
    """Needs the ``model`` fixture (the proposal comes from a real generation run)."""
    path = workspace_copy("small-a")
    for p in path.rglob("*"):  # the fixtures are shared without write bits
        p.chmod(p.stat().st_mode | 0o200)
    result = import_workspace(path, name)
    layout = Layout.objects.select_related("workspace").get(
        workspace__name=name, memories_dir="memories/engineering"
    )
    GenerationSettings.objects.create(layout=layout, concurrency=1)
    run = pipeline.start_run(layout, reextract=True)
    pipeline.run_inline(run.pk, threads=1, sleep=lambda s: None)
    # An agent's edit to review (agent_change).
    MemoryVersion.objects.filter(layout=layout, document=MD, number=1).update(needs_review=True)
    # A sandbox's skill change to review (skill_file_accept).
    SkillFileVersion.objects.filter(layout=layout, number=1).update(needs_review=True)
    summary = RolloutSummary.objects.filter(layout=layout).select_related("file").first()
    skill = (
        WorkspaceFile.objects.filter(layout=layout, kind=WorkspaceFile.Kind.SKILL)
        .values_list("path", flat=True)
        .first()
    )
    member = make_user("member")
    Membership.objects.create(workspace=layout.workspace, user=member, role=Role.VIEWER)
    webhook = Webhook.objects.create(
        workspace=layout.workspace, url="https://hooks.example/x", secret="s" * 32
    )
    return World(
        member=member,
        webhook=webhook,
        # on a webhook of its own: the walk deletes ``webhook``
        delivery=WebhookDelivery.objects.create(
            webhook=Webhook.objects.create(
                workspace=layout.workspace, url="https://hooks.example/y", secret="t" * 32
            ),
            event="run.failed",
            payload={"event": "run.failed"},
        ),
        path=path,
        layout=layout,
        import_run=result.run,
        run=run,
        proposal=Proposal.objects.get(run=run),
        rollout_id=Rollout.objects.filter(layout=layout).values_list("rollout_id", flat=True)[0],
        summary_file=summary.file.path.rsplit("/", 1)[1],
        skill=skill.split("/skills/", 1)[1].split("/", 1)[0],
    )


@pytest.fixture
def world(db, model, workspace_copy, settings, tmp_path) -> World:
    settings.MEMORYUI_SNAPSHOT_BASE_PATH = tmp_path / "snapshots"
    return make_world(workspace_copy)


@pytest.fixture(scope="class")
def shared_world(
    django_db_setup, django_db_blocker, tmp_path_factory, fixtures_dir
) -> Iterator[World]:
    """``world``, made once for a class of tests: each test's changes to the database are
    rolled back after it; its files on disk are shared as they are."""
    root = tmp_path_factory.mktemp("world")

    def copy(name: str = "small-a") -> Path:
        return copy_workspace(fixtures_dir, name, root / name)

    with built_once(django_db_blocker, lambda: make_world(copy)) as world:
        yield world
