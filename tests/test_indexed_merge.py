"""A sandbox's upload is read whole and checked when it comes in, and where each member
sits is kept (the member index the restores copy by). Its merge reads the members by
those offsets too, instead of parsing the archive's headers again: the same rows as
parsing, and parsing again whenever the index does not fit the archive."""

import io
import tarfile
from pathlib import Path

import pytest
from django.test import Client

from generation import tree
from generation.tree import directory as tree_directory
from memoryui import tokens
from memoryui.importer import import_workspace
from memoryui.importer.reading import TreeReader
from memoryui.models import ImportJob, ImportJobIndex, UploadedSnapshot, WorkspaceFile
from memoryui.workspaces import run_import_job
from tests.factories import make_user
from tests.test_snapshot_store import S, sandbox


@pytest.fixture
def store(settings, tmp_path):
    settings.MEMORYUI_REMOTE_STORE_DIR = tmp_path / "store"
    return tmp_path / "store"


@pytest.fixture
def ops(db):
    user = make_user("ops", staff=True)
    return user, tokens.create_token(user, "t", ["w"]).secret


@pytest.fixture
def parses(monkeypatch) -> list[object]:
    """The archives parsed (``tree.read_archive``, or ``read_archive_lazily`` as an
    import reads) from now on."""
    parsed: list[object] = []
    for name, modules in (
        ("read_archive", (tree, tree_directory)),
        ("read_archive_lazily", (tree,)),
    ):
        real = getattr(tree, name)

        def counting(*args, real=real, **kwargs):
            parsed.append(args[0])
            return real(*args, **kwargs)

        for module in modules:
            monkeypatch.setattr(module, name, counting)
    return parsed


def put(secret: str, snapshot_id: str, data: bytes, capture) -> int:
    """PUT the archive; returns its merge job (not run yet)."""
    with capture(execute=False):
        answer = Client().put(
            f"/api/workspaces/w/snapshots/{snapshot_id}",
            data,
            content_type="application/x-tar",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )
    assert answer.status_code == 202, answer.content
    return answer.json()["import_job"]


def files_of(name: str) -> dict[str, tuple[object, ...]]:
    rows = WorkspaceFile.objects.filter(workspace__name=name)
    return {
        path: (blob, mode, mtime_ns, size, kind)
        for path, blob, mode, mtime_ns, size, kind in rows.values_list(
            "path", "blob_id", "mode", "mtime_ns", "size", "kind"
        )
    }


@pytest.mark.django_db
def test_a_merge_reads_the_upload_by_its_index_and_writes_what_parsing_writes(
    store, ops, django_capture_on_commit_callbacks, parses
):
    _, secret = ops
    own = {"README.md": b"sandbox X\n", "bin/run.sh": b"#!/bin/sh\necho x\n"}
    own["notes/" + "a-long-directory-name/" * 6 + "deep.txt"] = "naïve café\n".encode()
    data = sandbox("rx", own, links={"docs/readme.md": "../README.md"})
    job = put(secret, "x", data, django_capture_on_commit_callbacks)
    assert len(parses) == 1  # the upload's check read it whole, once
    parses.clear()

    done = run_import_job(job)

    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    assert parses == []  # the merge parsed no header: it read the members by offset
    by_index = files_of("w")
    assert f"{S}/rx.jsonl" in by_index and by_index["bin/run.sh"][1] == 0o755

    archive = Path(UploadedSnapshot.objects.get(snapshot_id="x").path)
    import_workspace(archive, "parsed", merge="x")
    assert len(parses) == 1
    assert files_of("parsed") == by_index


@pytest.mark.django_db
def test_a_merge_whose_archive_is_not_the_indexed_one_parses_it(
    store, ops, django_capture_on_commit_callbacks, parses
):
    _, secret = ops
    job = put(
        secret, "x", sandbox("rx", {"README.md": b"first\n"}), django_capture_on_commit_callbacks
    )
    stored = Path(UploadedSnapshot.objects.get(snapshot_id="x").path)
    stored.write_bytes(sandbox("rx", {"README.md": b"second, longer\n", "new.txt": b"n\n"}))
    parses.clear()

    done = run_import_job(job)

    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    assert len(parses) == 1  # each header checked, one did not fit: parsed instead
    files = files_of("w")
    assert files["README.md"][3] == len(b"second, longer\n") and "new.txt" in files


@pytest.mark.django_db
def test_an_upload_replaced_before_its_merge_is_still_merged_by_its_own_index(
    store, ops, django_capture_on_commit_callbacks, parses
):
    """A sandbox persists twice before a worker gets to the first merge (the backlog of
    many sandboxes): the second upload replaces the id's index for restores, yet the
    first merge still reads its archive by the index made when it came in. Each merge
    drops its job's index once done."""
    _, secret = ops
    first = put(
        secret, "x", sandbox("rx", {"README.md": b"first\n"}), django_capture_on_commit_callbacks
    )
    second = put(
        secret,
        "x",
        sandbox("rx", {"README.md": b"second\n", "new.txt": b"n\n"}),
        django_capture_on_commit_callbacks,
    )
    parses.clear()

    done = run_import_job(first)

    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    assert parses == []  # its members read by offset, though no longer the id's latest
    assert files_of("w")["README.md"][3] == len(b"first\n")
    assert not ImportJobIndex.objects.filter(job_id=first).exists()
    assert ImportJobIndex.objects.filter(job_id=second).exists()

    done = run_import_job(second)

    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    assert parses == []
    files = files_of("w")
    assert files["README.md"][3] == len(b"second\n") and "new.txt" in files
    assert not ImportJobIndex.objects.exists()


