"""Approval writes exactly what was decided, task numbers included: whatever a reviewer
accepts, rejects or restores, each task group's tasks are numbered 1, 2, ... in document
order, and every ``[Task n]`` reference inside the group points at the task it pointed
at in the text it comes from (one whose task is gone is taken out)."""

import re
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from generation import review
from tests.test_task_review import (
    CITED,
    blocks,
    by_group,
    cite_line,
    find,
    keywords,
    numbered,
    tagged,
    with_extra_rollout,
)

FIXTURE = "medium-300/workspace/memories/engineering/MEMORY.md"
GROUPS = ("GTM pipeline analysis", "menus bug fixes", "jobkit bug fixes", "acme_metrics bug fixes")
NEW_TASK = (
    "## Task 1: gtm-churn-followup, outcome success\n\n### rollout_summary_files\n\n"
    "- rollout_summaries/gtm-0999-abc123_gtm-churn-followup.md (rollout_id=gtm-0999-abc123,"
    " updated_at=2026-08-01T00:00:00+00:00, terminal_state=completed)\n\n"
    "### keywords\n\n- churn, followup\n\n"
)


def heading(group: str) -> str:
    return f"# Task Group: {group}\n"


@cache
def sdk_parts(fixtures_dir: Path) -> tuple[str, ...]:
    """Four of the SDK's task groups (38 tasks), references written as the rollout the
    task cites first."""
    text = (fixtures_dir / FIXTURE).read_text()
    groups = by_group(tagged(blocks(text)))
    chosen = [g for g in groups if any(g[0].startswith(heading(name)) for name in GROUPS)]
    return tuple(part for group in chosen for part in group)


def proposal_parts(current: tuple[str, ...]) -> list[str]:
    """What a model does to them, keeping its own references right: deletes a task,
    puts one in above the others, moves one to another group, merges two, rewords a
    section, and leaves the references of a group it does not touch numbered as they
    are."""
    parts = list(current)
    del parts[find(parts, "GTM pipeline analysis", 3)]  # a deletion
    parts.insert(find(parts, "GTM pipeline analysis", 1), NEW_TASK)  # an insertion
    moved = parts.pop(find(parts, "menus bug fixes", 2))  # a move to another group
    parts.insert(find(parts, "jobkit bug fixes", 3) + 1, moved)
    keep, gone = find(parts, "acme_metrics bug fixes", 4), find(parts, "acme_metrics bug fixes", 5)
    parts[keep] = with_extra_rollout(parts[keep], cite_line(parts[gone]), keywords(parts[gone]))
    del parts[gone]  # a merge
    section = next(
        i
        for i in range(find(parts, "menus bug fixes", 1), len(parts))
        if parts[i].startswith("## ") and not parts[i].startswith("## Task ")
    )
    parts[section] = parts[section].replace("\n- ", "\n- (reworded) ", 1)
    return parts


@cache
def world(fixtures_dir: Path) -> tuple[str, str, tuple[review.Change, ...]]:
    current = sdk_parts(fixtures_dir)
    base, proposed = numbered(list(current)), numbered(proposal_parts(current))
    changes = tuple(c for c in review.compare(base, proposed))
    return base, proposed, changes


def tasks_and_references(text: str) -> dict[str, tuple[list[int], dict[int, list[str]], dict]]:
    """Per task group: its task numbers in order, the rollouts each number's task cites,
    and each bullet (without its references) with the numbers it refers to."""
    out = {}
    for group in by_group(blocks(text)):
        numbers, cites, bullets = [], {}, {}
        for part in group[1:]:
            if match := re.match(r"## Task (\d+):", part):
                n = int(match.group(1))
                numbers.append(n)
                cites.setdefault(n, CITED.findall(part))
                continue
            for line in part.splitlines():
                refs = [int(n) for n in re.findall(r"\[Task (\d+)\]", line)]
                bare = re.sub(r" ?\[Task \d+\]", "", line)
                if refs or line.startswith("- "):
                    bullets.setdefault(bare, refs)
        out[group[0].splitlines()[0]] = (numbers, cites, bullets)
    return out


def pointed_at(refs: list[int], cites: dict[int, list[str]]) -> list[list[str]]:
    return [cites.get(n, []) for n in refs]


def expected(source: list[list[str]], result_cites: dict[int, list[str]]) -> list[int]:
    """The numbers the result should refer to for a source's references: the task of the
    result that holds the rollout the source's task cited first; none when no task
    does."""
    out = []
    for rollouts in source:
        first = rollouts[0] if rollouts else None
        holders = [n for n, cites in result_cites.items() if first in cites]
        out += holders[:1]
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_decisions_number_each_group_from_one_and_keep_every_reference(fixtures_dir, data):
    base, proposed, changes = world(fixtures_dir)
    decidable = [c for c in changes if c.status != "unchanged"]
    choices = data.draw(
        st.lists(
            st.sampled_from(["accept", "reject", None]),
            min_size=len(decidable),
            max_size=len(decidable),
        )
    )
    decisions = {c.key: d for c, d in zip(decidable, choices, strict=True) if d}

    result = review.assemble(changes, decisions, {})

    sources = (tasks_and_references(base), tasks_and_references(proposed))
    for title, (numbers, cites, bullets) in tasks_and_references(result).items():
        assert numbers == list(range(1, len(numbers) + 1)), title
        for bare, refs in bullets.items():
            assert all(n in cites for n in refs), (title, bare)
            wanted = [
                expected(pointed_at(doc[title][2][bare], doc[title][1]), cites)
                for doc in sources
                if title in doc and bare in doc[title][2]
            ]
            assert wanted and refs in wanted, (title, bare, refs, wanted)


def test_the_world_makes_each_kind_of_change(fixtures_dir):
    _, _, changes = world(fixtures_dir)

    kinds = sorted((c.status, c.pairing) for c in changes if c.status != "unchanged")

    # The sections whose references the model dropped or renumbered for a deleted,
    # merged or moved task changed (one also reworded); the rest did not.
    assert kinds == [
        ("added", ""),
        ("changed", ""),
        ("changed", ""),
        ("changed", ""),
        ("changed", "merged"),
        ("moved", ""),
        ("removed", ""),
    ]
