"""Importing SDK-written workspaces: counts, exact bytes, re-import, bad input."""

import gc
import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from generation import tree
from memoryui import importer, usage
from memoryui.importer import import_workspace, reading, syncing
from memoryui.models import (
    Blob,
    ImportRun,
    Layout,
    MemoryVersion,
    Proposal,
    RawMemory,
    Rollout,
    RolloutSummary,
    SearchDocument,
    Workspace,
    WorkspaceFile,
)
from tests.factories import make_user

pytestmark = pytest.mark.django_db

FIXTURES = ["small-a", "small-b", "medium-300"]


def manifest(fixtures_dir: Path, name: str) -> dict:
    return json.loads((fixtures_dir / name / "manifest.json").read_text())


def snapshot_path(fixtures_dir: Path, name: str) -> Path:
    return fixtures_dir / name / manifest(fixtures_dir, name)["snapshot"]["path"]


def run_import_json(path: Path, *extra: str) -> dict:
    out = io.StringIO()
    call_command("import_workspace", str(path), "--json", *extra, stdout=out)
    return json.loads(out.getvalue())


def expected_layouts(m: dict) -> list[dict]:
    return sorted(
        (
            {
                "memories_dir": c["memories_dir"],
                "sessions_dir": c["sessions_dir"],
                "rollouts": c["rollouts"],
                "raw_memories": c["raw_memories"],
                "rollout_summaries": c["rollout_summaries"],
                "memory_md": any(
                    f["kind"] == "memory_index" and f["layout"] == key for f in m["files"]
                ),
                "memory_summary_md": any(
                    f["kind"] == "memory_summary" and f["layout"] == key for f in m["files"]
                ),
                "skills": c["skills_files"],
            }
            for key, c in m["counts"].items()
        ),
        key=lambda layout: layout["memories_dir"],
    )


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("source", ["directory", "snapshot"])
def test_fixture_imports_with_manifest_counts_and_exact_bytes(fixtures_dir, name, source):
    m = manifest(fixtures_dir, name)
    path = (
        fixtures_dir / name / "workspace"
        if source == "directory"
        else snapshot_path(fixtures_dir, name)
    )

    report = run_import_json(path, "--name", f"{name}-{source}")

    assert report["workspace"] == f"{name}-{source}"
    assert report["errors"] == []
    assert sorted(report["layouts"], key=lambda x: x["memories_dir"]) == expected_layouts(m)
    stored = {
        f.path: f
        for f in WorkspaceFile.objects.filter(workspace__name=f"{name}-{source}").select_related(
            "blob"
        )
    }
    for item in m["files"]:
        row = stored[item["workspace_path"]]
        assert row.blob_id == item["sha256"], item["workspace_path"]
        assert row.size == item["size"]
        assert tree.sha256(bytes(row.blob.data)) == item["sha256"]
        assert row.kind == item["kind"]


def test_import_records_rollouts_raw_memories_and_summaries_per_layout(fixtures_dir):
    m = manifest(fixtures_dir, "medium-300")
    import_workspace(fixtures_dir / "medium-300" / "workspace", "medium")

    for counts in m["counts"].values():
        layout = Layout.objects.get(workspace__name="medium", memories_dir=counts["memories_dir"])
        assert layout.sessions_dir == counts["sessions_dir"]
        assert layout.rollouts.count() == counts["rollouts"]
        assert (
            sum(layout.rollouts.values_list("segment_count", flat=True))
            == counts["rollout_segments"]
        )
        assert layout.raw_memories.count() == counts["raw_memories"]
        assert layout.rollout_summaries.count() == counts["rollout_summaries"]
        with_memory = set(layout.raw_memories.values_list("rollout_id", flat=True))
        without = set(layout.rollouts.values_list("rollout_id", flat=True)) - with_memory
        assert without == set(counts["rollouts_without_raw_memory"])
    # Rollout summaries are linked to their rollout even when ids and slugs hold "_".
    summary_ids = set(RolloutSummary.objects.values_list("rollout_id", flat=True))
    assert summary_ids <= set(Rollout.objects.values_list("rollout_id", flat=True))


def test_a_deleted_layout_takes_its_rollouts_memories_summaries_and_texts_along(fixtures_dir):
    """Their layout is a copy of their file's, which the database does not check: Django's
    cascade deletes them with the layout (as the admin does), and the other layout's
    rows and the files stay."""
    import_workspace(fixtures_dir / "small-a" / "workspace", "a")
    gone, kept = Layout.objects.filter(workspace__name="a").order_by("memories_dir")[:2]
    tables = (Rollout, RawMemory, RolloutSummary, SearchDocument)
    assert all(model.objects.filter(layout=gone).exists() for model in tables)
    left = {model: model.objects.filter(layout=kept).count() for model in tables}
    files = WorkspaceFile.objects.count()

    gone.delete()

    connection.check_constraints()
    assert not any(model.objects.filter(layout_id=gone.pk).exists() for model in tables)
    assert {model: model.objects.filter(layout=kept).count() for model in tables} == left
    assert WorkspaceFile.objects.count() == files  # kept, no longer in a layout