@pytest.mark.django_db
def test_an_upload_merged_after_its_sandboxs_later_one_reads_only_what_the_workspace_lacks(
    store, ops, django_capture_on_commit_callbacks, monkeypatch
):
    """The later upload of a sandbox is merged first (a backlog is merged newest first):
    the older one's merge reads only the members of files the workspace lacks, adds
    them, and leaves every other file (bytes, mode and mtime) as the later upload left
    it."""
    _, secret = ops
    older = sandbox("rx", {"README.md": b"first\n", "only-first.txt": b"f\n"})
    first = put(secret, "x", older, django_capture_on_commit_callbacks)
    later = sandbox("rx", {"README.md": b"second, longer\n"})
    second = put(secret, "x", later, django_capture_on_commit_callbacks)
    assert run_import_job(second).status == ImportJob.Status.DONE
    after_later = files_of("w")
    read: list[str] = []
    real = TreeReader._member_bytes

    def counting(self, fh, path, offset, size):
        read.append(path)
        return real(self, fh, path, offset, size)

    monkeypatch.setattr(TreeReader, "_member_bytes", counting)

    done = run_import_job(first)

    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    assert read == ["only-first.txt"]
    files = files_of("w")
    assert files.pop("only-first.txt")[3] == 2
    assert files == after_later
    assert (done.run.added, done.run.changed) == (1, 0)
    assert done.run.unchanged == len(tarfile.open(fileobj=io.BytesIO(older)).getnames()) - 1


@pytest.mark.django_db
def test_an_older_upload_whose_files_the_workspace_holds_is_merged_from_its_index_alone(
    store, ops, django_capture_on_commit_callbacks
):
    """An older upload of a sandbox merged after its later one, when the workspace holds
    every file it has: its archive is neither copied nor opened (here it is gone), and
    its run records its files as unchanged."""
    _, secret = ops
    first = put(
        secret, "x", sandbox("rx", {"README.md": b"first\n"}), django_capture_on_commit_callbacks
    )
    later = sandbox("rx", {"README.md": b"second, longer\n", "new.txt": b"n\n"})
    second = put(secret, "x", later, django_capture_on_commit_callbacks)
    assert run_import_job(second).status == ImportJob.Status.DONE
    before = files_of("w")
    archive = Path(ImportJob.objects.get(pk=first).source_path)
    archive.unlink()

    done = run_import_job(first)

    assert done is not None and done.status == ImportJob.Status.DONE, done and done.error
    assert (done.run.added, done.run.changed) == (0, 0)
    # The same problems as the later upload's files have (one of the fixture's).
    assert done.run.report["errors"] == ImportJob.objects.get(pk=second).run.report["errors"]
    assert files_of("w") == before
    assert not ImportJobIndex.objects.exists()


def test_the_index_check_finds_every_header_across_windows_and_any_that_differs(tmp_path):
    """``check_indexed`` reads the headers a window of the file at a time: an archive of
    several windows (small members, then one larger than a window) fits its own index,
    and a member grown by one byte, or the file cut inside a header, does not."""

    def archive(path: Path, sizes: list[int]) -> list[tuple]:
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for n, size in enumerate(sizes):
                info = tarfile.TarInfo(f"f/{n:05d}.bin")
                info.size = size
                tar.addfile(info, io.BytesIO(bytes([n % 251]) * size))
        index = tree.ArchiveIndex()
        for _ in tree.read_archive(path, tree.Limits(), links=True, index=index):
            pass
        return tree.unpack_index(tree.pack_index(index))

    sizes = [700] * 3000 + [3 * 1024 * 1024] + [10] * 50  # ~6 MiB: several 1 MiB windows
    good = tmp_path / "good.tar"
    rows = archive(good, sizes)
    with good.open("rb") as fh:
        tree.check_indexed(fh, rows)  # fits

    other = tmp_path / "other.tar"
    archive(other, [*sizes[:2500], 701, *sizes[2501:]])
    with other.open("rb") as fh, pytest.raises(tree.IndexMismatch, match="02500"):
        tree.check_indexed(fh, rows)

    cut = tmp_path / "cut.tar"
    last_header = rows[-1][5] - 512
    cut.write_bytes(good.read_bytes()[: last_header + 100])
    with cut.open("rb") as fh, pytest.raises(tree.IndexMismatch, match=rows[-1][0]):
        tree.check_indexed(fh, rows)
