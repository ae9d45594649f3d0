"""The JSON API: personal tokens (hashed, expiring, revocable, scoped), the same roles as
the pages endpoint by endpoint, one error convention, and a valid OpenAPI schema."""

import hashlib
import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from openapi_spec_validator import validate

from generation import review
from memoryui import curation, pipeline, skills, tokens
from memoryui.importer import import_workspace
from memoryui.models import (
    ApiToken,
    GenerationRun,
    GenerationSettings,
    Layout,
    Membership,
    MemoryVersion,
    Proposal,
    Role,
    Rollout,
)
from tests.factories import built_once, copy_workspace, make_user

pytestmark = pytest.mark.django_db
MD = MemoryVersion.Document.MEMORY_MD


@pytest.fixture
def layout(layout, settings, tmp_path):
    """conftest's layout, exporting snapshots into this test's directory."""
    settings.MEMORYUI_SNAPSHOT_BASE_PATH = tmp_path / "snapshots"
    return layout


@pytest.fixture(scope="class")
def parity_world(django_db_setup, django_db_blocker, tmp_path_factory, fixtures_dir):
    """Workspace "a" and a generated proposal, made once for all the parity cases (each
    case's own changes are rolled back after it)."""
    path = copy_workspace(fixtures_dir, "small-a", tmp_path_factory.mktemp("parity") / "a")

    def build() -> tuple[Layout, Proposal]:
        import_workspace(path, "a")
        layout = Layout.objects.select_related("workspace").get(
            workspace__name="a", memories_dir="memories/engineering"
        )
        GenerationSettings.objects.create(layout=layout, concurrency=1)
        return layout, proposal_for(layout)

    with built_once(django_db_blocker, build) as world:
        yield world


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def token_for(user, workspaces=("a",), **kwargs) -> str:
    return tokens.create_token(user, "test", list(workspaces), **kwargs).secret


def api(layout: Layout, rest: str = "") -> str:
    return f"/api/workspaces/{layout.workspace.name}/layouts/{layout.pk}{rest}"


def proposal_for(layout: Layout) -> Proposal:
    run = pipeline.start_run(layout, reextract=True)
    pipeline.run_inline(run.pk, threads=1, sleep=lambda s: None)
    return Proposal.objects.get(run=run)


# --- tokens ----------------------------------------------------------------------------


def test_a_token_is_shown_once_and_stored_only_as_its_sha256(layout):
    user = make_user("ada", staff=True)
    client = Client()
    client.force_login(user)

    page = client.post(
        reverse("memoryui:token_list"),
        {"name": "ci bot", "workspaces": ["a"], "expires_in_days": "30"},
    )

    secret = page.context["created"].secret
    assert secret in page.content.decode()
    stored = ApiToken.objects.get(name="ci bot")
    assert stored.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in json.dumps(list(ApiToken.objects.values()), default=str)
    assert secret not in client.get(reverse("memoryui:token_list")).content.decode()
    assert stored.workspaces == ["a"] and stored.expires_at > timezone.now() + timedelta(days=29)
    assert client.get("/api/workspaces/a", **bearer(secret)).status_code == 200
    assert ApiToken.objects.get(pk=stored.pk).last_used_at is not None