def test_multi_segment_rollout_takes_last_segment_state(fixtures_dir):
    import_workspace(fixtures_dir / "small-a" / "workspace", "a")
    rollout = Rollout.objects.get(rollout_id="gtm-pipeline-65f53e")
    assert rollout.segment_count == 2
    last = json.loads(
        (fixtures_dir / "small-a/workspace/sessions/gtm-pipeline-65f53e.jsonl")
        .read_text()
        .splitlines()[-1]
    )
    assert rollout.updated_at_raw == last["updated_at"]
    assert rollout.terminal_state == last["terminal_metadata"]["terminal_state"]
    assert rollout.title


def test_reimport_of_unchanged_tree_changes_nothing(fixtures_dir):
    path = fixtures_dir / "small-b" / "workspace"
    first = import_workspace(path, "b")
    counts = {
        model: model.objects.count()
        for model in (
            WorkspaceFile,
            Blob,
            Rollout,
            RawMemory,
            RolloutSummary,
            MemoryVersion,
            Layout,
        )
    }
    rows = list(WorkspaceFile.objects.values_list("pk", "blob_id", "changed_at", "missing_since"))

    second = import_workspace(path, "b")

    assert first.added > 0 and second.added == second.changed == second.missing == 0
    assert second.unchanged == first.added
    assert {model: model.objects.count() for model in counts} == counts
    assert (
        list(WorkspaceFile.objects.values_list("pk", "blob_id", "changed_at", "missing_since"))
        == rows
    )
    assert second.as_json() == first.as_json()


def test_changed_memory_md_becomes_a_new_agent_version(workspace_copy):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    memory_md = ws / "memories" / "engineering" / "MEMORY.md"
    original = memory_md.read_bytes()
    memory_md.write_bytes(original + b"\n- agent added this line during a live update\n")

    result = import_workspace(ws, "a")

    assert result.changed == 1
    versions = MemoryVersion.objects.filter(
        layout__memories_dir="memories/engineering", document=MemoryVersion.Document.MEMORY_MD
    ).order_by("number")
    assert [v.number for v in versions] == [1, 2]
    assert bytes(versions[0].blob.data) == original
    assert bytes(versions[1].blob.data).endswith(b"during a live update\n")
    assert versions[1].author_kind == MemoryVersion.Author.AGENT
    assert versions[1].reason == "changed on disk"


def test_an_agent_change_found_on_disk_is_proposed_with_the_runs_that_came_with_it(
    workspace_copy, monkeypatch
):
    """The runs an import stored become the inputs of the proposal it makes of an
    agent's MEMORY.md: those new or changed since the last import, in every chunk
    stored (the import lets go of the files themselves), and no other layout's."""
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    sessions = ws / "sessions" / "engineering"
    old_run = sessions / "poll-billing-api-6d30c0.jsonl"
    for name in ("later-run-1", "later-run-2", "later-run-3"):
        shutil.copy(old_run, sessions / f"{name}.jsonl")
    old_run.write_bytes(old_run.read_bytes() + old_run.read_bytes().splitlines(True)[-1])
    (ws / "sessions" / "later-main-run.jsonl").write_bytes(old_run.read_bytes())
    memory_md = ws / "memories" / "engineering" / "MEMORY.md"
    memory_md.write_bytes(memory_md.read_bytes() + b"\n- learned from the later runs\n")
    monkeypatch.setattr(syncing, "STORE_CHUNK", 2)

    result = import_workspace(ws, "a")

    assert (result.added, result.changed) == (4, 2)
    (proposal,) = Proposal.objects.all()
    assert proposal.layout.memories_dir == "memories/engineering"
    assert proposal.inputs == [
        "later-run-1",
        "later-run-2",
        "later-run-3",
        "poll-billing-api-6d30c0",
    ]


def test_files_gone_from_disk_are_marked_not_deleted(workspace_copy):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    gone = ws / "sessions" / "prefs-6e64dc.jsonl"
    gone.unlink()

    result = import_workspace(ws, "a")

    assert result.missing == 1
    row = WorkspaceFile.objects.get(path="sessions/prefs-6e64dc.jsonl")
    assert row.missing_since is not None
    assert Rollout.objects.filter(rollout_id="prefs-6e64dc").exists()
    assert bytes(row.blob.data)  # the content is still there

    # and a file that comes back is current again
    gone.write_bytes(bytes(row.blob.data))
    import_workspace(ws, "a")
    assert WorkspaceFile.objects.get(path="sessions/prefs-6e64dc.jsonl").missing_since is None


def test_import_never_modifies_the_source_tree(workspace_copy):
    ws = workspace_copy("small-b")

    def snapshot():
        return {
            p.relative_to(ws).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(ws.rglob("*"))
            if p.is_file()
        }

    before = snapshot()
    import_workspace(ws, "b")
    import_workspace(ws, "b")
    assert snapshot() == before


# --- bad input -------------------------------------------------------------------


def errors_by_path(result) -> dict[str, str]:
    return {e["path"]: e["error"] for e in result.errors}


