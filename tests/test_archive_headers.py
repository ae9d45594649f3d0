"""Tar extended headers (PAX, GNU long name and long link) count against the import
limits like member data, and a header-heavy archive is refused while it is read, with
bounded memory, on every path that reads archives: the reader itself, the dashboard's
upload, the snapshot store's upload and the import of a ``.tar`` snapshot."""

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from generation import tree
from generation.tree import Entry, Limits, Problem, read_archive
from memoryui import tokens
from memoryui.importer import import_workspace
from memoryui.models import UploadedSnapshot, Workspace
from tests.factories import make_user

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


def header_bomb(path: Path, *, kind: bytes = tarfile.XHDTYPE, size: int = 512 * MiB) -> Path:
    """A gzip tar whose first member is an extended header declaring ``size`` bytes
    (zeros, so it compresses ~1000:1), followed by one ordinary file; written in
    chunks, never whole in memory."""
    header = tarfile.TarInfo("././@PaxHeader" if kind in (b"x", b"g") else "././@LongLink")
    header.type = kind
    header.size = size
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(header.tobuf(format=tarfile.USTAR_FORMAT))
        zeros = bytes(MiB)
        left = size + (-size % tarfile.BLOCKSIZE)
        while left:
            out.write(zeros[: min(left, MiB)])
            left -= min(left, MiB)
        info = tarfile.TarInfo("README.md")
        info.size = 3
        out.write(info.tobuf(format=tarfile.USTAR_FORMAT) + b"hi\n".ljust(512, b"\0"))
        out.write(bytes(2 * tarfile.BLOCKSIZE))
    return path


@pytest.fixture(scope="module")
def pax_bomb(tmp_path_factory) -> Path:
    return header_bomb(tmp_path_factory.mktemp("bomb") / "pax-bomb.tar.gz")


def split(read):
    items = list(read)
    entries = [i for i in items if isinstance(i, Entry)]
    return entries, [i for i in items if isinstance(i, Problem)]


def tar_bytes(members: list[tuple[str, bytes]], *, fmt: int = tarfile.PAX_FORMAT, **pax) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt, pax_headers=pax or None) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


MEASURE = """
import json, sys
from pathlib import Path
from generation import tree
path = Path(sys.argv[1])
items = list(tree.read_archive(path))
try:
    tree.check_tar_archive(path)
    checked = ""
except tree.TreeError as exc:
    checked = str(exc)
print(json.dumps({
    "problems": [[i.path, i.error, i.stops] for i in items if isinstance(i, tree.Problem)],
    "entries": [i.path for i in items if isinstance(i, tree.Entry)],
    "checked": checked,
    # VmHWM: this process's peak resident memory (getrusage's ru_maxrss would also
    # carry the forking pytest process's peak over the exec).
    "peak_rss_kib": int(next(
        line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")
    )),
}))
"""


def test_a_512_mib_pax_header_in_a_small_archive_is_refused_with_bounded_memory(pax_bomb):
    assert pax_bomb.stat().st_size < 600 * 1024  # ~510 KiB on the wire

    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(pax_bomb)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["entries"] == []
    ((path, error, stops),) = result["problems"]
    assert path == "pax-bomb.tar.gz" and stops
    assert "extended tar headers (PAX or GNU long names) declare 512.0 MB" in error
    assert "over the 1.0 MB limit" in error
    assert "512.0 MB" in result["checked"]  # the dashboard's check says the same
    assert result["peak_rss_kib"] < 200 * 1024, result["peak_rss_kib"]


@pytest.mark.parametrize(
    "kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK]
)
def test_every_kind_of_extended_header_past_the_limit_stops_the_read(tmp_path, kind):
    bomb = header_bomb(tmp_path / "bomb.tar.gz", kind=kind, size=3 * MiB)

    entries, problems = split(read_archive(bomb))

    assert entries == []
    assert [p.stops for p in problems] == [True]
    assert "declare 3.0 MB, over the 1.0 MB limit" in problems[0].error


def test_ordinary_long_names_and_pax_records_still_read(tmp_path):
    long_name = "deep/" * 40 + "file.md"  # 207 characters: a PAX or GNU long-name header
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        path = tmp_path / f"long-{fmt}.tar"
        path.write_bytes(tar_bytes([(long_name, b"x"), ("README.md", b"hi")], fmt=fmt))

        entries, problems = split(read_archive(path))

        assert problems == []
        assert {e.path: e.data for e in entries} == {long_name: b"x", "README.md": b"hi"}


