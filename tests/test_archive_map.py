"""An archive built by copying the unchanged members of the previous one is, byte for
byte, the archive built from nothing; and its map says where every member now sits."""

import hashlib
import io
import tarfile
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generation import export
from generation.archive_map import ArchiveMap, Keyed, Region, Reuser

SECOND = 1_000_000_000


def build(rows: list[Keyed], previous: tuple[ArchiveMap, bytes] | None, tmp_path) -> tuple:
    """(archive bytes, its map, members copied) of ``rows`` after a root member, with
    ``previous`` (a map and the archive it maps) to copy from."""
    fd = None
    if previous is not None:
        old = tmp_path / "previous.tar"
        old.write_bytes(previous[1])
        fd = old.open("rb")
    reuser = Reuser(previous[0] if previous else None, fd.fileno() if fd else None)
    out = io.BytesIO()
    try:
        info = export.write_snapshot_to(
            out, reuser.members(rows), root_mtime_ns=5 * SECOND, placed=reuser.placed
        )
    finally:
        if fd is not None:
            fd.close()
    assert info.sha256 == hashlib.sha256(out.getvalue()).hexdigest()
    return out.getvalue(), reuser.archive_map(), reuser.copied


def file(path: str, text: str, mode: int = 0o644, mtime: int = 1_700_000_000) -> Keyed:
    data = text.encode()
    return (path, data, mode, mtime * SECOND, hashlib.sha256(data).hexdigest())


def directory(path: str, mtime: int = 1_700_000_000) -> Keyed:
    return (path, None, 0o755, mtime * SECOND, "")


def members_of(data: bytes) -> list[tuple]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return [
            (i.name, i.type, i.mode, i.mtime, archive.extractfile(i).read() if i.isreg() else b"")  # type: ignore[union-attr]
            for i in archive
        ]


def test_an_unchanged_archive_is_copied_whole_and_a_change_rebuilds_that_member_alone(tmp_path):
    long_name = "notes/" + "a-long-directory-name/" * 6 + "deep.md"  # a PAX header
    rows = [
        directory("m"),
        file("m/a.md", "alpha\n"),
        file(long_name, "naïve\n"),
        file("m/b.md", "beta\n" * 300),
        file("m/c.sh", "#!/bin/sh\n", mode=0o755),
    ]
    first, first_map, copied = build(rows, None, tmp_path)
    assert copied == 0

    again, again_map, copied = build(rows, (first_map, first), tmp_path)
    assert again == first and again_map == first_map and copied == len(rows)

    changed = [*rows[:3], file("m/b.md", "beta, changed\n"), rows[4]]
    rebuilt, rebuilt_map, copied = build(changed, (first_map, first), tmp_path)
    fresh, fresh_map, _ = build(changed, None, tmp_path)
    assert rebuilt == fresh and rebuilt_map == fresh_map and copied == 4
    assert dict((m[0], m[4]) for m in members_of(rebuilt))["./m/b.md"] == b"beta, changed\n"


def test_a_row_said_to_be_in_the_previous_archive_that_is_not_there_is_refused(tmp_path):
    rows = [file("m/a.md", "alpha\n")]
    first, first_map, _ = build(rows, None, tmp_path)
    missing: Keyed = ("m/b.md", None, 0o644, 0, "0" * 64)

    with pytest.raises(export.ExportError, match="lacks it"):
        build([*rows, missing], (first_map, first), tmp_path)


def test_a_map_packs_and_unpacks_to_itself_and_refuses_what_is_not_one():
    region = Region(
        "upload-digest", 512, 4096, ("README.md", "bin"), (("l", "README.md", 0o777, 7),)
    )
    maps = [
        ArchiveMap(
            {"m/a.md": ("ab" * 32, 0o644, 1_700_000_000, 512, 1536), "m": ("", 0o755, 1, 0, 512)},
            region,
        ),
        ArchiveMap(),
        ArchiveMap(region=Region("", 512, 512, ())),
        ArchiveMap({"ünï/ç.md": ("cd" * 32, 0o600, 0, 5, 6)}),
    ]

    for mapped in maps:
        assert ArchiveMap.unpack(mapped.pack()) == mapped

    packed = maps[0].pack()
    header = packed[: packed.index(b"\n") + 1]
    for damaged in (b"memoryui-archive-map 0\n", packed[:-3], packed + b"x", packed[:30]):
        with pytest.raises(ValueError):
            ArchiveMap.unpack(damaged)
    # Whole and checked, but not a map: refused all the same.
    body = b"\x00\x01not marshal"
    with pytest.raises(ValueError):
        ArchiveMap.unpack(header + b"%08x\n" % zlib.crc32(body) + body)


names = st.sampled_from(
    ["m/a.md", "m/b.md", "m/c.md", "m/raw/x.md", "m/raw/y.md", "m/" + "long-name/" * 12 + "z.md"]
)
texts = st.sampled_from(["", "one\n", "two\n" * 200, "ünïcode\n", "x" * 511, "y" * 513])
modes = st.sampled_from([0o644, 0o600, 0o755])
times = st.sampled_from([1_700_000_000, 1_700_000_001, 1_800_000_000])


@st.composite
def trees(draw) -> list[Keyed]:
    chosen = draw(st.dictionaries(names, st.tuples(texts, modes, times), max_size=6))
    rows: list[Keyed] = [directory("m")]
    rows += [file(path, text, mode, mtime) for path, (text, mode, mtime) in sorted(chosen.items())]
    return rows


@settings(max_examples=300, deadline=None)
@given(before=trees(), after=trees())
def test_any_archive_built_from_the_previous_one_is_the_archive_built_from_nothing(
    tmp_path_factory, before, after
):
    tmp_path = tmp_path_factory.mktemp("maps")
    first, first_map, _ = build(before, None, tmp_path)

    reused, reused_map, copied = build(after, (first_map, first), tmp_path)
    fresh, fresh_map, _ = build(after, None, tmp_path)

    assert reused == fresh
    assert reused_map == fresh_map
    unchanged = [
        r
        for r in after
        if first_map.members.get(r[0], ())[:3] == (r[4], r[2] & 0o7777, r[3] // SECOND)
    ]
    assert copied == len(unchanged)


def test_a_copied_member_that_is_also_written_anew_is_refused(tmp_path):
    rows = [file("m/a.md", "alpha\n"), file("m/b.md", "beta\n")]
    first, first_map, _ = build(rows, None, tmp_path)
    old = tmp_path / "previous.tar"
    old.write_bytes(first)

    with old.open("rb") as fh:
        twice: list[export.Member] = [("m/a.md", b"again\n", 0o644, 0)]
        twice.append(export.Copy(fh.fileno(), 512, len(first) - 1024, ("m/a.md", "m/b.md")))
        with pytest.raises(export.ExportError, match="m/a.md appears twice"):
            export.write_snapshot_to(io.BytesIO(), twice)
        with pytest.raises(export.ExportError, match="m/b.md appears twice"):
            export.write_snapshot_to(
                io.BytesIO(), [export.Copy(fh.fileno(), 512, 1024, ("m/b.md", "m/b.md"))]
            )