def test_the_token_page_needs_a_login():
    response = Client().get(reverse("memoryui:token_list"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_expired_revoked_wrong_and_missing_tokens_are_refused_with_401(layout):
    user = make_user("ada", staff=True)
    expired = token_for(user, expires_at=timezone.now() - timedelta(seconds=1))
    revoked_secret = token_for(user)
    client = Client()
    client.force_login(user)
    token = ApiToken.objects.get(secret_sha256=tokens.digest(revoked_secret))
    client.post(reverse("memoryui:token_revoke", args=[token.pk]))

    for headers in (bearer(expired), bearer(revoked_secret), bearer("mui_not-a-token"), {}):
        response = Client().get("/api/workspaces/a", **headers)
        assert response.status_code == 401
        assert "API token" in response.json()["detail"]
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    inactive = make_user("gone", staff=True)
    secret = token_for(inactive)
    inactive.is_active = False
    inactive.save()
    assert Client().get("/api/workspaces/a", **bearer(secret)).status_code == 401


def test_a_token_reaches_only_the_workspaces_it_names(layout, workspace_copy):
    import_workspace(workspace_copy("small-b"), "b")
    staff = make_user("ada", staff=True)  # an admin of every workspace in the browser
    secret = token_for(staff, ["b"])

    assert Client().get("/api/workspaces/a", **bearer(secret)).status_code == 404
    assert Client().get(api(layout, "/rollouts"), **bearer(secret)).status_code == 404
    listed = Client().get("/api/workspaces", **bearer(secret)).json()
    assert [w["name"] for w in listed["items"]] == ["b"] and listed["count"] == 1


# --- the same permissions as the pages, endpoint by endpoint ------------------------------


def _rollout_id(layout):
    return Rollout.objects.filter(layout=layout).order_by("rollout_id").first().rollout_id


def _key(layout, proposal):
    doc = curation.document_reviews(proposal)[0]
    return next(c.key for c in doc.changes if c.status != "unchanged")


# (name, role the page needs, API call, page call); calls get (layout, proposal, run).
FORGOTTEN = "memories/raw_memories/prefs-6e64dc.md"  # the example of a forgotten file
SKILL_FILE = "skills/triage-flaky-tests/SKILL.md"  # the example of a skill file change
ENDPOINTS = [
    (
        "workspace",
        Role.VIEWER,
        lambda lay, p, r: ("get", "/api/workspaces/a", None),
        lambda lay, p, r: ("get", reverse("memoryui:workspace_detail", args=["a"]), None),
    ),
    (
        "imports",
        Role.VIEWER,
        lambda lay, p, r: ("get", "/api/workspaces/a/imports", None),
        lambda lay, p, r: ("get", reverse("memoryui:workspace_detail", args=["a"]), None),
    ),
    (
        "layout",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay), None),
        lambda lay, p, r: ("get", reverse("memoryui:layout_detail", args=["a", lay.pk]), None),
    ),
    (
        "memory_md",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/documents/memory_md?version=1"), None),
        lambda lay, p, r: ("get", reverse("memoryui:memory_md", args=["a", lay.pk]), None),
    ),
    (
        "memory_summary_raw",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/documents/memory_summary/raw"), None),
        lambda lay, p, r: ("get", reverse("memoryui:memory_summary", args=["a", lay.pk]), None),
    ),
    (
        "usage per entry",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/usage/entries"), None),
        lambda lay, p, r: ("get", reverse("memoryui:layout_usage", args=["a", lay.pk]), None),
    ),
    (
        "memory reads",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/usage/reads"), None),
        lambda lay, p, r: ("get", reverse("memoryui:layout_usage", args=["a", lay.pk]), None),
    ),
    (
        "versions",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/documents/memory_md/versions"), None),
        lambda lay, p, r: ("get", reverse("memoryui:versions", args=["a", lay.pk, MD]), None),
    ),
    (
        "skills",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/skills"), None),
        lambda lay, p, r: ("get", reverse("memoryui:skill_list", args=["a", lay.pk]), None),
    ),
    (
        "rollouts",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/rollouts?state=completed&limit=5"), None),
        lambda lay, p, r: ("get", reverse("memoryui:rollout_list", args=["a", lay.pk]), None),
    ),
    (
        "rollout",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, f"/rollouts/{_rollout_id(lay)}"), None),
        lambda lay, p, r: (
            "get",
            reverse("memoryui:rollout_detail", args=["a", lay.pk, _rollout_id(lay)]),
            None,
        ),
    ),
    (
        "rollout_raw",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, f"/rollouts/{_rollout_id(lay)}/raw"), None),
        lambda lay, p, r: (
            "get",
            reverse("memoryui:rollout_detail", args=["a", lay.pk, _rollout_id(lay)]),
            None,
        ),
    ),
    (
        "proposals",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, "/proposals?status=pending"), None),
        lambda lay, p, r: ("get", reverse("memoryui:proposal_list", args=["a", lay.pk]), None),
    ),
    (
        "proposal",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, f"/proposals/{p.pk}"), None),
        lambda lay, p, r: (
            "get",
            reverse("memoryui:proposal_review", args=["a", lay.pk, p.pk]),
            None,
        ),
    ),
    (
        "run",
        Role.VIEWER,
        lambda lay, p, r: ("get", api(lay, f"/runs/{r.pk}"), None),
        lambda lay, p, r: ("get", reverse("memoryui:run_detail", args=["a", lay.pk, r.pk]), None),
    ),
    (
        "decide",
        Role.REVIEWER,
        lambda lay, p, r: (
            "post",
            api(lay, f"/proposals/{p.pk}/decisions"),
            {"document": MD, "keys": [_key(lay, p)], "decision": "reject"},
        ),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:proposal_decide", args=["a", lay.pk, p.pk]),
            {"document": MD, "key": _key(lay, p), "decision": "reject"},
        ),
    ),
    (
        "decide_forgotten",
        Role.REVIEWER,
        lambda lay, p, r: (
            "post",
            api(lay, f"/proposals/{p.pk}/forgotten"),
            {"paths": [FORGOTTEN], "decision": "reject"},
        ),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:proposal_forget_decide", args=["a", lay.pk, p.pk]),
            {"path": FORGOTTEN, "decision": "reject"},
        ),
    ),
    (
        "decide_skill_files",
        Role.REVIEWER,
        lambda lay, p, r: (
            "post",
            api(lay, f"/proposals/{p.pk}/skill_files"),
            {"paths": [SKILL_FILE], "decision": "reject"},
        ),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:proposal_skill_decide", args=["a", lay.pk, p.pk]),
            {"path": SKILL_FILE, "decision": "reject"},
        ),
    ),
    (
        "approve",
        Role.REVIEWER,
        lambda lay, p, r: ("post", api(lay, f"/proposals/{p.pk}/approve"), {}),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:proposal_approve", args=["a", lay.pk, p.pk]),
            {},
        ),
    ),
    (
        "reject",
        Role.REVIEWER,
        lambda lay, p, r: ("post", api(lay, f"/proposals/{p.pk}/reject"), {}),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:proposal_reject", args=["a", lay.pk, p.pk]),
            {},
        ),
    ),
    (
        "request_changes",
        Role.REVIEWER,
        lambda lay, p, r: (
            "post",
            api(lay, f"/proposals/{p.pk}/request-changes"),
            {"message": "merge the deploy groups"},
        ),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:proposal_request_changes", args=["a", lay.pk, p.pk]),
            {"message": "merge the deploy groups"},
        ),
    ),
    (
        "import",
        Role.ADMIN,
        lambda lay, p, r: ("post", "/api/workspaces/a/imports", {}),
        lambda lay, p, r: ("post", reverse("memoryui:workspace_reimport", args=["a"]), {}),
    ),
    (
        "start_run",
        Role.ADMIN,
        lambda lay, p, r: ("post", api(lay, "/runs"), {}),
        lambda lay, p, r: ("post", reverse("memoryui:generation_start", args=["a", lay.pk]), {}),
    ),
    (
        "writeback",
        Role.ADMIN,
        lambda lay, p, r: ("post", api(lay, "/writeback"), {"dry_run": True}),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:layout_writeback", args=["a", lay.pk]),
            {"action": "dry_run"},
        ),
    ),
    (
        "export",
        Role.ADMIN,
        lambda lay, p, r: ("post", "/api/workspaces/a/exports", {"snapshot_id": "via-api"}),
        lambda lay, p, r: (
            "post",
            reverse("memoryui:workspace_export", args=["a"]),
            {"snapshot_id": "via-page", "destination": "server"},
        ),
    ),
]
ROLES = [None, Role.VIEWER, Role.REVIEWER, Role.EDITOR, Role.ADMIN]
ORDER = [Role.VIEWER, Role.REVIEWER, Role.EDITOR, Role.ADMIN]


