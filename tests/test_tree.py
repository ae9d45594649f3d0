"""The format layer's reading and parsing, pinned against the SDK-written fixtures and
against hostile inputs built in a temporary directory. No database."""

from __future__ import annotations

import collections
import gzip
import io
import json
import os
import random
import tarfile
import threading
from functools import cache
from pathlib import Path, PureWindowsPath

import pytest
from agents.sandbox.util import tar_utils

from generation import tree
from generation.kinds import FileKind
from generation.tree import (
    SLUG_RE,
    TERMINAL_STATES,
    Entry,
    LayoutDirs,
    Limits,
    Problem,
    TreeError,
    classify,
    discover_layouts,
    find_layouts,
    header_value,
    is_raw_memory_path,
    parse_raw_memory,
    parse_rollout,
    parse_rollout_summary,
    parse_selection,
    read_archive,
    read_directory,
    read_source,
    rollout_folder,
    sha256,
)

FIXTURE_NAMES = ["small-a", "small-b", "medium-300"]
SECRET = b"TOP-SECRET-do-not-import-7f3a9c"


# --- helpers ---------------------------------------------------------------------------


@cache
def _manifest(path: Path) -> dict:
    return json.loads(path.read_text())


def manifest(fixtures_dir: Path, name: str) -> dict:
    return _manifest(fixtures_dir / name / "manifest.json")


def snapshot_path(fixtures_dir: Path, name: str) -> Path:
    return fixtures_dir / name / manifest(fixtures_dir, name)["snapshot"]["path"]


def split(items) -> tuple[list[Entry], list[Problem]]:
    entries, problems = [], []
    for item in items:
        (entries if isinstance(item, Entry) else problems).append(item)
    return entries, problems


def files_of(entries: list[Entry]) -> dict[str, bytes]:
    return {e.path: e.data for e in entries if not e.is_dir}


def layout_dirs(m: dict) -> dict[str, LayoutDirs]:
    return {
        lay["name"]: LayoutDirs(lay["memories_dir"], lay["sessions_dir"]) for lay in m["layouts"]
    }


def manifest_files(m: dict, kind: str) -> list[dict]:
    return [f for f in m["files"] if f["kind"] == kind]


def fixture_bytes(fixtures_dir: Path, name: str, workspace_path: str) -> bytes:
    return (fixtures_dir / name / "workspace" / workspace_path).read_bytes()


def entries_from(files: dict[str, bytes]) -> list[Entry]:
    """Synthetic file entries (no directory members, as some archives have)."""
    return [Entry(path, data, 0o644, 0) for path, data in files.items()]


def raw_memory_text(rollout_id: str, sessions_dir: str, slug: str = "notes") -> bytes:
    return (
        f"rollout_id: {rollout_id}\n"
        "updated_at: 2026-11-29T22:53:39.889568+00:00\n"
        f"rollout_path: {sessions_dir}/{rollout_id}.jsonl\n"
        f"rollout_summary_file: rollout_summaries/{rollout_id}_{slug}.md\n"
        "terminal_state: completed\n\nbody\n"
    ).encode()


def segment_line(
    updated_at: str, state: str = "completed", rollout_id: str = "r1", **extra
) -> bytes:
    payload = {
        "updated_at": updated_at,
        "rollout_id": rollout_id,
        "input": [{"content": "hello", "role": "user"}],
        "generated_items": [],
        "terminal_metadata": {
            "terminal_state": state,
            "exception_type": None,
            "exception_message": None,
            "has_final_output": True,
        },
        "final_output": "done",
        **extra,
    }
    return json.dumps(payload, separators=(",", ":")).encode() + b"\n"