def test_malformed_jsonl_line_keeps_the_good_segments(workspace_copy):
    ws = workspace_copy("small-a")
    path = ws / "sessions" / "gtm-pipeline-65f53e.jsonl"
    first, second = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(first + b'{"updated_at": "2026-11-30", oops\n' + second)

    result = import_workspace(ws, "a")

    error = errors_by_path(result)["sessions/gtm-pipeline-65f53e.jsonl"]
    assert "line 2: not valid JSON" in error
    assert Rollout.objects.get(rollout_id="gtm-pipeline-65f53e").segment_count == 2
    assert result.run.status == ImportRun.Status.WITH_ERRORS


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe not utf-8\n", "line 1: not valid UTF-8"),
        (b"[1, 2, 3]\n", "line 1: a JSON array, not an object"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 1: JSON nested"),
        (b'{"a":' * 200 + b"1" + b"}" * 200 + b"\n", "nested more than 64 levels"),
        (b"", "empty file"),
    ],
    ids=["non-utf8", "not-an-object", "absurdly-deep", "deep", "empty"],
)
def test_bad_rollout_file_is_reported_and_the_rest_imports(workspace_copy, content, expected):
    ws = workspace_copy("small-a")
    (ws / "sessions" / "broken-1.jsonl").write_bytes(content)

    result = import_workspace(ws, "a")

    assert expected in errors_by_path(result)["sessions/broken-1.jsonl"]
    assert Rollout.objects.filter(layout__memories_dir="memories").count() == 4
    assert Rollout.objects.get(rollout_id="broken-1").segment_count == 0
    assert WorkspaceFile.objects.get(path="sessions/broken-1.jsonl").size == len(content)