def test_header_bytes_count_against_the_total_like_member_data(tmp_path):
    padding = "p" * (200 * 1024)  # each member carries a 200 KB PAX record
    path = tmp_path / "headers.tar"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for i in range(8):
            info = tarfile.TarInfo(f"f{i}.md")
            info.size = 1
            info.pax_headers = {"comment": padding}
            archive.addfile(info, io.BytesIO(b"x"))
    path.write_bytes(out.getvalue())

    whole, _ = split(read_archive(path, Limits(max_total_bytes=4 * MiB)))
    entries, problems = split(read_archive(path, Limits(max_total_bytes=MiB)))

    assert len(whole) == 8
    assert len(entries) < 8
    assert problems[-1].stops and "expands past 1.0 MB" in problems[-1].error


def test_a_chain_of_many_small_headers_for_one_member_is_refused(tmp_path):
    out = io.BytesIO()
    for _ in range(40):  # a PAX header per block, all for the member that follows
        record = b"18 comment=hello\n"
        header = tarfile.TarInfo("././@PaxHeader")
        header.type = tarfile.XHDTYPE
        header.size = len(record)
        out.write(header.tobuf(format=tarfile.USTAR_FORMAT) + record.ljust(512, b"\0"))
    out.write(tar_bytes([("a.md", b"x")], fmt=tarfile.USTAR_FORMAT))
    path = tmp_path / "chain.tar"
    path.write_bytes(out.getvalue())

    entries, problems = split(read_archive(path))

    assert entries == []
    assert problems[0].stops and "more than 16 extended tar headers" in problems[0].error


def test_a_gnu_sparse_member_is_refused(tmp_path):
    info = tarfile.TarInfo("sparse.bin")
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = 0
    path = tmp_path / "sparse.tar"
    plain = tarfile.TarInfo("a.md")
    plain.size = 1
    path.write_bytes(
        plain.tobuf(format=tarfile.GNU_FORMAT)
        + b"x".ljust(512, b"\0")
        + info.tobuf(format=tarfile.GNU_FORMAT)
        + bytes(1024)
    )

    entries, problems = split(read_archive(path))

    assert [e.path for e in entries] == ["a.md"]
    assert problems[-1].stops and "GNU sparse member" in problems[-1].error


# --- every path that reads an archive ------------------------------------------------


@pytest.fixture
def small_bomb(tmp_path) -> bytes:
    return header_bomb(tmp_path / "bomb.tar.gz", size=8 * MiB).read_bytes()


@pytest.mark.django_db
def test_the_snapshot_store_refuses_a_header_bomb_and_keeps_nothing(settings, tmp_path, small_bomb):
    settings.MEMORYUI_REMOTE_STORE_DIR = tmp_path / "store"
    secret = tokens.create_token(make_user("ops", staff=True), "t", ["sandbox"]).secret

    response = Client().put(
        "/api/workspaces/sandbox/snapshots/s1",
        small_bomb,
        content_type="application/x-tar",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )

    assert response.status_code == 413
    assert "over the 1.0 MB limit" in response.json()["detail"]
    assert UploadedSnapshot.objects.count() == 0 and not Workspace.objects.exists()
    assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == []


@pytest.mark.django_db
def test_the_dashboard_upload_refuses_a_header_bomb(settings, tmp_path, small_bomb):
    settings.MEMORYUI_UPLOAD_DIR = tmp_path / "uploads"
    client = Client()
    client.force_login(make_user("admin", staff=True))

    response = client.post(
        reverse("memoryui:workspace_upload"),
        {"name": "bomb", "snapshot": SimpleUploadedFile("bomb.tar.gz", small_bomb)},
    )

    assert response.status_code == 400
    assert "bomb.tar.gz is refused" in response.content.decode()
    assert "over the 1.0 MB limit" in response.content.decode()
    assert not Workspace.objects.filter(name="bomb").exists()


@pytest.mark.django_db
def test_importing_a_tar_snapshot_with_a_header_bomb_imports_nothing(tmp_path):
    bomb = header_bomb(tmp_path / "bomb.tar.gz", size=8 * MiB)

    with pytest.raises(tree.TreeError, match="over the 1.0 MB limit"):
        import_workspace(bomb, "bomb")

    assert not Workspace.objects.filter(name="bomb").exists()
