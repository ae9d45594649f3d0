"""A reviewer's next decision is answered with the duplicates it makes, found in the task
groups that need looking at instead of the whole assembled MEMORY.md (seconds for a
100,000-rollout workspace's, bench/README). What it finds must be exactly what the whole
result shows: compared here over random decisions and edits, on the SDK's own MEMORY.md
and on a generated one with repeated task group titles (keys numbered "#2")."""

import importlib.util
import random
import re
import sys
from pathlib import Path

import pytest

from generation import review
from generation.review import repeated
from generation.review.document import grouped_entries

BENCH = Path(__file__).resolve().parent.parent / "bench"


def whole(current: str, proposed: str, decisions: dict, edits: dict) -> list[tuple]:
    """What the review has always found: the duplicates of the whole result that
    involve an entry the proposal touches."""
    changes = review.compare(current, proposed)
    touched = {
        key for c in changes if c.status != "unchanged" and c.proposed for key in (c.key, *c.also)
    }
    return [
        (a.key, b.key, a.title, b.title)
        for a, b in review.duplicates(review.assemble(changes, decisions, edits))
        if a.key in touched or b.key in touched
    ]


def scoped(current: str, proposed: str, decisions: dict, edits: dict) -> list[tuple] | None:
    found = review.scoped_duplicates(current, proposed, decisions, edits)
    if found is None:
        return None
    changes = review.compare(current, proposed)
    touched = {
        key for c in changes if c.status != "unchanged" and c.proposed for key in (c.key, *c.also)
    }
    return [
        (a.key, b.key, a.title, b.title) for a, b in found if a.key in touched or b.key in touched
    ]


def groups_of(text: str) -> list[str]:
    return re.split(r"(?m)^(?=# Task Group: )", text)


def tasks_of(group: str) -> list[str]:
    return re.findall(r"(?ms)^## Task \d+:.*?(?=^## |^# |\Z)", group)


def proposal_of(text: str, rng: random.Random, touch: int) -> str:
    """A consolidation touching ``touch`` task groups: a task copied into another group
    (the same citation: a duplicate across groups), a task reworded, a task added that
    repeats a neighbour's words and citation, a task removed."""
    groups = groups_of(text)
    head, groups = groups[0], groups[1:]
    chosen = rng.sample(range(len(groups)), min(touch, len(groups)))
    for n, i in enumerate(chosen):
        tasks = tasks_of(groups[i])
        if not tasks:
            continue
        task = rng.choice(tasks)
        kind = n % 4
        if kind == 0:  # copied into the next group, reworded a little
            j = (i + 1) % len(groups)
            copy = task.replace("outcome", "result", 1)
            groups[j] = groups[j].replace("\n## ", "\n" + copy + "## ", 1)
        elif kind == 1:  # reworded in place
            groups[i] = groups[i].replace(task, task.replace("- ", "- reworded: ", 1), 1)
        elif kind == 2:  # a near repeat of a task of its group, added at the end
            groups[i] = groups[i].rstrip("\n") + "\n\n" + task.replace("success", "partial")
        else:  # removed
            groups[i] = groups[i].replace(task, "", 1)
    return head + "".join(groups)


def with_repeated_titles(text: str) -> str:
    """``text`` with every fifth task group titled as the one three before it: keys a
    document takes twice are numbered across it ("#2"), which a narrowed search must
    number alike."""
    titles = re.findall(r"(?m)^# Task Group: (.*)$", text)
    lines = text.split("\n")
    n = 0
    for i, line in enumerate(lines):
        if line.startswith("# Task Group: "):
            if n >= 3 and n % 5 == 4:
                lines[i] = f"# Task Group: {titles[n - 3]}"
            n += 1
    return "\n".join(lines)


def random_decisions(current: str, proposed: str, rng: random.Random) -> tuple[dict, dict]:
    changes = [c for c in review.compare(current, proposed) if c.status != "unchanged"]
    decisions = {
        c.key: rng.choice([review.ACCEPT, review.REJECT]) for c in changes if rng.random() < 0.6
    }
    citing = [c for c in changes if c.proposed and "rollout_summaries/" in c.proposed]
    edits = {}
    for change in rng.sample(citing, min(len(citing), rng.choice([0, 0, 1, 2]))):
        # An edit that cites another entry's rollout too: it may find new duplicates.
        other = rng.choice(citing).proposed
        cite = re.search(r"rollout_summaries/\S+\.md", other)
        edits[change.key] = change.proposed.rstrip("\n") + f"\n- also {cite[0]}\n\n"
    return decisions, edits


def sdk_memory_md(fixtures_dir: Path) -> str:
    return (fixtures_dir / "medium-300" / "workspace" / "memories" / "MEMORY.md").read_text()


def generated_memory_md(tmp_path: Path) -> str:
    generate_tree = sys.modules.get("generate_tree")  # the bench scripts' own name
    if generate_tree is None:
        spec = importlib.util.spec_from_file_location("generate_tree", BENCH / "generate_tree.py")
        assert spec is not None and spec.loader is not None
        generate_tree = importlib.util.module_from_spec(spec)
        sys.modules["generate_tree"] = generate_tree  # its dataclasses look it up
        spec.loader.exec_module(generate_tree)
    generate_tree.main([str(tmp_path / "tree"), "--rollouts", "600", "--seed", "3"])
    return (tmp_path / "tree" / "memories" / "MEMORY.md").read_text()