def make_tar(members: list[tuple[str, str, bytes | str]], mode: str = "w") -> bytes:
    """Build a tar in memory. Each member is (name, type, data-or-linkname), type one of
    file, dir, symlink, hardlink, chr, fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.PAX_FORMAT) as archive:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "chr": tarfile.CHRTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind in ("symlink", "hardlink"):
                assert isinstance(payload, str)
                info.linkname = payload
            if kind == "chr":
                info.devmajor, info.devminor = 1, 3
            archive.addfile(info)
    return buf.getvalue()


def problems_for(problems: list[Problem], member_name: str) -> list[Problem]:
    """Problems that name a member, whether by its raw or its normalized name."""
    normalized = member_name.lstrip("/").removeprefix("./")
    return [p for p in problems if p.path in (member_name, normalized)]


# --- reading the fixtures --------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_read_directory_yields_every_manifest_file_with_its_sha256_and_size(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    entries, problems = split(read_directory(fixtures_dir / name / "workspace"))
    files = files_of(entries)

    assert problems == []
    assert set(files) == {f["workspace_path"] for f in m["files"]}
    for f in m["files"]:
        data = files[f["workspace_path"]]
        assert (len(data), sha256(data)) == (f["size"], f["sha256"]), f["workspace_path"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_read_archive_yields_every_manifest_file_with_its_sha256_and_size(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    entries, problems = split(read_archive(snapshot_path(fixtures_dir, name)))
    files = files_of(entries)

    assert problems == []
    assert set(files) == {f["workspace_path"] for f in m["files"]}
    for f in m["files"]:
        data = files[f["workspace_path"]]
        assert (len(data), sha256(data)) == (f["size"], f["sha256"]), f["workspace_path"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_directory_and_snapshot_readings_hold_the_same_files_and_bytes(fixtures_dir, name):
    from_dir, _ = split(read_directory(fixtures_dir / name / "workspace"))
    from_tar, _ = split(read_archive(snapshot_path(fixtures_dir, name)))

    assert files_of(from_dir) == files_of(from_tar)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_read_source_picks_the_directory_or_archive_reader(fixtures_dir, name):
    from_dir, dir_problems = split(read_source(fixtures_dir / name / "workspace"))
    from_tar, tar_problems = split(read_source(snapshot_path(fixtures_dir, name)))

    assert dir_problems == tar_problems == []
    assert files_of(from_dir) == files_of(from_tar)
    assert len(files_of(from_dir)) == len(manifest(fixtures_dir, name)["files"])


def test_read_archive_reads_a_gzip_compressed_snapshot_like_the_plain_one(fixtures_dir, tmp_path):
    plain = snapshot_path(fixtures_dir, "small-a")
    compressed = tmp_path / "snapshot.tar.gz"
    compressed.write_bytes(gzip.compress(plain.read_bytes()))

    from_plain, _ = split(read_archive(plain))
    from_gzip, problems = split(read_archive(compressed))

    assert problems == []
    assert files_of(from_gzip) == files_of(from_plain)


def test_read_archive_accepts_member_names_without_the_dot_slash_prefix(tmp_path):
    path = tmp_path / "plain-names.tar"
    path.write_bytes(
        make_tar([("memories", "dir", b""), ("memories/MEMORY.md", "file", b"# Task Group: a\n")])
    )

    entries, problems = split(read_archive(path))

    assert problems == []
    assert files_of(entries) == {"memories/MEMORY.md": b"# Task Group: a\n"}
    assert [e.path for e in entries if e.is_dir] == ["memories"]


# --- layouts ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["directory", "archive"])
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_discover_layouts_finds_exactly_the_manifest_layouts(fixtures_dir, name, source):
    m = manifest(fixtures_dir, name)
    if source == "directory":
        entries, _ = split(read_directory(fixtures_dir / name / "workspace"))
    else:
        entries, _ = split(read_archive(snapshot_path(fixtures_dir, name)))

    layouts = discover_layouts(entries)

    assert sorted(layouts, key=lambda x: x.memories_dir) == sorted(
        layout_dirs(m).values(), key=lambda x: x.memories_dir
    )


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_classify_gives_every_manifest_file_its_kind_and_layout(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    by_name = layout_dirs(m)
    entries, _ = split(read_directory(fixtures_dir / name / "workspace"))
    layouts = discover_layouts(entries)

    wrong = []
    for f in m["files"]:
        placement = classify(f["workspace_path"], layouts)
        expected_layout = by_name[f["layout"]] if f["layout"] else None
        if (placement.kind, placement.layout) != (FileKind(f["kind"]), expected_layout):
            wrong.append((f["workspace_path"], placement, f["kind"], f["layout"]))
    assert wrong == []


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_classify_marks_every_directory_as_a_directory(fixtures_dir, name):
    entries, _ = split(read_directory(fixtures_dir / name / "workspace"))
    layouts = discover_layouts(entries)

    for entry in (e for e in entries if e.is_dir):
        assert classify(entry.path, layouts, is_dir=True).kind == FileKind.DIRECTORY


def test_classify_assigns_nested_layout_files_to_the_longest_matching_prefix():
    outer = LayoutDirs("memories", "sessions")
    inner = LayoutDirs("memories/engineering", "sessions/engineering")
    layouts = [outer, inner]

    cases = {
        "memories/MEMORY.md": (outer, FileKind.MEMORY_INDEX),
        "memories/engineering/MEMORY.md": (inner, FileKind.MEMORY_INDEX),
        "memories/engineering/raw_memories/r1.md": (inner, FileKind.RAW_MEMORY),
        "memories/engineering/rollout_summaries/r1_s.md": (inner, FileKind.ROLLOUT_SUMMARY),
        "memories/engineering/skills/x/SKILL.md": (inner, FileKind.SKILL),
        "memories/raw_memories/r2.md": (outer, FileKind.RAW_MEMORY),
        "sessions/r2.jsonl": (outer, FileKind.ROLLOUT),
        "sessions/engineering/r1.jsonl": (inner, FileKind.ROLLOUT),
        # a sibling whose name merely starts like the inner layout is the outer one's
        "memories/engineering-old/MEMORY.md": (outer, FileKind.WORKSPACE_FILE),
        "sessionsx/r3.jsonl": (None, FileKind.WORKSPACE_FILE),
        "README.md": (None, FileKind.WORKSPACE_FILE),
    }
    for layouts_order in (layouts, list(reversed(layouts))):
        for path, (layout, kind) in cases.items():
            placement = classify(path, layouts_order)
            assert (placement.layout, placement.kind) == (layout, kind), path


def test_discover_layouts_pairs_memories_with_the_sessions_dir_named_in_rollout_path_headers():
    entries = entries_from(
        {
            "agent_mem/raw_memories/r1.md": raw_memory_text("r1", "transcripts/2026"),
            "agent_mem/rollout_summaries/r1_notes.md": b"session_id: s\n\nsummary\n",
            "agent_mem/MEMORY.md": b"",
            "transcripts/2026/r1.jsonl": segment_line("2026-01-01T00:00:00+00:00", rollout_id="r1"),
        }
    )

    assert discover_layouts(entries) == [LayoutDirs("agent_mem", "transcripts/2026")]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_layouts_found_from_the_headers_folders_alone_are_the_same(fixtures_dir, name):
    """An import keeps only the folder of each raw memory's ``rollout_path`` header
    (``rollout_folder``): the layouts found are those its whole headers give, odd
    headers included (blank, spaced, a bare name, a way out of the tree)."""
    entries, _ = split(read_directory(fixtures_dir / name / "workspace"))
    files = [e.path for e in entries if not e.is_dir]
    dirs = [e.path for e in entries if e.is_dir]
    headers = {
        e.path: header_value(e.data, "rollout_path")
        for e in entries
        if not e.is_dir and is_raw_memory_path(e.path)
    }
    assert headers, name
    odd = ["", "  ", " elsewhere/a.jsonl ", "a.jsonl", "../out/a.jsonl", "x//y/a.jsonl", "/abs/a"]
    for given in [headers, *({path: value for path in headers} for value in odd)]:
        folders = {path: rollout_folder(value) for path, value in given.items()}
        found = find_layouts(dirs, files, folders.items())
        assert found == find_layouts(dirs, files, given.items()), given

    folders = {path: rollout_folder(value) for path, value in headers.items()}
    assert len(set(folders.values())) < len(folders)  # shared by a layout's raw memories


def test_discover_layouts_header_beats_the_naming_convention():
    entries = entries_from(
        {
            "memories/raw_memories/r1.md": raw_memory_text("r1", "elsewhere"),
            "elsewhere/r1.jsonl": segment_line("2026-01-01T00:00:00+00:00", rollout_id="r1"),
        }
    )

    assert discover_layouts(entries) == [LayoutDirs("memories", "elsewhere")]


def test_discover_layouts_uses_the_naming_convention_when_raw_memories_have_no_headers():
    entries = entries_from(
        {
            "memories/team/raw_memories/r1.md": b"just notes, no headers\n",
            "memories/team/memory_summary.md": b"## User Profile\n",
            "sessions/team/r1.jsonl": segment_line("2026-01-01T00:00:00+00:00", rollout_id="r1"),
        }
    )

    assert discover_layouts(entries) == [LayoutDirs("memories/team", "sessions/team")]


def test_discover_layouts_finds_a_fresh_layout_with_empty_marker_dirs(tmp_path):
    # What the SDK creates on a layout's first rollout, before phase one wrote anything.
    (tmp_path / "memories" / "raw_memories").mkdir(parents=True)
    (tmp_path / "memories" / "rollout_summaries").mkdir()
    (tmp_path / "memories" / "skills").mkdir()
    (tmp_path / "memories" / "MEMORY.md").write_bytes(b"")
    (tmp_path / "memories" / "memory_summary.md").write_bytes(b"")
    (tmp_path / "sessions").mkdir()

    entries, _ = split(read_directory(tmp_path))

    assert discover_layouts(entries) == [LayoutDirs("memories", "sessions")]


def test_discover_layouts_turns_a_sessions_dir_without_memories_into_a_layout():
    entries = entries_from(
        {
            "sessions/ops/r1.jsonl": segment_line("2026-01-01T00:00:00+00:00", rollout_id="r1"),
            "README.md": b"hello\n",
        }
    )

    assert discover_layouts(entries) == [LayoutDirs("memories/ops", "sessions/ops")]


def test_discover_layouts_keeps_nested_layouts_apart():
    entries = entries_from(
        {
            "memories/raw_memories/a.md": raw_memory_text("a", "sessions"),
            "memories/engineering/raw_memories/b.md": raw_memory_text("b", "sessions/engineering"),
            "sessions/a.jsonl": segment_line("2026-01-01T00:00:00+00:00", rollout_id="a"),
            "sessions/engineering/b.jsonl": segment_line(
                "2026-01-01T00:00:00+00:00", rollout_id="b"
            ),
        }
    )

    assert discover_layouts(entries) == [
        LayoutDirs("memories", "sessions"),
        LayoutDirs("memories/engineering", "sessions/engineering"),
    ]


def test_discover_layouts_ignores_marker_names_inside_a_layouts_own_subdirectories():
    entries = entries_from(
        {
            "memories/raw_memories/a.md": raw_memory_text("a", "sessions"),
            "memories/skills/howto/rollout_summaries/example.md": b"an example\n",
            "memories/skills/howto/memory_summary.md": b"an example\n",
            "sessions/a.jsonl": segment_line("2026-01-01T00:00:00+00:00", rollout_id="a"),
        }
    )

    assert discover_layouts(entries) == [LayoutDirs("memories", "sessions")]


def test_discover_layouts_ignores_a_plain_workspace_without_memory():
    entries = entries_from({"README.md": b"hi\n", "data/events.jsonl": b"{}\n"})

    assert discover_layouts(entries) == []


# --- rollouts --------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_parse_rollout_segment_counts_equal_the_manifest_per_layout(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    segments: collections.Counter[str] = collections.Counter()
    problems = []
    for f in manifest_files(m, "rollout"):
        parsed = parse_rollout(fixture_bytes(fixtures_dir, name, f["workspace_path"]))
        segments[f["layout"]] += len(parsed.segments)
        problems += parsed.problems

    assert problems == []
    assert dict(segments) == {key: c["rollout_segments"] for key, c in m["counts"].items()}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_parse_rollout_gives_each_fixture_rollout_its_segments_and_last_state(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    scenarios = {s["rollout_id"]: s for s in m["scenarios"]}
    for f in manifest_files(m, "rollout"):
        rollout_id = f["workspace_path"].rpartition("/")[2].removesuffix(".jsonl")
        data = fixture_bytes(fixtures_dir, name, f["workspace_path"])
        last_line = json.loads(data.splitlines()[-1])

        parsed = parse_rollout(data)

        scenario = scenarios[rollout_id]
        assert len(parsed.segments) == scenario["segments"], rollout_id
        assert [s.terminal_state for s in parsed.segments] == scenario["expected_terminal_states"]
        assert parsed.terminal_state == scenario["expected_terminal_states"][-1]
        assert parsed.updated_at == (last_line.get("updated_at") or "unknown")
        assert [s.line for s in parsed.segments] == list(range(1, len(parsed.segments) + 1))
        assert {s.rollout_id for s in parsed.segments} == {rollout_id}


def test_a_selection_with_half_a_character_parses_to_text_utf8_can_hold():
    data = json.dumps(
        {"selected": [{"rollout_id": "r-\ud800", "rollout_summary_file": "s.md"}]}
    ).encode()

    (item,) = tree.parse_selection(data).items

    assert item.rollout_id == "r-\ufffd"
    item.rollout_id.encode("utf-8")  # what the database and the pages need


def test_lone_surrogates_become_replacement_characters_and_everything_else_stays():
    segment = {
        "rollout_id": "r",
        "input": [{"role": "user", "content": "a\ud800b, a pair \U0001f680, low \udfff"}],
        "generated_items": [{"\udc00key": "v", "text": "a literal \\ud800 stays"}],
    }
    data = json.dumps(segment).encode()  # the surrogates as \u escapes, as the SDK writes

    literal = {"rollout_id": "r", "x": "caf\u00e9 and a literal \\ud800, no surrogate"}
    parsed = parse_rollout(data + b"\n" + json.dumps(literal).encode())

    first, second = parsed.segments
    assert first.input[0]["content"] == "a\ufffdb, a pair \U0001f680, low \ufffd"
    assert first.generated_items == [{"\ufffdkey": "v", "text": "a literal \\ud800 stays"}]
    assert [p for p in parsed.problems if "surrogate" in p] == [
        "line 1: a \\u escape for half a character (a lone UTF-16 surrogate); shown as U+FFFD"
    ]
    # A line with only an escaped backslash before "ud800": untouched, no problem.
    assert second.rollout_id == "r" and len(parsed.problems) == 1


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_parse_rollout_last_segment_agrees_with_the_sdks_raw_memory_headers(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    checked = 0
    for f in manifest_files(m, "raw_memory"):
        raw = parse_raw_memory(fixture_bytes(fixtures_dir, name, f["workspace_path"]).decode())
        rollout = parse_rollout(fixture_bytes(fixtures_dir, name, raw.headers["rollout_path"]))

        assert rollout.updated_at == raw.headers["updated_at"], raw.rollout_id
        assert rollout.terminal_state == raw.headers["terminal_state"], raw.rollout_id
        checked += 1
    assert checked == sum(c["raw_memories"] for c in m["counts"].values())


def test_parse_rollout_reads_a_missing_updated_at_as_unknown(fixtures_dir):
    data = fixture_bytes(fixtures_dir, "medium-300", "sessions/bug-fix-00184-401f13.jsonl")

    parsed = parse_rollout(data)

    assert parsed.problems == []
    assert parsed.updated_at == "unknown"


def test_parse_rollout_keeps_every_segment_of_a_multi_segment_fixture(fixtures_dir):
    data = fixture_bytes(fixtures_dir, "small-a", "sessions/gtm-pipeline-65f53e.jsonl")

    parsed = parse_rollout(data)

    assert len(parsed.segments) == 2
    assert parsed.updated_at == parsed.segments[1].updated_at != parsed.segments[0].updated_at
    assert parsed.title.startswith("Analyze data/leads.csv")


def test_parse_rollout_takes_state_and_time_from_the_last_segment():
    data = (
        segment_line("2026-01-01T00:00:00+00:00", "failed")
        + segment_line("2026-01-02T00:00:00+00:00", "interrupted")
        + segment_line("2026-01-03T00:00:00+00:00", "completed")
    )

    parsed = parse_rollout(data)

    assert parsed.problems == []
    assert [s.terminal_state for s in parsed.segments] == ["failed", "interrupted", "completed"]
    assert parsed.terminal_state == "completed"
    assert parsed.updated_at == "2026-01-03T00:00:00+00:00"


def test_parse_rollout_reads_a_last_line_without_trailing_newline_and_crlf():
    data = segment_line("2026-01-01T00:00:00+00:00").replace(b"\n", b"\r\n") + segment_line(
        "2026-01-02T00:00:00+00:00", "cancelled"
    ).rstrip(b"\n")

    parsed = parse_rollout(data)

    assert parsed.problems == []
    assert parsed.terminal_state == "cancelled"


def test_parse_rollout_skips_a_malformed_line_and_keeps_the_good_ones_around_it():
    data = (
        segment_line("2026-01-01T00:00:00+00:00", "failed")
        + b'{"updated_at": "2026-01-02", "rollout_id": \n'
        + segment_line("2026-01-03T00:00:00+00:00", "completed")
    )

    parsed = parse_rollout(data)

    assert [s.line for s in parsed.segments] == [1, 3]
    assert parsed.terminal_state == "completed"
    assert len(parsed.problems) == 1
    assert parsed.problems[0].startswith("line 2:")
    assert "JSON" in parsed.problems[0]


def test_parse_rollout_reports_non_utf8_bytes_with_their_line_number():
    data = (
        segment_line("2026-01-01T00:00:00+00:00")
        + b'{"updated_at":"2026-01-02","rollout_id":"r\xff\xfe1"}\n'
        + segment_line("2026-01-03T00:00:00+00:00")
    )

    parsed = parse_rollout(data)

    assert [s.line for s in parsed.segments] == [1, 3]
    assert len(parsed.problems) == 1
    assert parsed.problems[0].startswith("line 2:")
    assert "UTF-8" in parsed.problems[0]


@pytest.mark.parametrize("line", [b"[1, 2, 3]", b'"just a string"', b"42", b"null", b"true"])
def test_parse_rollout_skips_a_line_that_is_not_a_json_object(line):
    data = segment_line("2026-01-01T00:00:00+00:00") + line + b"\n"

    parsed = parse_rollout(data)

    assert [s.line for s in parsed.segments] == [1]
    assert len(parsed.problems) == 1
    assert parsed.problems[0].startswith("line 2:")
    assert "not an object" in parsed.problems[0]


def test_parse_rollout_names_the_wrong_value_in_json_terms():
    cases = {b"[1, 2, 3]": "array", b'"just a string"': "string", b"42": "number", b"null": "null"}

    problems = {line: parse_rollout(line + b"\n").problems[0] for line in cases}

    wrong = {line: p for line, p in problems.items() if f"a JSON {cases[line]}," not in p}
    assert wrong == {}


@pytest.mark.parametrize(
    "deep",
    [b'{"a":' * 10_000 + b"1" + b"}" * 10_000, b"[" * 10_000 + b"]" * 10_000],
    ids=["objects", "arrays"],
)
def test_parse_rollout_survives_a_line_nested_ten_thousand_levels_deep(deep):
    data = segment_line("2026-01-01T00:00:00+00:00") + deep + b"\n" + segment_line("2026-01-02")

    parsed = parse_rollout(data)

    assert [s.line for s in parsed.segments] == [1, 3]
    assert len(parsed.problems) == 1
    assert parsed.problems[0].startswith("line 2:")
    assert "deep" in parsed.problems[0]


def test_parse_rollout_refuses_nesting_past_its_own_limit_even_when_json_can_parse_it():
    line = b'{"updated_at":"x","generated_items":' + b"[" * 200 + b"]" * 200 + b"}"

    parsed = parse_rollout(line + b"\n")

    assert parsed.segments == []
    assert "deep" in parsed.problems[0]


@pytest.mark.parametrize("data", [b"", b"\n", b"  \n\n \t\n"])
def test_parse_rollout_reports_an_empty_file(data):
    parsed = parse_rollout(data)

    assert parsed.segments == []
    assert len(parsed.problems) == 1
    assert "empty" in parsed.problems[0]
    assert (parsed.updated_at, parsed.terminal_state) == ("unknown", "unknown")


def test_parse_rollout_reads_a_plain_string_input_as_a_user_message():
    line = json.dumps({"updated_at": "t", "rollout_id": "r", "input": "fix the build"}).encode()

    parsed = parse_rollout(line)

    assert parsed.segments[0].input == [{"content": "fix the build", "role": "user"}]
    assert parsed.title == "fix the build"
    assert parsed.terminal_state == "unknown"


# --- raw memories, summaries, selection ------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_parse_raw_memory_reads_every_fixture_raw_memory(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    by_name = layout_dirs(m)
    paths = {f["workspace_path"] for f in m["files"]}
    for f in manifest_files(m, "raw_memory"):
        text = fixture_bytes(fixtures_dir, name, f["workspace_path"]).decode()
        layout = by_name[f["layout"]]

        raw = parse_raw_memory(text)

        assert raw.problems == [], f["workspace_path"]
        assert raw.selectable
        assert raw.rollout_id == f["workspace_path"].rpartition("/")[2].removesuffix(".md")
        assert raw.headers["rollout_path"] == f"{layout.sessions_dir}/{raw.rollout_id}.jsonl"
        assert raw.headers["rollout_path"] in paths
        assert f"{layout.memories_dir}/{raw.headers['rollout_summary_file']}" in paths
        assert raw.headers["terminal_state"] in TERMINAL_STATES
        assert raw.body.strip() and text.endswith(raw.body)
        assert "rollout_id:" not in raw.body.splitlines()[0]


def test_parse_raw_memory_without_headers_is_reported_and_not_selectable():
    raw = parse_raw_memory("# Notes\n\nThe user likes short answers.\n")

    assert not raw.selectable
    assert raw.rollout_id == ""
    assert raw.body == "# Notes\n\nThe user likes short answers.\n"
    assert len(raw.problems) == 1
    assert "rollout_id" in raw.problems[0] and "rollout_summary_file" in raw.problems[0]
    assert "never select" in raw.problems[0]


def test_parse_raw_memory_missing_only_the_summary_header_names_it():
    raw = parse_raw_memory("rollout_id: r1\nupdated_at: unknown\n\nbody\n")

    assert not raw.selectable
    assert raw.problems and "rollout_summary_file" in raw.problems[0]
    assert "`rollout_id:`" not in raw.problems[0]


def test_parse_raw_memory_reads_a_header_anywhere_in_the_file_like_the_sdk():
    text = "preface\nrollout_summary_file: rollout_summaries/r1_s.md\nmore\nrollout_id: r1\n"

    raw = parse_raw_memory(text)

    assert raw.selectable
    assert raw.headers == {"rollout_id": "r1", "rollout_summary_file": "rollout_summaries/r1_s.md"}


def test_parse_raw_memory_takes_the_first_of_repeated_headers():
    raw = parse_raw_memory(
        "rollout_id: first\nrollout_summary_file: rollout_summaries/first_s.md\n\n"
        "rollout_id: second\n"
    )

    assert raw.rollout_id == "first"


def test_parse_raw_memory_reports_an_empty_file():
    raw = parse_raw_memory("")

    assert not raw.selectable
    assert raw.problems == ["empty file"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_parse_rollout_summary_reads_every_fixture_summary(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    cited = {}
    for f in manifest_files(m, "raw_memory"):
        raw = parse_raw_memory(fixture_bytes(fixtures_dir, name, f["workspace_path"]).decode())
        cited[(f["layout"], raw.headers["rollout_summary_file"])] = raw.rollout_id
    known_ids = {
        f["workspace_path"].rpartition("/")[2].removesuffix(".jsonl")
        for f in manifest_files(m, "rollout")
    }

    for f in manifest_files(m, "rollout_summary"):
        filename = f["workspace_path"].rpartition("/")[2]
        text = fixture_bytes(fixtures_dir, name, f["workspace_path"]).decode()

        summary = parse_rollout_summary(filename, text, known_ids)

        assert summary.problems == [], filename
        assert summary.rollout_id == cited[(f["layout"], f"rollout_summaries/{filename}")]
        assert filename == f"{summary.rollout_id}_{summary.slug}.md"
        assert SLUG_RE.match(summary.slug), summary.slug
        assert summary.headers["session_id"] == m["sandbox_session_id"]
        assert summary.body.strip() and text.endswith(summary.body)


@pytest.mark.parametrize(
    "rollout_path",
    ["sessions/team_a_run_7.jsonl", "sessions/engineering/team_a_run_7.jsonl"],
)
def test_parse_rollout_summary_splits_ids_and_slugs_with_underscores_by_rollout_path(rollout_path):
    text = (
        "session_id: s\nupdated_at: t\n"
        f"rollout_path: {rollout_path}\nterminal_state: completed\n\nx\n"
    )

    summary = parse_rollout_summary("team_a_run_7_fix_login_bug.md", text)

    assert (summary.rollout_id, summary.slug) == ("team_a_run_7", "fix_login_bug")
    assert summary.body == "x\n"
    assert summary.problems == []


def test_parse_rollout_summary_uses_the_longest_known_id_without_rollout_path():
    summary = parse_rollout_summary(
        "team_a_run_7_fix_login_bug.md", "just a summary\n", ["team", "team_a", "team_a_run_7"]
    )

    assert (summary.rollout_id, summary.slug) == ("team_a_run_7", "fix_login_bug")
    assert summary.problems and "no header" in summary.problems[0]


def test_parse_rollout_summary_ignores_a_rollout_path_that_does_not_name_this_file():
    text = "rollout_path: sessions/other.jsonl\n\nx\n"

    summary = parse_rollout_summary("conv_1_fix_it.md", text, ["conv_1"])

    assert (summary.rollout_id, summary.slug) == ("conv_1", "fix_it")


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_parse_selection_reads_every_fixture_selection(fixtures_dir, name):
    m = manifest(fixtures_dir, name)
    by_name = layout_dirs(m)
    paths = {f["workspace_path"] for f in m["files"]}
    selections = manifest_files(m, "selection")
    assert {f["layout"] for f in selections} == set(m["counts"])
    for f in selections:
        layout = by_name[f["layout"]]

        selection = parse_selection(fixture_bytes(fixtures_dir, name, f["workspace_path"]))

        assert selection.problem is None
        assert selection.updated_at
        assert len(selection.items) == m["counts"][f["layout"]]["selected"]
        for item in selection.items:
            raw_path = f"{layout.memories_dir}/raw_memories/{item.rollout_id}.md"
            raw = parse_raw_memory(fixture_bytes(fixtures_dir, name, raw_path).decode())
            assert item.rollout_summary_file == raw.headers["rollout_summary_file"]
            assert item.rollout_path in paths
            assert item.terminal_state == raw.headers["terminal_state"]


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "not valid JSON"),
        (b'{"version": 1, "selected": [', "not valid JSON"),
        (b"\xff\xfe{}", "UTF-8"),
        (b"[" * 100_000, "JSON"),
        (b"[]", "not a JSON object"),
        (b'"selected"', "not a JSON object"),
        (b"null", "not a JSON object"),
        (b'{"version": 1, "updated_at": "t"}', '"selected"'),
        (b'{"selected": {"rollout_id": "a"}}', '"selected"'),
    ],
    ids=[
        "empty",
        "truncated",
        "not-utf8",
        "too-deep",
        "array",
        "string",
        "null",
        "no-selected",
        "selected-not-a-list",
    ],
)
def test_parse_selection_treats_an_unusable_file_as_no_previous_selection(data, reason):
    selection = parse_selection(data)

    assert selection.items == []
    assert selection.problem is not None
    assert reason in selection.problem
    assert "no previous selection" in selection.problem


def test_parse_selection_skips_items_without_a_rollout_id_and_says_how_many():
    payload = {
        "version": 1,
        "updated_at": "2026-01-01T00:00:00+00:00",
        "selected": [
            {"rollout_id": "a", "rollout_summary_file": "rollout_summaries/a_s.md"},
            {"rollout_summary_file": "rollout_summaries/b_s.md"},
            "c",
            {"rollout_id": "  ", "rollout_summary_file": "rollout_summaries/d_s.md"},
            {"rollout_id": "e", "rollout_summary_file": "rollout_summaries/e_s.md"},
        ],
    }

    selection = parse_selection(json.dumps(payload).encode())

    assert [i.rollout_id for i in selection.items] == ["a", "e"]
    assert selection.updated_at == "2026-01-01T00:00:00+00:00"
    assert selection.problem is not None and selection.problem.startswith("3 ")
    assert "rollout_id" in selection.problem


# --- hostile workspaces and archives ---------------------------------------------------


def make_workspace(root: Path) -> Path:
    (root / "memories" / "raw_memories").mkdir(parents=True)
    (root / "memories" / "MEMORY.md").write_bytes(b"# Task Group: a\n")
    (root / "sessions").mkdir()
    (root / "sessions" / "r1.jsonl").write_bytes(segment_line("2026-01-01T00:00:00+00:00"))
    return root


def test_read_directory_reports_symlinks_and_never_follows_them(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    ws = make_workspace(tmp_path / "ws")
    (ws / "link-to-file").symlink_to(outside / "secret.txt")
    (ws / "link-to-dir").symlink_to(outside, target_is_directory=True)
    (ws / "memories" / "raw_memories" / "r1.md").symlink_to(outside / "secret.txt")
    (ws / "dangling").symlink_to(tmp_path / "nowhere")

    entries, problems = split(read_directory(ws))

    reported = {p.path: p.error for p in problems}
    assert set(reported) == {
        "link-to-file",
        "link-to-dir",
        "memories/raw_memories/r1.md",
        "dangling",
    }
    assert all("link" in error for error in reported.values())
    assert not any(e.path.startswith(("link-to-dir", "link-to-file", "dangling")) for e in entries)
    assert "memories/raw_memories/r1.md" not in files_of(entries)
    assert not any(SECRET in (e.data or b"") for e in entries)
    assert not any(SECRET.decode() in p.error for p in problems)
    assert set(files_of(entries)) == {"memories/MEMORY.md", "sessions/r1.jsonl"}


def test_read_source_refuses_a_symlinked_workspace_root(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    link = tmp_path / "ws-link"
    link.symlink_to(ws, target_is_directory=True)

    with pytest.raises(TreeError):
        read_source(link)


def test_read_directory_skips_a_fifo_without_blocking(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    os.mkfifo(ws / "memories" / "pipe.md")
    result: list = []

    reader = threading.Thread(target=lambda: result.extend(read_directory(ws)), daemon=True)
    reader.start()
    reader.join(timeout=10)

    assert not reader.is_alive(), "read_directory blocked on a FIFO"
    entries, problems = split(result)
    assert [p.path for p in problems] == ["memories/pipe.md"]
    assert "FIFO" in problems[0].error
    assert set(files_of(entries)) == {"memories/MEMORY.md", "sessions/r1.jsonl"}


def test_read_directory_skips_a_file_over_max_file_bytes(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(b"x" * 101)
    (ws / "exact.bin").write_bytes(b"y" * 100)

    entries, problems = split(read_directory(ws, Limits(max_file_bytes=100)))

    assert [p.path for p in problems] == ["big.bin"]
    assert "limit" in problems[0].error and "101 bytes" in problems[0].error
    assert files_of(entries)["exact.bin"] == b"y" * 100
    assert "big.bin" not in files_of(entries)


def test_read_directory_stops_with_a_problem_past_max_total_bytes(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(10):
        (ws / f"f{i}.bin").write_bytes(b"z" * 100)

    items = list(read_directory(ws, Limits(max_total_bytes=450)))

    entries, problems = split(items)
    assert len(problems) == 1 and isinstance(items[-1], Problem)
    assert "import stopped" in problems[0].error
    assert sum(len(e.data or b"") for e in entries) <= 450
    assert len(files_of(entries)) == 4


def test_a_directory_swapped_for_a_link_after_it_was_listed_is_not_entered(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    ws = make_workspace(tmp_path / "ws")
    scan = tree.scan_directory(ws)
    seen = []
    for item in scan:
        seen.append(item)
        if item.path == "sessions" and isinstance(item, tree.Stat):  # listed, not entered
            (ws / "sessions" / "r1.jsonl").unlink()
            (ws / "sessions").rmdir()
            (ws / "sessions").symlink_to(outside, target_is_directory=True)

    assert not [item.path for item in seen if item.path.startswith("sessions/")]
    problems = [item for item in seen if isinstance(item, Problem)]
    assert [p.path for p in problems] == ["sessions"]
    assert "could not be listed" in problems[0].error


def test_read_directory_reports_a_file_name_that_is_not_utf8(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    bad = os.path.join(os.fsencode(ws / "memories"), b"bad\xffname.md")
    with open(bad, "wb") as fh:
        fh.write(b"data\n")

    entries, problems = split(read_directory(ws))

    assert len(problems) == 1
    assert problems[0].path.startswith("memories/bad")
    assert "UTF-8" in problems[0].error
    problems[0].path.encode("utf-8")  # printable, storable
    assert set(files_of(entries)) == {"memories/MEMORY.md", "sessions/r1.jsonl"}


UNSAFE_MEMBERS = [
    ("/etc/passwd", "file", b"root:x:0:0\n", "absolute"),
    ("../evil", "file", b"evil\n", ".."),
    ("a/../../evil", "file", b"evil\n", ".."),
    ("./memories/../../evil2", "file", b"evil\n", ".."),
    ("memories/link", "symlink", "/etc/passwd", "symbolic link"),
    ("memories/hard", "hardlink", "memories/MEMORY.md", "hard link"),
    ("dev/null-ish", "chr", b"", "device"),
    ("memories/pipe", "fifo", b"", "FIFO"),
]


def test_read_archive_reports_each_unsafe_member_and_still_reads_the_good_ones(tmp_path):
    members = [("./", "dir", b""), ("./memories", "dir", b"")]
    members.append(("./memories/MEMORY.md", "file", b"# Task Group: good\n"))
    for name, kind, payload, _ in UNSAFE_MEMBERS:
        members.append((name, kind, payload))
    members.append(("./sessions/r1.jsonl", "file", b"{}\n"))
    path = tmp_path / "unsafe.tar"
    path.write_bytes(make_tar(members))

    entries, problems = split(read_archive(path))

    assert files_of(entries) == {
        "memories/MEMORY.md": b"# Task Group: good\n",
        "sessions/r1.jsonl": b"{}\n",
    }
    assert len(problems) == len(UNSAFE_MEMBERS)
    for name, _, _, reason in UNSAFE_MEMBERS:
        found = problems_for(problems, name)
        assert len(found) == 1, (name, problems)
        assert reason in found[0].error, (name, found[0].error)
        assert "skipped" in found[0].error
    assert not any(b"root:x" in (e.data or b"") or b"evil" in (e.data or b"") for e in entries)


def test_read_archive_never_reads_through_a_link_member(tmp_path):
    (tmp_path / "secret.txt").write_bytes(SECRET)
    path = tmp_path / "links.tar"
    path.write_bytes(
        make_tar(
            [
                ("./memories/MEMORY.md", "symlink", str(tmp_path / "secret.txt")),
                ("./memories/memory_summary.md", "hardlink", str(tmp_path / "secret.txt")),
            ]
        )
    )

    entries, problems = split(read_archive(path))

    assert files_of(entries) == {}
    assert len(problems) == 2
    assert not any(SECRET in (e.data or b"") for e in entries)


def test_read_archive_keeps_the_first_of_duplicated_members(tmp_path):
    path = tmp_path / "dupes.tar"
    path.write_bytes(
        make_tar(
            [
                ("./memories/MEMORY.md", "file", b"first\n"),
                ("./memories/MEMORY.md", "file", b"second\n"),
                ("memories/MEMORY.md", "file", b"third\n"),
                ("./memories/other.md", "file", b"other\n"),
            ]
        )
    )

    entries, problems = split(read_archive(path))

    assert files_of(entries) == {"memories/MEMORY.md": b"first\n", "memories/other.md": b"other\n"}
    assert [p.path for p in problems] == ["memories/MEMORY.md", "memories/MEMORY.md"]
    assert all("twice" in p.error for p in problems)


def test_read_archive_skips_a_member_over_max_file_bytes(tmp_path):
    path = tmp_path / "big.tar"
    path.write_bytes(make_tar([("big.bin", "file", b"x" * 2000), ("small.txt", "file", b"ok\n")]))

    entries, problems = split(read_archive(path, Limits(max_file_bytes=1000)))

    assert files_of(entries) == {"small.txt": b"ok\n"}
    assert [p.path for p in problems] == ["big.bin"]
    assert "limit" in problems[0].error


def test_read_archive_stops_a_gzip_bomb_at_max_total_bytes(tmp_path):
    zeros = bytes(64 * 1024)
    members = [(f"memories/zero-{i:03}.bin", "file", zeros) for i in range(200)]
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(make_tar(members, mode="w:gz"))
    assert path.stat().st_size < 200 * 1024  # it really is a bomb: ~12.5 MB inside
    limit = 1024 * 1024

    items = list(read_archive(path, Limits(max_total_bytes=limit)))

    entries, problems = split(items)
    assert isinstance(items[-1], Problem)
    assert len(problems) == 1 and "stopped" in problems[0].error
    assert sum(len(e.data or b"") for e in entries) <= limit
    assert len(files_of(entries)) == limit // len(zeros)


def test_read_archive_counts_skipped_oversized_members_toward_the_expanded_size_limit(tmp_path):
    # Every member is over max_file_bytes, so none is kept, but the reader still has to
    # decompress all of them to walk the archive: the bomb guard must stop that too.
    zeros = bytes(64 * 1024)
    members = [(f"memories/zero-{i:03}.bin", "file", zeros) for i in range(200)]
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(make_tar(members, mode="w:gz"))
    limits = Limits(max_file_bytes=1024, max_total_bytes=1024 * 1024)

    items = list(read_archive(path, limits))

    entries, problems = split(items)
    assert files_of(entries) == {}
    assert "stopped" in problems[-1].error
    assert len(problems) <= 1 + limits.max_total_bytes // len(zeros)


def test_read_source_raises_tree_error_for_a_file_that_is_not_a_tar(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello, I am not an archive\n" * 40)

    with pytest.raises(TreeError):
        read_source(path)


def test_read_archive_raises_tree_error_for_a_file_that_is_not_a_tar(tmp_path):
    path = tmp_path / "notes.tar"
    path.write_bytes(b"hello, I am not an archive\n" * 40)

    with pytest.raises(TreeError):
        list(read_archive(path))


def test_read_source_raises_tree_error_for_a_missing_path(tmp_path):
    with pytest.raises(TreeError):
        read_source(tmp_path / "missing")


def test_read_archive_raises_tree_error_for_a_missing_path(tmp_path):
    with pytest.raises(TreeError):
        list(read_archive(tmp_path / "missing.tar"))


def test_read_directory_raises_tree_error_for_a_missing_path(tmp_path):
    with pytest.raises(TreeError):
        list(read_directory(tmp_path / "missing"))


def three_member_tar() -> tuple[bytes, list[tarfile.TarInfo]]:
    middle = random.Random(7).randbytes(20_000)
    data = make_tar(
        [("a.txt", "file", b"first\n"), ("b.bin", "file", middle), ("c.txt", "file", b"third\n")]
    )
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = archive.getmembers()
    return data, members


def test_read_archive_yields_members_before_truncated_data_and_a_problem(tmp_path):
    data, members = three_member_tar()
    path = tmp_path / "cut.tar"
    path.write_bytes(data[: members[1].offset_data + 5000])

    entries, problems = split(read_archive(path))

    assert files_of(entries) == {"a.txt": b"first\n"}
    assert len(problems) == 1
    assert "truncated" in problems[0].error


def test_read_archive_reports_a_tar_truncated_inside_a_member_header(tmp_path):
    data, members = three_member_tar()
    path = tmp_path / "cut.tar"
    path.write_bytes(data[: members[1].offset + 100])

    entries, problems = split(read_archive(path))

    assert files_of(entries) == {"a.txt": b"first\n"}
    assert len(problems) == 1, "a tar cut inside a header must not look complete"
    assert "truncated" in problems[0].error


def test_read_archive_reports_a_truncated_gzip_stream(tmp_path):
    data, _ = three_member_tar()
    compressed = gzip.compress(data)
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(compressed[: len(compressed) // 2])

    entries, problems = split(read_archive(path))

    assert files_of(entries) == {"a.txt": b"first\n"}
    assert len(problems) == 1
    assert "truncated" in problems[0].error


def test_a_member_index_packs_and_unpacks_to_the_same_rows():
    rows = [
        tree.IndexedMember(
            "sessions/a.jsonl", "f", 0o644, 1_790_000_000 * 10**9, 512, 1536, 5, "", "ab" * 20
        ),
        tree.IndexedMember(
            "docs/naïve.md", "l", 0o777, 0, 2048, 2560, 0, "../README.md", "cd" * 20
        ),
        tree.IndexedMember("docs", "d", 0o755, 10**9, 3072, 3584, 0, "", "ef" * 20),
    ]
    index = tree.ArchiveIndex(rows, plain=True, verbatim=True)

    packed = tree.pack_index(index)

    assert packed is not None
    assert tree.unpack_index(packed) == [tuple(row) for row in rows]
    empty = tree.pack_index(tree.ArchiveIndex([], plain=True, verbatim=False))
    assert empty is not None and tree.unpack_index(empty) == []
    # A name a tar cannot hold gets no index at all (its downloads parse the archive).
    assert tree.pack_index(tree.ArchiveIndex([rows[0]._replace(path="a\0b")], True)) is None


@pytest.mark.parametrize(
    "name",
    ["C:escaped.txt", "c:/x", "z:", "1:x", ":x", "é:x", "a", "", "ab/c:d", "./C:/x", "C", "CD:x"],
)
def test_a_windows_drive_is_found_as_the_sdks_restore_finds_it(name):
    refused = True
    try:
        tar_utils._raise_if_windows_member_path(name)
    except tar_utils.UnsafeTarMemberError:
        pass
    else:
        refused = False
    assert tree.entries.windows_drive(name) == bool(PureWindowsPath(name).drive) == refused


def test_a_tar_with_a_windows_drive_member_skips_it_and_reads_the_rest(tmp_path):
    archive = tmp_path / "w.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("C:owned.txt", "memories/notes.md"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))

    found = list(tree.read_archive(archive))

    assert [e.path for e in found if isinstance(e, Entry)] == ["memories/notes.md"]
    [problem] = [e for e in found if isinstance(e, Problem)]
    assert problem.path == "C:owned.txt" and "Windows path" in problem.error


def test_a_scan_as_columns_lists_what_the_scan_yields_with_its_problems_in_place(tmp_path):
    """What the importer reads (``scan_listing``) is what ``scan_directory`` yields: the
    same entries, and each problem where the scan met it."""
    ws = make_workspace(tmp_path / "ws")
    (ws / "aaa-link").symlink_to(ws / "memories")
    (ws / "memories" / "zz-link").symlink_to(ws / "memories")
    (ws / "sessions" / "zz-fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(ws / "sessions" / "zz-fifo")

    listing = tree.scan_listing(ws)
    scanned = list(tree.scan_directory(ws))

    assert list(listing.in_order()) == scanned
    assert [p.path for _, p in listing.problems] == [
        "aaa-link",
        "memories/zz-link",
        "sessions/zz-fifo",
    ]
    assert len(listing) == len([s for s in scanned if isinstance(s, tree.Stat)])
    newest = max(s.mtime_ns for s in scanned if isinstance(s, tree.Stat) and not s.is_dir)
    assert listing.newest_file() == newest