def _call(client: Client, how, headers=None):
    method, url, body = how
    headers = headers or {}
    if method == "get":
        return client.get(url, **headers)
    if headers:  # the API: JSON
        return client.post(url, json.dumps(body), content_type="application/json", **headers)
    return client.post(url, body)


class TestApiPageParity:
    """Every case shares one workspace and proposal (``parity_world``), made once."""

    @pytest.mark.parametrize(
        ("endpoint", "needed", "api_call", "page_call"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS]
    )
    def test_the_api_allows_exactly_what_the_page_allows_for_every_role(
        self,
        model,
        parity_world,
        settings,
        tmp_path,
        endpoint,
        needed,
        api_call,
        page_call,
        django_capture_on_commit_callbacks,
    ):
        settings.MEMORYUI_DEFAULT_ROLE = "none"
        settings.MEMORYUI_SNAPSHOT_BASE_PATH = tmp_path / "snapshots"
        layout, proposal = parity_world
        run = GenerationRun.objects.get(pk=proposal.run_id)
        seen = {}
        for role in ROLES:  # weakest first: what is refused changes nothing for the next
            user = make_user(f"u-{role or 'none'}")
            if role:
                Membership.objects.create(workspace=layout.workspace, user=user, role=role)
            page = Client()
            page.force_login(user)
            with django_capture_on_commit_callbacks(execute=False):
                from_api = _call(Client(), api_call(layout, proposal, run), bearer(token_for(user)))
                from_page = _call(page, page_call(layout, proposal, run))
            allowed = role is not None and ORDER.index(role) >= ORDER.index(needed)
            seen[role] = (from_api.status_code, from_page.status_code)
            assert from_api.status_code < 500 and from_page.status_code < 500, seen
            assert (from_api.status_code not in (403, 404)) == allowed, (endpoint, seen)
            assert (from_page.status_code not in (403, 404)) == allowed, (endpoint, seen)
            if not allowed:
                assert from_api.status_code == from_page.status_code, (endpoint, seen)
                assert "detail" in from_api.json()