def test_a_rollout_with_half_a_character_imports_shows_and_is_found(workspace_copy, client):
    """JSON may escape a lone UTF-16 surrogate ("\\ud800"): valid JSON, but no UTF-8
    holds it, and the import used to stop on it with a traceback."""
    ws = workspace_copy("small-a")
    line = {
        "updated_at": "2026-06-14T13:52:59+00:00",
        "rollout_id": "halves-1",
        "input": [{"role": "user", "content": "zyxwords \ud800 alone, \ud83d\ude80 paired"}],
        "generated_items": [{"type": "message", "content": "done \udfff", "\udc00key": 1}],
        "final_output": "ok",
    }
    data = json.dumps(line).encode()  # ensure_ascii: the surrogates as \u escapes
    assert b"\\ud800" in data
    (ws / "sessions" / "halves-1.jsonl").write_bytes(data + b"\n")

    result = import_workspace(ws, "a")

    assert "lone UTF-16 surrogate" in errors_by_path(result)["sessions/halves-1.jsonl"]
    rollout = Rollout.objects.get(rollout_id="halves-1")
    assert rollout.segment_count == 1
    assert WorkspaceFile.objects.get(path="sessions/halves-1.jsonl").size == len(data) + 1
    client.force_login(make_user())
    page = client.get(reverse("memoryui:rollout_detail", args=["a", rollout.layout_id, "halves-1"]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "zyxwords \ufffd alone, \U0001f680 paired" in html
    assert "done \ufffd" in html
    found = client.get(
        reverse("memoryui:rollout_list", args=["a", rollout.layout_id]), {"q": "zyxwords"}
    )
    assert "halves-1" in found.content.decode()


def test_non_utf8_memory_file_is_stored_exactly_and_reported(workspace_copy):
    ws = workspace_copy("small-a")
    path = ws / "memories" / "MEMORY.md"
    data = path.read_bytes() + b"\n- caf\xe9 in latin-1\n"
    path.write_bytes(data)

    result = import_workspace(ws, "a")

    assert "not valid UTF-8" in errors_by_path(result)["memories/MEMORY.md"]
    row = WorkspaceFile.objects.get(path="memories/MEMORY.md")
    assert bytes(row.blob.data) == data


def test_a_large_memory_file_is_checked_for_utf8_to_its_exact_bad_byte(workspace_copy):
    # Past a mebibyte, the check goes a piece at a time: a character split across two
    # pieces is valid, and a bad byte far in is reported at its own offset.
    ws = workspace_copy("small-a")
    head = (ws / "memories" / "MEMORY.md").read_bytes()
    filler = b"x" * (1024 * 1024 - len(head) - 1)
    valid = head + filler + "\u00e9 caf\u00e9\n".encode()  # the \u00e9 spans the boundary
    assert valid[1024 * 1024 - 1 : 1024 * 1024 + 1] == "\u00e9".encode()
    bad_at = len(valid) + len(b"- a ")
    (ws / "memories" / "MEMORY.md").write_bytes(valid)
    (ws / "memories" / "memory_summary.md").write_bytes(valid + b"- a \xe9 b\n" + filler)

    result = import_workspace(ws, "a")

    problems = errors_by_path(result)
    assert "memories/MEMORY.md" not in problems
    assert f"first bad byte at offset {bad_at})" in problems["memories/memory_summary.md"]


def test_invalid_rollout_id_file_name_is_reported(workspace_copy):
    ws = workspace_copy("small-a")
    (ws / "sessions" / "-bad id!.jsonl").write_bytes(b'{"rollout_id":"x"}\n')

    result = import_workspace(ws, "a")

    assert "not a valid rollout id" in errors_by_path(result)["sessions/-bad id!.jsonl"]
    assert not Rollout.objects.filter(file__path="sessions/-bad id!.jsonl").exists()
    assert result.layouts[0].rollouts == 3


def test_raw_memory_without_headers_is_reported(workspace_copy):
    ws = workspace_copy("small-a")
    (ws / "memories" / "raw_memories" / "orphan-1.md").write_text("just some notes\n")

    result = import_workspace(ws, "a")

    assert "no `rollout_id:`" in errors_by_path(result)["memories/raw_memories/orphan-1.md"]
    assert RawMemory.objects.get(rollout_id="orphan-1").rollout_summary_file == ""


def test_invalid_phase_two_selection_is_reported(workspace_copy):
    ws = workspace_copy("small-a")
    (ws / "memories" / "phase_two_selection.json").write_text("{not json")

    result = import_workspace(ws, "a")

    error = errors_by_path(result)["memories/phase_two_selection.json"]
    assert "not valid JSON" in error and "no previous selection" in error


def test_symlinks_are_never_followed(workspace_copy, tmp_path):
    ws = workspace_copy("small-a")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    (ws / "memories" / "raw_memories" / "leak.md").symlink_to(secret)
    (ws / "sessions" / "linked-dir").symlink_to(tmp_path)

    result = import_workspace(ws, "a")

    errors = errors_by_path(result)
    assert "symbolic link" in errors["memories/raw_memories/leak.md"]
    assert "symbolic link" in errors["sessions/linked-dir"]
    assert all(b"TOP-SECRET" not in bytes(b.data) for b in Blob.objects.all())


def test_fifo_is_skipped_without_blocking(workspace_copy):
    ws = workspace_copy("small-a")
    os.mkfifo(ws / "memories" / "pipe")

    result = import_workspace(ws, "a")

    assert "FIFO" in errors_by_path(result)["memories/pipe"]


def test_huge_file_is_stored_and_flagged(workspace_copy, settings):
    settings.MEMORYUI_HUGE_FILE_BYTES = 1000
    ws = workspace_copy("small-a")
    big = b"x" * 5000 + b"\n"
    (ws / "memories" / "engineering" / "skills" / "big.md").write_bytes(big)

    result = import_workspace(ws, "a")

    assert "stored in full" in errors_by_path(result)["memories/engineering/skills/big.md"]
    assert (
        bytes(WorkspaceFile.objects.get(path="memories/engineering/skills/big.md").blob.data) == big
    )


def test_file_over_the_hard_limit_is_not_imported(workspace_copy, settings):
    settings.MEMORYUI_MAX_FILE_BYTES = 10_000
    ws = workspace_copy("small-a")
    (ws / "data" / "dump.bin").write_bytes(b"\0" * 20_000)

    result = import_workspace(ws, "a")

    assert "not imported" in errors_by_path(result)["data/dump.bin"]
    assert not WorkspaceFile.objects.filter(path="data/dump.bin").exists()
    assert result.layouts[0].rollouts == 3


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **attrs) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def test_unsafe_archive_members_are_refused_and_the_rest_imports(fixtures_dir, tmp_path):
    archive = tmp_path / "evil.tar"
    with (
        tarfile.open(snapshot_path(fixtures_dir, "small-a")) as src,
        tarfile.open(archive, "w") as dst,
    ):
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        _add(dst, "/etc/passwd")
        _add(dst, "../outside.md")
        _add(dst, "./memories/../../escape.md")
        _add(dst, "./memories/link.md", b"", type=tarfile.SYMTYPE, linkname="/etc/shadow")
        _add(dst, "./memories/hard.md", b"", type=tarfile.LNKTYPE, linkname="README.md")
        _add(dst, "./dev-null", b"", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        _add(dst, "./memories/fifo", b"", type=tarfile.FIFOTYPE)

    result = import_workspace(archive, "evil")

    errors = errors_by_path(result)
    assert "absolute path" in errors["/etc/passwd"]
    assert "'..'" in errors["../outside.md"]
    assert "'..'" in errors["./memories/../../escape.md"]
    assert "symbolic link" in errors["memories/link.md"]
    assert "hard link" in errors["memories/hard.md"]
    assert "device or FIFO" in errors["dev-null"]
    assert "device or FIFO" in errors["memories/fifo"]
    assert [layout.rollouts for layout in result.layouts] == [3, 3]
    assert not WorkspaceFile.objects.filter(path__contains="..").exists()
    assert not (tmp_path.parent / "outside.md").exists()


def test_compressed_archive_expanding_past_the_limit_stops_with_a_clear_error(tmp_path, settings):
    settings.MEMORYUI_MAX_IMPORT_BYTES = 1_000_000
    archive = tmp_path / "bomb.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        _add(tar, "./sessions/a-1.jsonl", b'{"rollout_id":"a-1"}\n')
        for i in range(5):
            _add(tar, f"./data/zeros-{i}.bin", b"\0" * 400_000)

    result = import_workspace(archive, "bomb")

    assert archive.stat().st_size < 20_000
    assert any("expands past" in e["error"] for e in result.errors)
    assert WorkspaceFile.objects.filter(workspace__name="bomb").count() < 5


def test_nothing_importable_exits_non_zero_says_why_and_creates_no_workspace(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_workspace", str(empty), "--json")
    assert exit_info.value.code == 1
    out = json.loads(capsys.readouterr().out)
    assert out["layouts"] == [] and "holds no files" in out["errors"][0]["error"]

    with pytest.raises(CommandError, match="holds no files: nothing to import"):
        call_command("import_workspace", str(empty))
    assert "no problems" not in capsys.readouterr().out
    assert not Workspace.objects.exists()


def test_an_archive_that_yields_nothing_says_what_stood_in_the_way(tmp_path):
    """A truncated upload is not "an empty workspace": the error says it was cut short."""
    whole = tmp_path / "whole.tar"
    with tarfile.open(whole, "w") as tar:
        _add(tar, "../escape.txt")
        _add(tar, "memories/MEMORY.md", b"# Task Group: x\n" * 100)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole.read_bytes()[:1500])  # inside the second member's header

    with pytest.raises(CommandError) as error:
        call_command("import_workspace", str(cut), "--name", "cut")

    assert str(error.value) == (
        f"{cut} holds no files: nothing to import, no workspace created (a workspace has a "
        "memories/ folder, and usually sessions/). Problems found (2): ../escape.txt: path "
        "climbs out of the workspace with '..'; skipped; cut.tar: archive ends inside a "
        "member header (truncated or damaged); read up to there."
    )
    assert not Workspace.objects.exists()


def test_a_known_workspace_whose_folder_emptied_says_nothing_was_imported(
    tmp_path, workspace_copy, capsys
):
    source = workspace_copy("small-a")
    import_workspace(source, "a")
    for p in [source, *source.rglob("*")]:  # the fixtures are shared without write bits
        p.chmod(p.stat().st_mode | 0o200)
    shutil.rmtree(source)
    source.mkdir()

    with pytest.raises(SystemExit) as exit_info:
        call_command("import_workspace", str(source), "--name", "a")

    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    assert "Nothing imported" in captured.err and "no problems" not in captured.out


def test_missing_path_gives_a_clear_error_not_a_traceback(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_workspace", str(tmp_path / "nope"), "--json")
    assert exit_info.value.code == 1
    out = json.loads(capsys.readouterr().out)
    assert "does not exist" in out["errors"][0]["error"]


def test_json_output_is_exactly_one_object(fixtures_dir, capsys):
    call_command("import_workspace", str(fixtures_dir / "small-a" / "workspace"), "--json")
    out = capsys.readouterr().out
    assert out.count("\n") <= 1
    report = json.loads(out)
    assert set(report) == {"workspace", "layouts", "errors"}
    assert report["workspace"] == "small-a"
    for layout in report["layouts"]:
        assert set(layout) == {
            "memories_dir",
            "sessions_dir",
            "rollouts",
            "raw_memories",
            "rollout_summaries",
            "memory_md",
            "memory_summary_md",
            "skills",
        }


def test_readable_summary_without_json(fixtures_dir, capsys):
    call_command("import_workspace", str(fixtures_dir / "small-a" / "workspace"))
    out = capsys.readouterr().out
    assert "layout memories/engineering + sessions/engineering: 3 rollouts" in out
    assert "no problems" in out


def _age(root: Path, seconds: int = 3600) -> None:
    """Date every file back, as a tree written before the last import would be."""
    past = time.time() - seconds
    for path in root.rglob("*"):
        os.utime(path, (past, past), follow_symlinks=False)


def test_reimport_does_not_read_files_whose_size_and_mtime_are_unchanged(
    workspace_copy, monkeypatch
):
    ws = workspace_copy("small-a")
    _age(ws)
    import_workspace(ws, "a")
    reads: list[str] = []
    real_read = tree.read_file
    monkeypatch.setattr(
        tree, "read_file", lambda root, rel, *a: reads.append(rel) or real_read(root, rel, *a)
    )

    result = import_workspace(ws, "a")

    assert reads == []
    assert result.unchanged == result.files and result.changed == 0


def test_reimport_of_an_unchanged_directory_reads_no_stored_file_row(workspace_copy):
    """Listed exactly as last time: the outcome is repeated without loading the
    workspace's file rows (30,000 of them on a large tree) or reading a file."""
    ws = workspace_copy("small-a")
    (ws / "memories" / "rollout_summaries" / "bad name!.md").write_text("not a summary\n")
    _age(ws)
    first = import_workspace(ws, "a")
    rows = list(WorkspaceFile.objects.values_list("pk", "blob_id", "changed_at", "mode"))

    with CaptureQueriesContext(connection) as queries:
        second = import_workspace(ws, "a")

    table = WorkspaceFile._meta.db_table
    assert [q["sql"] for q in queries if table in q["sql"]] == []
    assert second.unchanged == second.files == first.added
    assert second.added == second.changed == second.missing == 0
    assert second.as_json() == first.as_json() and second.errors  # the problem is kept
    assert second.run.status == first.run.status
    assert list(WorkspaceFile.objects.values_list("pk", "blob_id", "changed_at", "mode")) == rows


def test_a_directory_listed_as_before_is_synced_again_after_another_source(
    workspace_copy, fixtures_dir
):
    """The shortcut holds only against the workspace's latest import: a snapshot
    imported in between changed the rows, so the directory is compared file by file."""
    ws = workspace_copy("small-a")
    _age(ws)
    import_workspace(ws, "a")
    import_workspace(snapshot_path(fixtures_dir, "small-b"), "a")

    result = import_workspace(ws, "a")

    assert result.added + result.changed > 0
    assert sorted(
        WorkspaceFile.objects.present().filter(workspace__name="a").values_list("path", flat=True)
    ) == sorted(str(p.relative_to(ws)) for p in ws.rglob("*"))


def test_syncing_a_few_paths_follows_them_and_leaves_every_other_row(workspace_copy):
    """A write-back's re-sync: the changed file is stored and parsed, the deleted one is
    marked gone, nothing else is touched and no import run is recorded."""
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    workspace = Workspace.objects.get(name="a")
    raw = next((ws / "memories" / "raw_memories").iterdir())
    gone = str(raw.relative_to(ws))
    raw.unlink()
    (ws / "memories" / "memory_summary.md").write_bytes(b"## General Tips\n- synced\n")
    (ws / "memories" / "rollout_summaries" / "extra.md").write_text("never synced\n")
    others = set(
        WorkspaceFile.objects.exclude(path__in=[gone, "memories/memory_summary.md"]).values_list(
            "pk", "blob_id", "changed_at", "missing_since"
        )
    )

    importer.sync_paths(workspace, ws, ["memories/memory_summary.md", gone])

    summary = WorkspaceFile.objects.get(path="memories/memory_summary.md")
    assert bytes(summary.blob.data) == b"## General Tips\n- synced\n"
    assert WorkspaceFile.objects.get(path=gone).missing_since is not None
    assert not RawMemory.objects.filter(file__path=gone, file__missing_since=None).exists()
    assert (
        set(
            WorkspaceFile.objects.exclude(
                path__in=[gone, "memories/memory_summary.md"]
            ).values_list("pk", "blob_id", "changed_at", "missing_since")
        )
        == others
    )
    assert ImportRun.objects.filter(workspace=workspace).count() == 1


def test_reimport_sees_a_change_that_kept_the_size(workspace_copy):
    ws = workspace_copy("small-a")
    _age(ws)
    import_workspace(ws, "a")
    path = ws / "memories" / "memory_summary.md"
    data = path.read_bytes()
    path.write_bytes(data.replace(b"a", b"b", 1))  # same size, new mtime

    result = import_workspace(ws, "a")

    assert result.changed == 1
    assert MemoryVersion.objects.filter(layout__memories_dir="memories").count() == 3


def test_a_change_racing_the_last_import_is_not_missed(workspace_copy):
    """A file rewritten right after an import, with the same size, mtime and all, is
    read again next time rather than trusted by its stat."""
    ws = workspace_copy("small-a")
    path = ws / "memories" / "memory_summary.md"
    os.utime(path)  # written just before the import
    import_workspace(ws, "a")
    before = path.stat()
    path.write_bytes(path.read_bytes().replace(b"a", b"c", 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    result = import_workspace(ws, "a")

    assert result.changed == 1
    row = WorkspaceFile.objects.get(path="memories/memory_summary.md")
    assert bytes(row.blob.data) == path.read_bytes()


def test_import_that_stops_at_the_size_limit_marks_nothing_missing(workspace_copy, settings):
    ws = workspace_copy("small-a")
    import_workspace(ws, "a")
    for path in ws.rglob("*"):
        if path.is_file():
            path.write_bytes(path.read_bytes() + b"\n")  # everything must be read again
    settings.MEMORYUI_MAX_IMPORT_BYTES = 5_000

    result = import_workspace(ws, "a")

    assert any("expands past" in e["error"] for e in result.errors)
    assert result.missing == 0
    assert not WorkspaceFile.objects.filter(missing_since__isnull=False).exists()


def test_an_import_stopped_at_the_size_limit_reports_what_it_met_before_and_where_it_stopped(
    workspace_copy, settings
):
    """The report lists the problems met before the limit, in the order met, then where
    reading stopped; what comes after was not looked at and is not reported."""
    ws = workspace_copy("small-a")
    (ws / "aaa-link").symlink_to(ws / "README.md")  # listed first
    (ws / "tests" / "zzz-link").symlink_to(ws / "README.md")  # listed last
    settings.MEMORYUI_MAX_IMPORT_BYTES = 5_000

    result = import_workspace(ws, "a")

    paths = [e["path"] for e in result.errors]
    assert paths[0] == "aaa-link" and "symbolic link" in result.errors[0]["error"]
    assert "expands past" in result.errors[-1]["error"]
    assert "tests/zzz-link" not in paths
    assert len(paths) == 2


def _stored(name: str) -> list[list[tuple]]:
    files = WorkspaceFile.objects.filter(workspace__name=name)
    by_file = {"file__workspace__name": name}
    return [
        sorted(
            files.values_list("path", "kind", "blob_id", "size", "problem", "layout__memories_dir")
        ),
        sorted(Rollout.objects.filter(**by_file).values_list("file__path", "rollout_id", "title")),
        sorted(RawMemory.objects.filter(**by_file).values_list("file__path", "rollout_id")),
        sorted(
            RolloutSummary.objects.filter(**by_file).values_list("file__path", "rollout_id", "slug")
        ),
        sorted(SearchDocument.objects.filter(**by_file).values_list("file__path", "kind", "body")),
    ]


@pytest.mark.parametrize("source", ["directory", "tar"])
def test_a_tree_written_a_few_files_at_a_time_is_stored_as_in_one_go(
    source, fixtures_dir, tmp_path, monkeypatch
):
    """The importer parses and writes a large tree in chunks (dropping each chunk's bytes
    once written); rollout summaries, whose ids the rollouts settle, come last."""

    tree_dir = fixtures_dir / "medium-300" / "workspace"
    path = tree_dir
    if source == "tar":
        path = tmp_path / "medium.tar"
        with tarfile.open(path, "w") as tar:
            tar.add(tree_dir, arcname=".")
    import_workspace(path, "whole")
    monkeypatch.setattr(syncing, "STORE_CHUNK", 7)
    import_workspace(path, "chunked")

    whole = _stored("whole")
    assert whole == _stored("chunked")
    assert len(whole[1]) == 300 and len(whole[3]) > 100


def _as_tar(tree_dir: Path, path: Path) -> Path:
    with tarfile.open(path, "w:gz" if path.name.endswith(".gz") else "w") as tar:
        tar.add(tree_dir, arcname=".")
    return path


@pytest.mark.parametrize("source", ["directory", "tar", "tar.gz"])
def test_a_tree_larger_than_memory_holds_is_stored_as_in_one_go(
    source, fixtures_dir, tmp_path, monkeypatch
):
    """Past ``HELD_BYTES`` of contents, a new file's bytes stay in the directory or the
    plain tar until its chunk is stored: the rows are the same, and no more than the
    held bytes and one chunk (bounded in bytes too) are ever in memory (a compressed
    tar, which cannot be read again by offset, is held whole)."""
    tree_dir = fixtures_dir / "medium-300" / "workspace"
    path = tree_dir if source == "directory" else _as_tar(tree_dir, tmp_path / f"m.{source}")
    import_workspace(path, "whole")
    total = sum(p.stat().st_size for p in tree_dir.rglob("*") if p.is_file())
    held_at_most = 20_000
    monkeypatch.setattr(reading, "HELD_BYTES", held_at_most)
    monkeypatch.setattr(syncing, "STORE_CHUNK_BYTES", 50_000)
    most_held = []
    found = []  # every item read (the import lets go of each once stored)
    real_sync, real_load = syncing.WorkspaceSync.sync_rows, reading.TreeReader.load

    def sync_rows(self):
        found.extend(self.items.values())
        return real_sync(self)

    def load(self, items):
        loaded = real_load(self, items)
        most_held.append(sum(len(i.data or b"") for i in found))
        return loaded

    monkeypatch.setattr(syncing.WorkspaceSync, "sync_rows", sync_rows)
    monkeypatch.setattr(reading.TreeReader, "load", load)
    result = import_workspace(path, "deferred")

    assert _stored("whole") == _stored("deferred")
    assert result.errors == []
    sizes = sorted(p.stat().st_size for p in tree_dir.rglob("*") if p.is_file())
    if source == "tar.gz":
        assert most_held[0] == total
    else:
        assert total > 50 * held_at_most
        # The held bytes, and a chunk of at most 50,000 bytes (or one larger file).
        assert max(most_held) <= held_at_most + max(50_000, sizes[-1]) < total * 0.2


@pytest.mark.parametrize("source", ["directory", "tar"])
def test_past_its_store_an_import_holds_only_the_files_that_get_versions(
    source, fixtures_dir, tmp_path, monkeypatch
):
    """Once a chunk is stored, its files are let go: while the import records the
    rollouts' memory reads, it holds none of the 900 files it read but its memory
    documents (the floor under a 100,000-rollout import's memory, bench/README.md).
    The run still counts every file."""
    tree_dir = fixtures_dir / "medium-300" / "workspace"
    path = tree_dir if source == "directory" else _as_tar(tree_dir, tmp_path / "m.tar")
    gc.collect()
    before = {id(o) for o in gc.get_objects() if type(o) is reading.Item}
    held = []
    real = usage.record_reads

    def record_reads(*args, **kwargs):
        gc.collect()
        held.extend(o for o in gc.get_objects() if type(o) is reading.Item and id(o) not in before)
        return real(*args, **kwargs)

    monkeypatch.setattr(usage, "record_reads", record_reads)
    monkeypatch.setattr(syncing, "STORE_CHUNK", 50)
    result = import_workspace(path, "m")

    assert result.files > 900 and result.added == result.files
    assert sorted(i.path for i in held) == [
        "memories/MEMORY.md",
        "memories/engineering/MEMORY.md",
        "memories/engineering/memory_summary.md",
        "memories/memory_summary.md",
    ]
    assert Rollout.objects.count() == 300


def test_a_new_file_gone_before_its_bytes_were_read_is_a_problem_and_not_counted(
    fixtures_dir, tmp_path, monkeypatch
):
    ws = tmp_path / "ws"
    shutil.copytree(fixtures_dir / "medium-300" / "workspace", ws, symlinks=True)
    monkeypatch.setattr(reading, "HELD_BYTES", 0)
    gone = sorted((ws / "sessions").glob("*.jsonl"))[-1]
    changed = sorted((ws / "sessions").glob("*.jsonl"))[0]
    real_load = reading.TreeReader.load

    def load(self, items):
        if gone.exists():  # between the scan and the first chunk's store
            gone.unlink()
            changed.write_bytes(changed.read_bytes() + b"\n")
        return real_load(self, items)

    monkeypatch.setattr(reading.TreeReader, "load", load)
    result = import_workspace(ws, "a")

    rel = str(gone.relative_to(ws))
    assert [e["path"] for e in result.errors] == [rel]
    assert "could not be read" in result.errors[0]["error"]
    assert not WorkspaceFile.objects.filter(path=rel).exists()
    assert sum(layout.rollouts for layout in result.layouts) == 299 == Rollout.objects.count()
    row = WorkspaceFile.objects.get(path=str(changed.relative_to(ws)))
    assert bytes(row.blob.data) == changed.read_bytes()  # taken as it was when stored
    monkeypatch.setattr(reading.TreeReader, "load", real_load)
    again = import_workspace(ws, "a")  # its stored mtime is the scan's: read again
    assert again.changed == 0 and again.errors == []


def test_a_new_file_replaced_by_another_before_its_bytes_were_read_is_a_problem(
    fixtures_dir, tmp_path, monkeypatch
):
    """A file whose bytes are read when its chunk is stored must still be the inode the
    scan listed (a path swapped meanwhile could lead anywhere); the others are read."""
    ws = tmp_path / "ws"
    shutil.copytree(fixtures_dir / "medium-300" / "workspace", ws, symlinks=True)
    monkeypatch.setattr(reading, "HELD_BYTES", 0)
    swapped = sorted((ws / "sessions").glob("*.jsonl"))[-1]
    real_load = reading.TreeReader.load

    def load(self, items):
        if not (tmp_path / "done").exists():
            (tmp_path / "done").touch()
            other = tmp_path / "other.jsonl"
            other.write_bytes(swapped.read_bytes())
            os.replace(other, swapped)  # same bytes, another inode
        return real_load(self, items)

    monkeypatch.setattr(reading.TreeReader, "load", load)
    result = import_workspace(ws, "a")

    rel = str(swapped.relative_to(ws))
    assert [(e["path"], e["error"]) for e in result.errors] == [
        (rel, "could not be read (replaced while being read)")
    ]
    assert Rollout.objects.count() == 299


def test_a_snapshot_that_changes_during_its_import_gives_a_problem_and_marks_nothing_gone(
    fixtures_dir, tmp_path, monkeypatch
):
    tree_dir = fixtures_dir / "medium-300" / "workspace"
    archive = _as_tar(tree_dir, tmp_path / "m.tar")
    import_workspace(archive, "a")
    (tmp_path / "more").mkdir()
    shutil.copytree(tree_dir, tmp_path / "more" / "ws", symlinks=True)
    extra = tmp_path / "more" / "ws" / "sessions" / "extra-rollout.jsonl"
    extra.write_bytes(next((tree_dir / "sessions").glob("*.jsonl")).read_bytes())
    _as_tar(tmp_path / "more" / "ws", archive)
    monkeypatch.setattr(reading, "HELD_BYTES", 0)
    real_load = reading.TreeReader.load

    def load(self, items):
        with open(archive, "r+b") as fh:  # another writer truncates it meanwhile
            fh.truncate(archive.stat().st_size // 2)
        return real_load(self, items)

    monkeypatch.setattr(reading.TreeReader, "load", load)
    result = import_workspace(archive, "a")

    assert [e["error"] for e in result.errors] == [reading.CHANGED_WHILE_READ]
    assert result.errors[0]["path"] == "sessions/extra-rollout.jsonl"
    assert result.missing == 0
    assert not WorkspaceFile.objects.filter(missing_since__isnull=False).exists()
    assert not WorkspaceFile.objects.filter(path="sessions/extra-rollout.jsonl").exists()
