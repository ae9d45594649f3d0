"""The format layer agrees with the SDK's own code on every fixture tree."""

import asyncio
import json
import random
from pathlib import Path

import pytest
from agents.sandbox.config import MemoryLayoutConfig
from agents.sandbox.manifest import Manifest
from agents.sandbox.memory.storage import (
    SandboxMemoryStorage,
    _extract_selection_item,
    _updated_at_sort_key,
)
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

from generation import tree
from generation.phase_two import plan_phase_two

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


def raw_memory(rollout_id: str, updated_at: str | None, body: str = "- a note\n") -> str:
    headers = [f"rollout_id: {rollout_id}"]
    if updated_at is not None:
        headers.append(f"updated_at: {updated_at}")
    headers += [
        f"rollout_path: sessions/{rollout_id}.jsonl",
        f"rollout_summary_file: rollout_summaries/{rollout_id}_work.md",
        "terminal_state: completed",
    ]
    return "\n".join(headers) + f"\n\n{body}"


def test_selection_with_tied_timestamps_and_more_raw_memories_than_the_limit_is_the_sdks(
    tmp_path,
):
    """The SDK's own phase-two selection (``build_phase_two_input_selection``) over the
    same raw memory files and previous selection as memoryui's plan."""

    tie = "2026-03-02T10:00:00+00:00"
    texts = [
        # Five share one timestamp: the rollout id decides among them, highest first.
        *(raw_memory(f"r-{n}", tie) for n in ("0a", "0b", "1a", "9z", "10")),
        raw_memory("r-newest", "2026-03-02T10:00:01+00:00"),
        raw_memory("r-same-instant-as-z", "2026-03-02T10:00:00Z"),  # compared as text
        raw_memory("r-older", "2026-03-01T23:59:59+00:00"),
        raw_memory("r-unknown", "unknown"),
        raw_memory("r-empty", ""),
        raw_memory("r-missing", None),
        raw_memory("r-in-body", None, body="updated_at: 2030-01-01T00:00:00+00:00\n"),
        "rollout_id: r-no-summary-file\nupdated_at: 2099-01-01\n\n- not selectable\n",
    ]
    random.Random(9).shuffle(texts)
    limit = 6
    # The last consolidation chose one rollout whose raw memory is gone since, one that
    # the limit now leaves out, and one that stays.
    previous = tree.select_for_consolidation(
        [
            raw_memory("r-gone", "2026-01-01T00:00:00+00:00"),
            raw_memory("r-older", "2026-03-01T23:59:59+00:00"),
            raw_memory("r-newest", "2026-03-02T10:00:01+00:00"),
        ],
        3,
    )
    memories = tmp_path / "memories"
    (memories / "raw_memories").mkdir(parents=True)
    for text in texts:
        rollout_id = tree.read_headers(text, ("rollout_id",))["rollout_id"]
        (memories / "raw_memories" / f"{rollout_id}.md").write_text(text)
    (memories / "phase_two_selection.json").write_text(tree.dump_selection(previous, tie))

    async def sdk_selection():
        session = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(tmp_path)))
        await session.start()
        storage = SandboxMemoryStorage(
            session=session, layout=MemoryLayoutConfig(memories_dir="memories", sessions_dir="s")
        )
        try:
            chosen = await storage.build_phase_two_input_selection(
                max_raw_memories_for_consolidation=limit
            )
            await storage.rebuild_raw_memories(selected_items=chosen.selected)
            return chosen, (memories / "raw_memories.md").read_text()
        finally:
            await session.shutdown()

    sdk, sdk_raw_memories_md = asyncio.run(sdk_selection())
    plan = plan_phase_two(texts, tree.Selection(previous, tie, None), limit)

    assert [item.__dict__ for item in plan.selected] == [item.to_dict() for item in sdk.selected]
    assert [item.rollout_id for item in plan.selected] == [
        "r-in-body",
        "r-newest",
        "r-same-instant-as-z",
        "r-9z",
        "r-1a",
        "r-10",
    ]
    assert set(plan.diff.retained) == sdk.retained_rollout_ids == {"r-newest"}
    assert plan.diff.removed == [item.rollout_id for item in sdk.removed] == ["r-older", "r-gone"]
    assert plan.raw_memories_md == sdk_raw_memories_md