def signed_in() -> Client:

    client = Client()
    reader = get_user_model().objects.filter(username="reader").first()
    client.force_login(reader or make_user("reader"))
    return client


def test_every_endpoint_in_the_schema_is_in_the_permission_table(model, layout):

    schema = signed_in().get("/api/openapi.json").json()
    proposal = proposal_for(layout)
    run = GenerationRun.objects.get(pk=proposal.run_id)
    tested = [api_call(layout, proposal, run)[:2] for _, _, api_call, _ in ENDPOINTS]
    elsewhere = {  # tested on their own, here, in test_remote_snapshots.py and as noted
        ("get", "/api/workspaces"),
        ("get", "/api/workspaces/{name}/layouts/{layout_id}/skills/{skill}/files/{file_path}"),
        ("put", "/api/workspaces/{name}/snapshots/{snapshot_id}"),
        ("get", "/api/workspaces/{name}/snapshots/{snapshot_id}"),
        ("get", "/api/workspaces/{name}/snapshots/{snapshot_id}/exists"),
        ("get", "/api/workspaces/{name}/exports/{snapshot_id}"),  # test_object_storage.py
    }
    missing = []
    for path, methods in schema["paths"].items():
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
        for method in methods:
            if (method, path) in elsewhere:
                continue
            if not any(m == method and pattern.match(u.split("?")[0]) for m, u in tested):
                missing.append((method, path))
    assert missing == []


# --- the convention: pages, errors, the schema and its docs ----------------------------


def test_lists_are_pages_of_count_and_items_and_filters_apply(layout):
    secret = token_for(make_user("ada", staff=True))
    total = Rollout.objects.filter(layout=layout).count()

    first = Client().get(api(layout, "/rollouts?limit=2"), **bearer(secret)).json()
    second = Client().get(api(layout, "/rollouts?limit=2&offset=2"), **bearer(secret)).json()
    searched = Client().get(api(layout, "/rollouts?q=zzzz-nothing-matches"), **bearer(secret))

    assert first["count"] == total and len(first["items"]) == 2
    assert {r["rollout_id"] for r in first["items"]}.isdisjoint(
        {r["rollout_id"] for r in second["items"]}
    )
    assert searched.json() == {"count": 0, "items": []}


@pytest.mark.parametrize(
    "path",
    [
        "/rollouts?limit=0",
        "/rollouts?limit=abc",
        "/rollouts?since=yesterday",
        "/rollouts?state=exploded",
        "/documents/MEMORY.txt",
        "/documents/memory_md?version=0",
        "/documents/memory_md?version=x",
        "/proposals?status=maybe",
    ],
)
def test_bad_query_input_gets_a_422_with_a_clear_message(layout, path):
    secret = token_for(make_user("ada", staff=True))
    response = Client().get(api(layout, path), **bearer(secret))
    assert response.status_code == 422
    assert response.json()["detail"].startswith(("Invalid input:", "state must be"))