@pytest.mark.parametrize("source", ["sdk", "generated"])
def test_the_duplicates_a_decision_makes_are_those_of_the_whole_result(
    source, fixtures_dir, tmp_path
):
    current = sdk_memory_md(fixtures_dir) if source == "sdk" else generated_memory_md(tmp_path)
    current = with_repeated_titles(current)
    rng = random.Random(7)
    compared = narrowed = found = 0
    for _ in range(40):
        proposed = proposal_of(current, rng, touch=rng.choice([1, 2, 3, 4]))
        for _ in range(5):
            decisions, edits = random_decisions(current, proposed, rng)
            expected = whole(current, proposed, decisions, edits)
            got = scoped(current, proposed, decisions, edits)
            compared += 1
            if got is not None:
                narrowed += 1
                assert got == expected, (decisions, edits)
            found += bool(expected)
    # The comparison means something: most answers came from the narrowed search, and
    # many decision sets made duplicates to find.
    assert narrowed > compared / 2
    assert found > compared / 4


def test_a_key_taken_twice_keeps_its_number_in_the_narrowed_search(tmp_path):
    text = generated_memory_md(tmp_path)
    titles = re.findall(r"(?m)^# Task Group: (.*)$", text)
    # Two task groups of one title, far apart: the second one's key is "...#2".
    current = text.replace(f"# Task Group: {titles[-1]}\n", f"# Task Group: {titles[0]}\n", 1)
    heading = f"# Task Group: {titles[0]}\n"
    second = current.index(heading, current.index(heading) + 1)
    at = current.index("\n## Task ", second)
    proposed = current[:at] + current[at:].replace("- ", "- reworded: ", 1)

    assert scoped(current, proposed, {}, {}) == whole(current, proposed, {}, {})
    scope = review.duplicate_scope(current, proposed, {})
    assert scope is not None
    heads = [c.key for c in scope if c.kind == "task_group" and not c.group]
    assert len(heads) == 2 and heads[1] == heads[0] + "#2"  # both groups of that title


@pytest.mark.parametrize("source", ["sdk", "generated"])
def test_a_handbook_read_group_by_group_has_the_entries_read_whole(source, fixtures_dir, tmp_path):
    text = sdk_memory_md(fixtures_dir) if source == "sdk" else generated_memory_md(tmp_path)
    titles = re.findall(r"(?m)^# Task Group: (.*)$", text)
    # A title taken twice, so that keys are numbered across groups ("#2").
    text = text.replace(f"# Task Group: {titles[-1]}\n", f"# Task Group: {titles[0]}\n", 1)

    assert grouped_entries(text) == review.entries(text)
    # What it cannot read group by group, it leaves to the whole document's reading.
    assert grouped_entries("A preamble\n\n" + text) is None
    fenced = text.replace("\n# Task Group: ", "\n```\n# Task Group: ", 1)
    assert grouped_entries(fenced) is None


@pytest.mark.parametrize("source", ["sdk", "generated"])
def test_the_scope_read_unit_by_unit_is_the_scope_assembled_whole(source, fixtures_dir, tmp_path):
    """A new decision assembles only the unit of task groups its entry is in; the
    entries of all units, put in order, are those of the scope assembled and read
    whole: the same keys (numbered alike), titles and texts, in the same order."""
    current = sdk_memory_md(fixtures_dir) if source == "sdk" else generated_memory_md(tmp_path)
    current = with_repeated_titles(current)
    rng = random.Random(11)
    compared = by_unit = copied = 0
    tasks = tasks_of(current)
    for _ in range(30):
        proposed = proposal_of(current, rng, touch=rng.choice([2, 3, 4, 6]))
        for _ in range(5):
            decisions, edits = random_decisions(current, proposed, rng)
            if rng.random() < 0.3:  # an edit that makes a task another group's, key and all
                touched = [
                    c
                    for c in review.compare(current, proposed)
                    if c.kind == "task" and c.status != "unchanged" and c.proposed
                ]
                if touched:
                    edits[rng.choice(touched).key] = rng.choice(tasks)
                    copied += 1
            scope = review.duplicate_scope(current, proposed, edits)
            if scope is None:
                continue
            changes, index = repeated._scope(current, proposed)
            compared += 1
            found = repeated._unit_entries(scope, index, decisions, edits)
            if found is None:
                continue
            by_unit += 1
            result = review.assemble(scope, decisions, edits)
            whole_entries = grouped_entries(result) or review.entries(result)
            assert found[0] == whole_entries, (decisions, edits)
            assert found[1] == {repeated.key_base(e.key) for e in whole_entries}
    assert by_unit > compared * 0.6 and compared > 50 and copied > 10


def test_a_new_decision_assembles_only_its_own_unit(tmp_path, monkeypatch):
    current = with_repeated_titles(generated_memory_md(tmp_path))
    proposed = proposal_of(current, random.Random(5), touch=6)
    changed = [c for c in review.compare(current, proposed) if c.status != "unchanged"]
    assert review.scoped_duplicates(current, proposed, {}, {}) is not None
    assembled = []
    real = repeated._assemble_unit
    monkeypatch.setattr(
        repeated, "_assemble_unit", lambda unit, *a: assembled.append(unit) or real(unit, *a)
    )
    for decision in (review.REJECT, review.ACCEPT):
        assembled.clear()
        decisions = {changed[0].key: decision}
        assert review.scoped_duplicates(current, proposed, decisions, {}) is not None
        if decision == review.REJECT:  # its own unit, and only that one
            assert len(assembled) == 1 and changed[0].key in {c.key for c in assembled[0]}
        else:  # accepted, as undecided: the unit as kept
            assert assembled == []
