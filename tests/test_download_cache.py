"""Sandbox restores are built once and sent again while nothing they are made of has
changed; any change to the served memory, the upload or the workspace's memory files
builds the archive again, so a kept archive never serves memory a reviewer withdrew."""

import hashlib
import os
import time

import pytest
from django.test import Client
from django.urls import reverse

from generation import export
from memoryui import (
    curation,
    download_cache,
    snapshot_members,
    snapshot_restores,
    snapshots,
)
from memoryui.models import AuditEvent, MemoryVersion, Workspace, WorkspaceFile
from memoryui.snapshots import EXPORT_DOWNLOAD_ACTION
from tests.test_snapshot_store import (
    AGENTS_MD,
    APPROVED_MD,
    MEMORY_MD,
    M,
    accept_all,
    accepted,
    layout,
    raw_memory,
    sandbox,
    upload,
)
from tests.test_snapshot_store import download as restore
from tests.test_snapshot_store import ops as ops_fixture
from tests.test_snapshot_store import store as store_fixture

store, ops = store_fixture, ops_fixture  # the snapshot store's fixtures, by their names


@pytest.fixture
def builds(monkeypatch) -> list[int]:
    """One entry per archive written (``write_snapshot_to``): what a restore built."""
    built: list[int] = []
    real = export.write_snapshot_to

    def counting(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(export, "write_snapshot_to", counting)
    return built


def raw(secret: str, snapshot_id: str) -> tuple[bytes, str]:
    answer = Client().get(
        f"/api/workspaces/w/snapshots/{snapshot_id}", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert answer.status_code == 200, answer.content
    body = b"".join(answer.streaming_content)
    assert int(answer["Content-Length"]) == len(body)
    assert answer["X-Memoryui-Sha256"] == hashlib.sha256(body).hexdigest()
    return body, answer["X-Memoryui-Sha256"]


@pytest.mark.django_db
def test_a_second_restore_of_an_unchanged_workspace_is_sent_without_being_built(
    store, ops, django_capture_on_commit_callbacks, builds
):
    secret = accepted(ops, django_capture_on_commit_callbacks, {"README.md": b"X\n"})

    first, first_sha = raw(secret, "x")
    second, second_sha = raw(secret, "x")

    assert len(builds) == 1
    assert second == first and second_sha == first_sha
    # Each restore is audited, with whether it was built for it.
    events = AuditEvent.objects.filter(action=EXPORT_DOWNLOAD_ACTION).order_by("pk")
    assert [e.detail["built"] for e in events] == [True, False]
    assert {e.detail["sha256"] for e in events} == {first_sha}


@pytest.mark.django_db
def test_a_withdrawn_memory_is_never_sent_from_a_kept_archive(
    store, ops, django_capture_on_commit_callbacks, builds
):
    """The agent's MEMORY.md, accepted, reaches a restore; once the reviewer restores
    the version before it, the next restore is built again and holds that version's
    text, not the kept archive's."""
    user, secret = ops[0], accepted(ops, django_capture_on_commit_callbacks)
    approved = curation.latest(layout(), MEMORY_MD).number
    upload(secret, "y", sandbox("ry", {}, memory_md=AGENTS_MD), django_capture_on_commit_callbacks)
    pending = curation.latest(layout(), MEMORY_MD)
    assert pending.needs_review
    assert restore(secret, "x")[f"{M}/MEMORY.md"] == APPROVED_MD
    curation.accept_agent_change(pending, user=user)
    assert restore(secret, "x")[f"{M}/MEMORY.md"] == AGENTS_MD

    page = Client()
    page.force_login(user)
    answer = page.post(
        reverse("memoryui:version_restore", args=["w", layout().pk, "memory_md", approved])
    )

    assert answer.status_code == 302
    assert restore(secret, "x")[f"{M}/MEMORY.md"] == APPROVED_MD
    assert len(builds) == 3


@pytest.mark.django_db
def test_a_version_awaiting_review_changes_no_kept_archive(
    store, ops, django_capture_on_commit_callbacks, builds
):
    """An agent's upload records a version to review: what sandboxes get is the same,
    so the kept archive of another id is sent as it is, unless files it holds changed
    (that upload's raw memory joins the layout, so x's archive is built again)."""
    secret = accepted(ops, django_capture_on_commit_callbacks)
    before, _ = raw(secret, "x")
    MemoryVersion.objects.create(
        layout=layout(),
        document=MEMORY_MD,
        number=curation.latest(layout(), MEMORY_MD).number + 1,
        blob_id=curation.latest(layout(), MEMORY_MD).blob_id,
        author_kind=MemoryVersion.Author.AGENT,
        needs_review=True,
    )

    after, _ = raw(secret, "x")

    assert after == before and len(builds) == 1
    upload(secret, "y", sandbox("ry", {}), django_capture_on_commit_callbacks)
    assert restore(secret, "x")[f"{M}/raw_memories/ry.md"] == raw_memory("ry")
    assert len(builds) == 2


@pytest.mark.django_db
def test_a_new_upload_of_the_same_id_is_restored_as_uploaded(
    store, ops, django_capture_on_commit_callbacks
):
    user, secret = ops
    upload(
        secret, "x", sandbox("rx", {"README.md": b"first\n"}), django_capture_on_commit_callbacks
    )
    accept_all(user)
    assert restore(secret, "x")["README.md"] == b"first\n"

    upload(
        secret, "x", sandbox("rx", {"README.md": b"second\n"}), django_capture_on_commit_callbacks
    )

    assert restore(secret, "x")["README.md"] == b"second\n"


@pytest.mark.django_db
def test_a_changed_mode_or_time_alone_builds_the_archive_again(
    store, ops, django_capture_on_commit_callbacks
):
    """A re-import that finds a file's mode or modification time changed (its bytes the
    same) updates them alone: the restore's headers follow."""
    secret = accepted(ops, django_capture_on_commit_callbacks)
    path = f"{M}/raw_memories/rx.md"
    assert restore(secret, "x")[f"mode:{path}"].mode == 0o644  # type: ignore[union-attr]

    WorkspaceFile.objects.filter(path=path).update(mode=0o600, mtime_ns=1_800_000_000 * 10**9)

    served = restore(secret, "x")[f"mode:{path}"]
    assert served.mode == 0o600 and served.mtime == 1_800_000_000  # type: ignore[union-attr]


@pytest.mark.django_db
def test_one_archive_is_kept_per_id_and_the_least_recently_sent_go_past_the_limit(
    store, ops, django_capture_on_commit_callbacks, settings, own_download_cache
):
    secret = accepted(ops, django_capture_on_commit_callbacks)
    size = len(raw(secret, "a")[0])
    settings.MEMORYUI_DOWNLOAD_CACHE_BYTES = 2 * size + size // 2  # room for two
    raw(secret, "b")
    assert len(list(own_download_cache.rglob("*.tar"))) == 2
    raw(secret, "a")  # a is now the more recently sent

    raw(secret, "c")

    folders = sorted(p.parent.name for p in own_download_cache.rglob("*.tar"))
    assert folders == ["a", "c"]
    upload(secret, "y", sandbox("ry", {}), django_capture_on_commit_callbacks)
    raw(secret, "a")  # the layout gained ry's files: a new archive replaces a's old one
    assert sorted(p.parent.name for p in own_download_cache.rglob("*.tar")) == ["a", "c"]


@pytest.mark.django_db
def test_a_damaged_kept_archive_is_built_again(
    store, ops, django_capture_on_commit_callbacks, builds, own_download_cache
):
    secret = accepted(ops, django_capture_on_commit_callbacks, {"README.md": b"X\n"})
    whole, _ = raw(secret, "x")
    [archive] = own_download_cache.rglob("*.tar")
    os.truncate(archive, len(whole) // 2)

    again, _ = raw(secret, "x")  # checked against its length and sha256 there

    assert len(builds) == 2 and len(again) == len(whole)
    assert restore(secret, "x")["README.md"] == b"X\n"


@pytest.mark.django_db
def test_with_no_room_every_restore_is_built_and_nothing_is_kept(
    store, ops, django_capture_on_commit_callbacks, builds, settings, own_download_cache
):
    user, secret = ops
    settings.MEMORYUI_DOWNLOAD_CACHE_BYTES = 0
    upload(secret, "x", sandbox("rx", {}), django_capture_on_commit_callbacks)
    accept_all(user)

    first, _ = raw(secret, "x")
    second, _ = raw(secret, "x")

    assert len(builds) == 2 and len(first) == len(second)
    assert list(own_download_cache.rglob("*")) == []


@pytest.mark.django_db
def test_a_cache_folder_that_cannot_be_written_still_restores(
    store, ops, django_capture_on_commit_callbacks, settings, tmp_path, caplog
):
    user, secret = ops
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be\n")
    settings.MEMORYUI_DOWNLOAD_CACHE_DIR = blocker
    upload(secret, "x", sandbox("rx", {"README.md": b"X\n"}), django_capture_on_commit_callbacks)
    accept_all(user)

    assert restore(secret, "x")["README.md"] == b"X\n"
    assert "sandbox download not kept" in caplog.text


@pytest.fixture
def frozen(monkeypatch):
    """One clock for every build: archives of the same state are then byte for byte
    the same, however they were built."""
    monkeypatch.setattr(snapshot_restores.time, "time_ns", lambda: 1_790_000_000 * 10**9)


@pytest.fixture
def fetched(monkeypatch) -> list[set[str]]:
    """The blobs each build read from the database to write anew, having a previous
    archive to copy the rest from."""
    calls: list[set[str]] = []
    real = snapshot_members.blob_contents

    def counting(blob_ids):
        calls.append(set(blob_ids))
        return real(blob_ids)

    monkeypatch.setattr(snapshot_members, "blob_contents", counting)
    return calls


def blob_of(path: str) -> str:
    return WorkspaceFile.objects.get(path=path).blob_id


@pytest.mark.django_db
def test_a_restore_after_a_change_copies_the_unchanged_memory_from_the_previous_archive(
    store, ops, django_capture_on_commit_callbacks, frozen, fetched, own_download_cache, monkeypatch
):
    """Another sandbox's upload merges its raw memory and summary into the layout: the
    next restore of x reads those two from the database, copies every other memory
    file and x's own files (its upload unchanged) from the archive kept before, and is
    the archive a build from nothing makes."""
    own = {"README.md": b"X\n", "bin/run.sh": b"#!/bin/sh\n", "d/" + "long-name/" * 12 + "f": b"f"}
    links = {"docs/readme.md": "../README.md"}
    secret = accepted(ops, django_capture_on_commit_callbacks, own, links=links)
    raw(secret, "x")
    assert fetched == []  # nothing kept yet: built from nothing
    upload(secret, "y", sandbox("ry", {}), django_capture_on_commit_callbacks)
    offsets: list[str] = []
    real = snapshot_restores._indexed_members
    monkeypatch.setattr(
        snapshot_restores,
        "_indexed_members",
        lambda *args: offsets.append("read") or real(*args),  # type: ignore[func-returns-value]
    )

    reused, _ = raw(secret, "x")

    new = {f"{M}/raw_memories/ry.md", f"{M}/rollout_summaries/ry_work.md"}
    assert fetched == [{blob_of(path) for path in new}] and offsets == []
    for path in own_download_cache.rglob("*.tar*"):
        path.unlink()  # nothing kept: built from nothing
    from_nothing, _ = raw(secret, "x")
    assert reused == from_nothing and len(fetched) == 1 and offsets == ["read"]
    link = restore(secret, "x")["docs/readme.md"]
    assert link.issym() and link.linkname == "../README.md"  # type: ignore[union-attr]


@pytest.mark.django_db
def test_a_fresh_sandboxs_first_restore_copies_the_memory_another_id_was_sent(
    store, ops, django_capture_on_commit_callbacks, frozen, fetched
):
    secret = accepted(ops, django_capture_on_commit_callbacks, {"README.md": b"X\n"})
    raw(secret, "x")

    fresh = restore(secret, "fresh")

    assert fetched == [set()]  # every memory file copied, none read
    assert fresh[f"{M}/raw_memories/rx.md"] == raw_memory("rx") and "README.md" not in fresh
    assert fresh[f"{M}/MEMORY.md"] == APPROVED_MD


@pytest.mark.django_db
def test_a_previous_archive_without_a_usable_map_is_not_copied_from(
    store, ops, django_capture_on_commit_callbacks, fetched, own_download_cache
):
    secret = accepted(ops, django_capture_on_commit_callbacks)
    raw(secret, "x")
    [mapped] = own_download_cache.rglob("*.map")
    mapped.write_bytes(mapped.read_bytes()[:-7])  # cut short
    download_cache.forget_last_map()  # the next restore is served by another process

    served = restore(secret, "fresh")

    assert fetched == [] and served[f"{M}/raw_memories/rx.md"] == raw_memory("rx")


@pytest.mark.django_db
def test_when_much_changed_the_memory_is_read_whole_rather_than_blob_by_blob(
    store, ops, django_capture_on_commit_callbacks, fetched, monkeypatch
):
    secret = accepted(ops, django_capture_on_commit_callbacks)
    raw(secret, "x")
    upload(secret, "y", sandbox("ry", {}), django_capture_on_commit_callbacks)
    monkeypatch.setattr(snapshot_members, "REUSE_FETCH_BYTES", 10)  # ry's files weigh more

    served = restore(secret, "x")

    assert fetched == [] and served[f"{M}/raw_memories/ry.md"] == raw_memory("ry")


@pytest.mark.django_db
def test_an_archive_built_while_the_workspace_changed_is_sent_but_not_kept(
    store, ops, django_capture_on_commit_callbacks, monkeypatch, own_download_cache
):
    """The key is made of the rows read first; a build from nothing reads them again
    with their contents. If they differ (an import landed between the two), the
    archive is not what the key says: it is sent, and not kept under that key."""
    secret = accepted(ops, django_capture_on_commit_callbacks)
    real = snapshot_restores.file_rows

    def moved(files):
        for path, kind, mode, mtime_ns, blob, data in real(files):
            yield (path, kind, mode, mtime_ns + 10**9, blob, data)  # touched meanwhile

    monkeypatch.setattr(snapshot_restores, "file_rows", moved)

    served = restore(secret, "x")

    assert served[f"{M}/raw_memories/rx.md"] == raw_memory("rx")
    assert list(own_download_cache.rglob("*.tar")) == []


@pytest.mark.django_db
def test_what_a_process_that_died_mid_write_left_goes_once_it_is_an_hour_old(
    store, ops, django_capture_on_commit_callbacks, own_download_cache
):
    """A restore or export killed while writing leaves its temporary file (or an export
    to object storage its folder): the next build removes those an hour old, and leaves
    those another process may be writing now."""
    secret = accepted(ops, django_capture_on_commit_callbacks)
    raw(secret, "x")
    [folder] = {p.parent for p in own_download_cache.rglob("*.tar")}
    hour_ago = time.time() - download_cache.STALE_SECONDS - 60
    left = {
        "dead": folder / f".{'0' * 64}.abcdef.tmp",
        "writing": folder / f".{'1' * 64}.abcdef.tmp",
        "dead export": own_download_cache / f"{download_cache.SCRATCH_PREFIX}dead",
        "export writing": own_download_cache / f"{download_cache.SCRATCH_PREFIX}now",
    }
    for name, path in left.items():
        if "export" in name:
            path.mkdir()
            (path / "x.tar").write_bytes(b"half an archive")
        else:
            path.write_bytes(b"half an archive")
        if "dead" in name:
            os.utime(path, (hour_ago, hour_ago))
    upload(secret, "y", sandbox("ry", {}), django_capture_on_commit_callbacks)

    raw(secret, "x")  # built again: the cache is tidied

    assert {name for name, path in left.items() if path.exists()} == {"writing", "export writing"}


@pytest.mark.django_db
def test_a_restore_copies_the_memory_files_an_export_of_the_workspace_wrote(
    store, ops, django_capture_on_commit_callbacks, fetched, tmp_path
):
    """A build starts from the workspace's last archive, an export's included: its raw
    memories and summaries are the same bytes a restore writes."""
    secret = accepted(ops, django_capture_on_commit_callbacks)
    snapshots.export_snapshot(
        Workspace.objects.get(name="w"), snapshot_id="nightly", base_path=tmp_path / "out"
    )

    fresh = restore(secret, "fresh")

    assert fetched == [set()]  # every memory file copied from the export, none read
    assert fresh[f"{M}/raw_memories/rx.md"] == raw_memory("rx")
    assert fresh[f"{M}/MEMORY.md"] == APPROVED_MD
