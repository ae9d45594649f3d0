"""An export copies the files unchanged since the workspace's previous archive from it,
kept as a link to the file that export wrote; never from a file rewritten since."""

import os
import tarfile
import tracemalloc

import pytest

from memoryui import snapshot_members, snapshots
from memoryui.importer import import_workspace
from memoryui.models import MemoryVersion
from tests.factories import curate

pytestmark = pytest.mark.django_db
MD = MemoryVersion.Document.MEMORY_MD


@pytest.fixture
def frozen(monkeypatch):
    monkeypatch.setattr(snapshot_members.time, "time_ns", lambda: 1_790_000_000 * 10**9)


@pytest.fixture
def copies(monkeypatch) -> list[tuple[int, int]]:
    """(members copied, members written anew) of each export."""
    counts: list[tuple[int, int]] = []
    real = snapshots.Reuser

    class Counting(real):  # type: ignore[misc, valid-type]
        def archive_map(self):
            counts.append((self.copied, self.built))
            return super().archive_map()

    monkeypatch.setattr(snapshots, "Reuser", Counting)
    return counts


def export(layout, snapshot_id: str, out):
    return snapshots.export_snapshot(layout.workspace, snapshot_id=snapshot_id, base_path=out)


def test_a_second_export_writes_anew_only_what_changed_since_the_first(
    layout, tmp_path, frozen, copies, own_download_cache
):
    out = tmp_path / "out"
    export(layout, "first", out)
    curate(layout, MD, "## Curated\n- keep the canary\n")

    second = export(layout, "second", out)

    (copied, built), _ = copies[1], copies[0]
    assert copies[0][0] == 0 and copied > 20 and built <= 3  # MEMORY.md and its folders
    for kept in own_download_cache.rglob("*.tar*"):
        kept.unlink()
    third = export(layout, "third", out)
    assert copies[2][0] == 0
    assert (out / "second.tar").read_bytes() == (out / "third.tar").read_bytes()
    assert second.snapshot.sha256 == third.snapshot.sha256


def test_an_exported_file_rewritten_in_place_is_not_copied_from(layout, tmp_path, frozen, copies):
    """The kept export is a link to the exported file: should something rewrite that
    file in place (a sandbox persisting to the same id, say), its time moves and the
    next export builds from nothing rather than copy bytes it did not write."""
    out = tmp_path / "out"
    export(layout, "first", out)
    with (out / "first.tar").open("r+b") as fh:
        fh.seek(2048)
        fh.write(b"\0" * 512)  # another file's bytes, same size

    second = export(layout, "second", out)

    assert copies[1][0] == 0
    with tarfile.open(out / "second.tar") as archive:
        names = archive.getnames()
    assert "./memories/engineering/MEMORY.md" in names and second.snapshot.members == len(names)


def test_an_export_with_no_room_to_keep_it_builds_the_next_from_nothing(
    layout, tmp_path, copies, settings, own_download_cache
):
    settings.MEMORYUI_DOWNLOAD_CACHE_BYTES = 0
    out = tmp_path / "out"
    export(layout, "first", out)
    export(layout, "second", out)

    assert [c[0] for c in copies] == [0, 0] and list(own_download_cache.rglob("*")) == []


@pytest.mark.parametrize("changed", [12, 40])
def test_an_export_built_from_the_previous_one_holds_a_few_mib_in_memory(
    db, tmp_path, workspace_copy, copies, changed, monkeypatch
):
    """24 MiB of files, then ``changed`` of them rewritten (3 MiB: fetched by their blob;
    10 MiB: more than the bound, so read in batches as without a previous archive): the
    second export holds a few MiB either way."""
    source = workspace_copy()
    (source / "bulk").mkdir()
    for i in range(96):
        (source / "bulk" / f"blob-{i:03}.bin").write_bytes(os.urandom(256 * 1024))
    workspace = import_workspace(source, "big").workspace
    snapshots.export_snapshot(workspace, snapshot_id="first", base_path=tmp_path / "out")
    for i in range(changed):
        (source / "bulk" / f"blob-{i:03}.bin").write_bytes(os.urandom(256 * 1024))
    import_workspace(source, "big")
    fetched: list[int] = []
    real = snapshot_members.blob_contents
    monkeypatch.setattr(
        snapshot_members, "blob_contents", lambda ids: fetched.append(len(ids)) or real(ids)
    )

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        second = snapshots.export_snapshot(
            workspace, snapshot_id="second", base_path=tmp_path / "out"
        )
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()

    assert peak < 16 * 1024 * 1024, f"the export held {peak / 2**20:.1f} MiB"
    assert fetched == ([changed] if changed == 12 else [])  # by blob, or streamed
    copied, built = copies[1]
    assert copied > 50 and built >= changed  # the unchanged copied either way
    with tarfile.open(tmp_path / "out" / "second.tar") as archive:
        name = "./bulk/blob-000.bin"
        assert archive.extractfile(name).read() == (source / "bulk" / "blob-000.bin").read_bytes()  # type: ignore[union-attr]
    assert second.snapshot.size > 24 * 1024 * 1024


def test_a_file_rewritten_while_an_export_copies_from_it_is_built_again_from_nothing(
    layout, tmp_path, frozen, copies, monkeypatch, own_download_cache, caplog
):
    """The kept export is checked once more after the copy: rewritten in place meanwhile
    (its time moved), the archive is built again with nothing copied."""
    out = tmp_path / "out"
    export(layout, "first", out)
    curate(layout, MD, "## Curated\n- keep the canary\n")
    [kept] = own_download_cache.rglob("*.tar")
    real = snapshots.Reuser.members

    def rewriting(self, rows):
        if self.previous is not None:
            with kept.open("r+b") as fh:  # a sandbox persisting over the exported file
                fh.seek(2048)
                fh.write(b"\0" * 512)
        return real(self, rows)

    monkeypatch.setattr(snapshots.Reuser, "members", rewriting)

    second = export(layout, "second", out)

    assert "changed meanwhile" in caplog.text  # it copied, then saw the file had changed
    assert [copied for copied, _ in copies] == [0, 0]  # the export that stands: from nothing
    for left in own_download_cache.rglob("*.tar*"):
        left.unlink()
    third = export(layout, "third", out)
    assert second.snapshot.sha256 == third.snapshot.sha256
