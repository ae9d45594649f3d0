"""How the entry checks do on the paraphrased corpus (``tests/paraphrased_corpus.py``),
per family, half and path: for ``bench/bench_paraphrased.py`` and its test.

The three paths an entry reaches the checks by:

- ``proposal``: a consolidation's entry citing the rollout it came from (the user's
  words are known);
- ``agent``: the same entry added by the agent to its own ``MEMORY.md`` (an upload or an
  import), citing a rollout the workspace holds;
- ``edit``: the same entry written by a person on the memory page, checked against the
  rollout it cites that the workspace holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from memoryui import entry_checks
from tests.paraphrased_corpus import Entry, Half, entries

PATHS = ("proposal", "agent", "edit")
ROLLOUT = "r1"
SUMMARY = "rollout_summaries/r1_task.md"


def wrapped(entry: Entry) -> str:
    """The entry as phase two writes one: a task group citing its rollout summary."""
    return (
        "# Task Group: corpus\n\nscope: corpus\n\n## Task 1: the user's request, outcome "
        f"success\n\n{entry.text}\n\n### rollout_summary_files\n\n- {SUMMARY} "
        f"(rollout_id={ROLLOUT}, terminal_state=completed)\n"
    )


def sources(entry: Entry) -> entry_checks.Sources:
    """What the entry's citation leads to: a summary of the request and the rollout's
    user and assistant messages (tool output is where an injection came from)."""
    return entry_checks.Sources(
        summaries={SUMMARY: f"The user asked: {entry.user}\n"},
        rollout_of={SUMMARY: ROLLOUT},
        items={ROLLOUT: [(1, entry_checks.USER, entry.user), (3, entry_checks.ASSISTANT, "Done.")]},
    )


def flags_on(path: str, entry: Entry) -> list[dict]:
    if path == "proposal":
        return entry_checks.check_entry(wrapped(entry), sources(entry))[1]
    if path == "agent":
        before = "# Task Group: earlier\n\nscope: earlier\n\n- Nothing yet.\n"
        return entry_checks.agent_entry_flags(
            before, before + "\n" + wrapped(entry), sources(entry)
        )
    return entry_checks.entry_flags(wrapped(entry), sources(entry))


@dataclass
class Score:
    poisoned: dict[str, int] = field(default_factory=dict)
    caught: dict[str, int] = field(default_factory=dict)
    benign: dict[str, int] = field(default_factory=dict)
    false: dict[str, int] = field(default_factory=dict)
    missed: list[str] = field(default_factory=list)
    false_alarms: list[tuple[str, str]] = field(default_factory=list)

    @property
    def detection(self) -> float:
        return sum(self.caught.values()) / max(1, sum(self.poisoned.values()))

    @property
    def false_positive(self) -> float:
        return sum(self.false.values()) / max(1, sum(self.benign.values()))


def score(
    path: str,
    half: Half | None,
    check: Callable[[str, Entry], list[dict]] = flags_on,
    only: Iterable[Entry] | None = None,
) -> Score:
    result = Score()
    for entry in only if only is not None else entries(half):
        found = check(path, entry)
        if entry.poisoned:
            result.poisoned[entry.family] = result.poisoned.get(entry.family, 0) + 1
            if found:
                result.caught[entry.family] = result.caught.get(entry.family, 0) + 1
            else:
                result.missed.append(entry.id)
        else:
            result.benign[entry.family] = result.benign.get(entry.family, 0) + 1
            if found:
                result.false[entry.family] = result.false.get(entry.family, 0) + 1
                result.false_alarms.append((entry.id, found[0]["reason"]))
    return result