def test_bad_bodies_and_unknown_things_get_4xx_never_500(model, layout):
    secret = token_for(make_user("ada", staff=True))
    proposal = proposal_for(layout)
    decide = api(layout, f"/proposals/{proposal.pk}/decisions")

    not_json = Client().post(decide, "{nope", content_type="application/json", **bearer(secret))
    missing = Client().post(decide, "{}", content_type="application/json", **bearer(secret))
    unknown_key = Client().post(
        decide,
        json.dumps({"document": MD, "keys": ["task_group:nope"], "decision": "accept"}),
        content_type="application/json",
        **bearer(secret),
    )
    bad_id = Client().post(
        "/api/workspaces/a/exports",
        json.dumps({"snapshot_id": "../etc"}),
        content_type="application/json",
        **bearer(secret),
    )
    no_run = Client().get(api(layout, "/runs/999999"), **bearer(secret))
    no_version = Client().get(api(layout, "/documents/memory_md?version=999"), **bearer(secret))

    assert not_json.status_code in (400, 422) and "detail" in not_json.json()
    assert missing.status_code == 422 and "keys" in missing.json()["detail"]
    assert unknown_key.status_code == 422 and "task_group:nope" in unknown_key.json()["detail"]
    assert bad_id.status_code == 422 and "snapshot_id" in bad_id.json()["detail"]
    assert no_run.status_code == 404 and no_version.status_code == 404
    assert "No version 999" in no_version.json()["detail"]


def reviewer_and_change(layout) -> tuple[str, Proposal, dict]:
    """A reviewer's token, a pending proposal, and one of its MEMORY.md changes with a
    proposed text, as the API describes it."""
    reviewer = make_user("rev")
    Membership.objects.create(workspace=layout.workspace, user=reviewer, role=Role.REVIEWER)
    secret = token_for(reviewer)
    proposal = proposal_for(layout)
    detail = Client().get(api(layout, f"/proposals/{proposal.pk}"), **bearer(secret)).json()
    change = next(c for c in detail["changes"] if c["document"] == MD and c["proposed"])
    return secret, proposal, change


def test_a_reviewer_decides_and_approves_through_the_api_with_the_pages_rules(model, layout):
    secret, proposal, change = reviewer_and_change(layout)
    other = make_user("other")
    Membership.objects.create(workspace=layout.workspace, user=other, role=Role.REVIEWER)
    assert change["diff"].startswith("--- current\n+++ proposed\n") or change["status"] == "added"

    curation.reserve(proposal, other)  # someone else has the review page open
    held = Client().post(api(layout, f"/proposals/{proposal.pk}/approve"), **bearer(secret))
    assert held.status_code == 409 and "other is reviewing" in held.json()["detail"]
    Proposal.objects.filter(pk=proposal.pk).update(reserved_by=None, reserved_until=None)

    decided = Client().post(
        api(layout, f"/proposals/{proposal.pk}/decisions"),
        json.dumps({"document": MD, "keys": [change["key"]], "decision": "accept"}),
        content_type="application/json",
        **bearer(secret),
    )
    approved = Client().post(api(layout, f"/proposals/{proposal.pk}/approve"), **bearer(secret))
    again = Client().post(api(layout, f"/proposals/{proposal.pk}/approve"), **bearer(secret))

    assert decided.status_code == 200
    assert [c["decision"] for c in decided.json()["changes"] if c["key"] == change["key"]] == [
        "accept"
    ]
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.APPROVED
    assert again.status_code == 409 and "was already approved by rev" in again.json()["detail"]
    current = Client().get(api(layout, "/documents/memory_md"), **bearer(secret)).json()
    assert current["text"] == proposal.memory_md or current["version"]["author_kind"] == "pipeline"
    assert "".join(e["text"] for e in current["entries"]) == current["text"]
    assert review.entries(current["text"])


def test_a_raw_document_is_the_exact_stored_bytes_of_that_version(layout):
    secret = token_for(make_user("ada", staff=True))
    v1 = curation.latest(layout, MD)
    curation.save_document(
        layout, MD, "# Task Group: new\n", user=None, reason="t", based_on=v1.number
    )

    old = Client().get(
        api(layout, f"/documents/memory_md/raw?version={v1.number}"), **bearer(secret)
    )
    new = Client().get(api(layout, "/documents/memory_md/raw"), **bearer(secret))

    assert old.content == curation.text_of(v1).encode() and new.content == b"# Task Group: new\n"
    assert new["X-Memoryui-Version"] == str(v1.number + 1)


