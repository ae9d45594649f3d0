"""The format layer agrees with the SDK's own code on every fixture tree."""

import json
from pathlib import Path

import pytest
from agents.sandbox.memory.storage import _extract_selection_item, _updated_at_sort_key

from generation import tree

FIXTURES = ["small-a", "small-b", "medium-300"]


def layouts_of(fixtures_dir: Path, name: str) -> list[tuple[Path, dict]]:
    manifest = json.loads((fixtures_dir / name / "manifest.json").read_text())
    ws = fixtures_dir / name / "workspace"
    return [(ws / c["memories_dir"], c) for c in manifest["counts"].values()]


@pytest.mark.parametrize("name", FIXTURES)
def test_raw_memory_headers_match_the_sdks_reading(fixtures_dir, name):
    for memories, _ in layouts_of(fixtures_dir, name):
        for path in sorted((memories / "raw_memories").glob("*.md")):
            text = path.read_text()
            sdk = _extract_selection_item(text.rstrip("\n"))
            ours = tree.parse_raw_memory(text)
            assert ours.selectable == (sdk is not None)
            if sdk is not None:
                assert ours.headers["rollout_id"] == sdk.rollout_id
                assert ours.headers["rollout_summary_file"] == sdk.rollout_summary_file
                assert ours.headers.get("updated_at", "") == sdk.updated_at
                assert tree.updated_at_sort_key(sdk.updated_at) == _updated_at_sort_key(text)


@pytest.mark.parametrize("name", FIXTURES)
def test_selection_and_raw_memories_md_are_rebuilt_byte_for_byte(fixtures_dir, name):
    for memories, counts in layouts_of(fixtures_dir, name):
        selection_bytes = (memories / "phase_two_selection.json").read_bytes()
        recorded = tree.parse_selection(selection_bytes)
        texts = [p.read_text() for p in sorted((memories / "raw_memories").glob("*.md"))]

        selected = tree.select_for_consolidation(texts, limit=256)

        assert len(selected) == counts["selected"]
        assert [i.rollout_id for i in selected] == [i.rollout_id for i in recorded.items]
        assert tree.dump_selection(selected, recorded.updated_at).encode() == selection_bytes
        merged = tree.merge_raw_memories(
            (memories / "raw_memories" / f"{i.rollout_id}.md").read_text() for i in selected
        )
        assert merged.encode() == (memories / "raw_memories.md").read_bytes()


def test_selection_limit_forgets_the_oldest_and_missing_timestamps_first(fixtures_dir):
    memories, _ = layouts_of(fixtures_dir, "medium-300")[0]
    texts = [p.read_text() for p in sorted((memories / "raw_memories").glob("*.md"))]
    everything = tree.select_for_consolidation(texts, limit=4096)
    newest = tree.select_for_consolidation(texts, limit=10)

    diff = tree.diff_selection(everything, newest)

    assert newest == everything[:10]
    assert diff.retained == [i.rollout_id for i in newest] and diff.added == []
    assert diff.removed == [i.rollout_id for i in everything[10:]]
    unknown = [i for i in everything if i.updated_at in ("", "unknown")]
    assert unknown and everything[-len(unknown) :] == unknown


@pytest.mark.parametrize("name", FIXTURES)
def test_raw_memories_and_summaries_dump_back_to_the_same_bytes(fixtures_dir, name):
    for memories, _ in layouts_of(fixtures_dir, name):
        for path in sorted((memories / "raw_memories").glob("*.md")):
            text = path.read_text()
            raw = tree.parse_raw_memory(text)
            if set(raw.headers) != set(tree.RAW_MEMORY_HEADERS):
                continue
            assert tree.dump_raw_memory(**raw.headers, body=raw.body) == text
        for path in sorted((memories / "rollout_summaries").glob("*.md")):
            text = path.read_text()
            summary = tree.parse_rollout_summary(path.name, text)
            assert tree.dump_rollout_summary(**summary.headers, body=summary.body) == text
            assert tree.normalize_slug(summary.slug) == summary.slug