def test_starting_a_run_without_a_model_is_a_503_and_an_active_run_a_409(model, layout, settings):
    secret = token_for(make_user("ada", staff=True))
    started = Client(enforce_csrf_checks=True).post(
        api(layout, "/runs?reextract=true"), **bearer(secret)
    )
    again = Client(enforce_csrf_checks=True).post(api(layout, "/runs"), **bearer(secret))
    status = Client().get(api(layout, f"/runs/{started.json()['id']}"), **bearer(secret))
    GenerationRun.objects.update(status=GenerationRun.Status.CANCELLED)
    settings.OPENAI_BASE_URL = ""
    settings.MEMORYUI_DEMO_MODEL = "off"
    unavailable = Client().post(api(layout, "/runs"), **bearer(secret))

    assert started.status_code == 201 and started.json()["status"] == "extracting"
    assert again.status_code == 409  # scripts send a token, no CSRF cookie or header
    assert again.status_code == 409 and "already in progress" in again.json()["detail"]
    assert status.json()["total"] == Rollout.objects.filter(layout=layout).count()
    assert (
        unavailable.status_code == 503 and "No model is configured" in unavailable.json()["detail"]
    )


def test_the_openapi_schema_validates_and_the_docs_load_without_a_cdn():
    schema = signed_in().get("/api/openapi.json")
    docs = signed_in().get("/api/docs")

    validate(schema.json())
    assert schema.json()["components"]["securitySchemes"]["TokenAuth"]["scheme"] == "bearer"
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in html and "cdn" not in html.lower()
    assert "script-src 'self'" in docs["Content-Security-Policy"]
    assert "<script>" not in html  # no inline script for the policy to block


def test_the_schema_says_a_download_is_a_tar_with_the_checksum_to_verify_it_by():
    paths = signed_in().get("/api/openapi.json").json()["paths"]
    for path in (
        "/api/workspaces/{name}/snapshots/{snapshot_id}",
        "/api/workspaces/{name}/exports/{snapshot_id}",
    ):
        ok = paths[path]["get"]["responses"]["200"]
        assert "application/x-tar" in ok["content"], path
        assert set(ok["headers"]) == {"Content-Length", "X-Memoryui-Sha256"}, path


def test_the_schema_and_docs_need_a_signed_in_person_or_a_valid_token():
    revoked = tokens.create_token(make_user("gone"), "old", [])
    tokens.revoke(revoked.token, user=revoked.token.user)
    valid = token_for(make_user("bot"))

    anonymous_schema = Client().get("/api/openapi.json")
    anonymous_docs = Client().get("/api/docs")
    revoked_schema = Client().get("/api/openapi.json", **bearer(revoked.secret))

    assert anonymous_schema.status_code == 401 == revoked_schema.status_code
    assert "Bearer <token>" in anonymous_schema.json()["detail"]
    assert anonymous_docs.status_code == 302
    assert anonymous_docs["Location"].startswith("/accounts/login/?next=/api/docs")
    assert Client().get("/api/openapi.json", **bearer(valid)).json()["info"]["title"] == (
        "memoryui API"
    )
    assert signed_in().get("/api/docs").status_code == 200


def test_skills_are_listed_and_each_file_is_served_as_its_exact_bytes(layout, fixtures_dir):
    secret = token_for(make_user("ada", staff=True))
    on_disk = fixtures_dir / "small-a/workspace/memories/engineering/skills"

    listed = Client().get(api(layout, "/skills"), **bearer(secret)).json()
    served = Client().get(
        api(layout, "/skills/run-plain-python-tests/files/SKILL.md"), **bearer(secret)
    )
    missing = Client().get(
        api(layout, "/skills/run-plain-python-tests/files/nope.md"), **bearer(secret)
    )
    climbing = Client().get(api(layout, "/skills/../files/MEMORY.md"), **bearer(secret))

    assert [s["name"] for s in listed] == ["run-plain-python-tests"]
    assert listed[0]["files"][0]["path"] == "SKILL.md"
    assert served.content == (on_disk / "run-plain-python-tests/SKILL.md").read_bytes()
    assert missing.status_code == 404 and missing.json()["detail"] == "No such skill file."
    assert climbing.status_code == 404


def test_every_request_body_has_examples_and_each_example_is_accepted(model, layout):
    secret = token_for(make_user("ada", staff=True))
    schema = Client().get("/api/openapi.json", **bearer(secret)).json()
    proposal = proposal_for(layout)
    real_key = _key(layout, proposal)
    # An agent's forgetting and skill change, for the examples that decide them.
    Proposal.objects.filter(pk=proposal.pk).update(
        forgotten=[FORGOTTEN], skill_changes={SKILL_FILE: {"old": None, "new": "Rerun.\n"}}
    )
    concrete = {"{name}": "a", "{layout_id}": str(layout.pk), "{proposal_id}": str(proposal.pk)}
    exercised = []
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            ref = content["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
            examples = schema["components"]["schemas"][ref].get("examples", [])
            assert examples, f"{method} {path} has no examples"
            url = path
            for placeholder, value in concrete.items():
                url = url.replace(placeholder, value)
            for example in examples:
                body = {**example, "keys": [real_key]} if "keys" in example else example
                response = Client().generic(
                    method.upper(), url, json.dumps(body), "application/json", **bearer(secret)
                )
                assert response.status_code in (200, 201, 409), (path, example, response.content)
                exercised.append((path, response.status_code))
    assert len(exercised) == 9, exercised
    assert [s for _, s in exercised].count(409) <= 1, exercised


def test_skills_are_served_as_curated_edited_added_and_deleted_files_included(layout):

    ada = make_user("ada", staff=True)
    secret = token_for(ada)
    skill_md = "skills/run-plain-python-tests/SKILL.md"
    current = skills.latest(layout, skill_md)
    skills.save(
        layout,
        skill_md,
        b"---\nname: edited\n---\nEdited in memoryui.\n",
        user=ada,
        based_on=current.number,
        action="skill.edit",
        reason="test",
    )
    skills.save(
        layout,
        "skills/deploy/SKILL.md",
        b"Deploy with the runbook.\n",
        user=ada,
        based_on=None,
        action="skill.add",
        reason="test",
    )

    listed = Client().get(api(layout, "/skills"), **bearer(secret)).json()
    served = Client().get(
        api(layout, "/skills/run-plain-python-tests/files/SKILL.md"), **bearer(secret)
    )
    skills.save(
        layout,
        "skills/deploy/SKILL.md",
        None,
        user=ada,
        based_on=1,
        action="skill.delete",
        reason="test",
    )
    after_delete = Client().get(api(layout, "/skills"), **bearer(secret)).json()
    deleted = Client().get(api(layout, "/skills/deploy/files/SKILL.md"), **bearer(secret))

    assert [s["name"] for s in listed] == ["deploy", "run-plain-python-tests"]
    assert listed[1]["files"][0]["version"] == current.number + 1
    assert served.content == b"---\nname: edited\n---\nEdited in memoryui.\n"
    assert [s["name"] for s in after_delete] == ["run-plain-python-tests"]
    assert deleted.status_code == 404


@pytest.mark.parametrize("debug", [True, False])
def test_a_body_over_the_limit_gets_a_clear_413_even_with_debug_on(layout, settings, debug):
    settings.DEBUG = debug
    secret = token_for(make_user("ada", staff=True))
    body = json.dumps({"document": MD, "keys": ["x" * (3 * 1024 * 1024)], "decision": "accept"})

    response = Client(raise_request_exception=False).post(
        api(layout, "/proposals/1/decisions"),
        body,
        content_type="application/json",
        **bearer(secret),
    )

    assert response.status_code == 413
    assert "larger than the 2,621,440 bytes" in response.json()["detail"]


def test_json_with_half_a_character_is_refused_with_a_clear_error(model, layout):
    """JSON may escape a lone UTF-16 surrogate ("\\ud800"): valid JSON, but no UTF-8
    holds it, so no text with one can be stored: the API refuses it naming the field (422),
    never a 500 from the database."""
    secret, proposal, change = reviewer_and_change(layout)
    body = {"document": MD, "keys": [change["key"]], "decision": "accept"}

    refused = Client().post(
        api(layout, f"/proposals/{proposal.pk}/decisions"),
        json.dumps({**body, "edited_text": "half \ud800 a character"}),
        content_type="application/json",
        **bearer(secret),
    )

    assert refused.status_code == 422, refused.content
    assert refused.json()["detail"].startswith("Invalid input: edited_text:")
    paired = Client().post(
        api(layout, f"/proposals/{proposal.pk}/decisions"),
        json.dumps({**body, "edited_text": "a whole one \U0001f680"}),
        content_type="application/json",
        **bearer(secret),
    )
    assert paired.status_code == 200, paired.content
