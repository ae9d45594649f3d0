"""Detection rate and false positives of the poisoning flags, and accuracy of the evidence
matcher, on the labelled corpus in ``tests/data/poisoning`` (``poisoning_corpus.py``).

    .venv/bin/python bench/bench_poisoning.py
    .venv/bin/python bench/bench_poisoning.py --library-python /tmp/amg/bin/python

``--library-python``: a Python with ``agent-memory-guard`` installed (kept out of
memoryui's environment): its ``scan()`` runs on the same entries, for comparison.
The script sets Django up on a SQLite file in a temp dir; nothing else is written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

LIBRARY_SCAN = """
import json, sys
from agent_memory_guard.scan import scan
entries = json.load(sys.stdin)
print(json.dumps([[t.value for t in scan(text).threats] for text in entries]))
"""


def setup(workdir: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "memoryui.settings"
    os.environ.setdefault("DEBUG", "1")  # development settings, as bin/start runs them
    os.environ["DATABASE_URL"] = f"sqlite:///{workdir / 'bench.sqlite3'}"
    os.environ["MEMORYUI_VAR_DIR"] = str(workdir / "var")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def corpus_entries(workdir: Path) -> tuple[Any, list[tuple[str, str, list[dict[str, Any]]]]]:
    from memoryui import entry_checks
    from memoryui.importer import import_workspace
    from memoryui.models import Layout
    from tests.poisoning_corpus import CORPUS, corpus_proposal

    root = workdir / "workspace"
    shutil.copytree(CORPUS / "workspace", root)
    import_workspace(root, "corpus")
    proposal = corpus_proposal(Layout.objects.get(workspace__name="corpus"))
    checks = entry_checks.ensure(proposal)
    entries = [
        (f"{d}:{k}", t, checks[(d, k, entry_checks.check_key(t))].flags)
        for d, k, t in entry_checks.proposed_texts(proposal)
    ]
    return proposal, entries


def report_flags(entries: list[tuple[str, str, list[dict[str, Any]]]]) -> dict[str, Any]:
    from tests.poisoning_corpus import score

    result = score(entries)
    print("## Poisoning flags on the corpus\n")
    print("| injection kind | reached an entry | flagged | flagged with its kind |")
    print("|---|---:|---:|---:|")
    for kind in sorted(result.reached):
        print(
            f"| {kind} | {result.reached[kind]} | {result.caught.get(kind, 0)} | "
            f"{result.caught_as_kind.get(kind, 0)} |"
        )
    print(
        f"\nDetection rate: {result.detection_rate:.0%} of {sum(result.reached.values())} "
        f"injected entries; never reached memory: {', '.join(result.unreached) or 'none'}."
    )
    print(
        f"False positives: {len(result.benign_flagged)} of {result.benign_entries} benign "
        f"entries ({result.false_positive_rate:.1%}); by flag: "
        + (", ".join(f"{k} {n}" for k, n in sorted(result.false_by_flag.items())) or "none")
    )
    for key, kind, reason in result.benign_flagged:
        print(f"  - {key}: {kind}: {reason}")
    return {
        "detection_rate": result.detection_rate,
        "false_positive_rate": result.false_positive_rate,
        "reached": result.reached,
        "caught_as_kind": result.caught_as_kind,
        "false_by_flag": result.false_by_flag,
    }


def report_library(python: str, entries: list[tuple[str, str, list[dict[str, Any]]]]) -> None:
    from tests.poisoning_corpus import labels

    texts = [t for _, t, _ in entries]
    done = subprocess.run(
        [python, "-c", LIBRARY_SCAN],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
    )
    threats = json.loads(done.stdout.strip().splitlines()[-1])
    markers = {v["marker"]: v["kind"] for v in labels().values() if v["label"] == "injected"}
    by_kind: dict[str, list[int]] = {}
    benign = benign_hit = injected = injected_hit = 0
    for (key, text, _), found in zip(entries, threats, strict=True):
        kinds = {kind for marker, kind in markers.items() if marker in text}
        for kind in kinds:
            seen = by_kind.setdefault(kind, [0, 0])
            seen[0] += 1
            seen[1] += bool(found)
        if kinds:
            injected += 1
            injected_hit += bool(found)
            print(f"  {key}: {', '.join(sorted(kinds))} -> {found or 'nothing'}", file=sys.stderr)
        else:
            benign += 1
            benign_hit += bool(found)
    print("\n## agent-memory-guard scan() on the same entries\n")
    print("| injection kind | injected entries | flagged by the library |")
    print("|---|---:|---:|")
    for kind, (total, hit) in sorted(by_kind.items()):
        print(f"| {kind} | {total} | {hit} |")
    print(f"\nInjected entries it flagged: {injected_hit} of {injected}.")
    print(f"Benign entries it flagged: {benign_hit} of {benign}.")


def report_evidence(entries: list[tuple[str, str, list[dict[str, Any]]]], workdir: Path) -> None:
    """Each matcher on the corpus's task groups against the summaries they cite. A
    sentence the summary holds should be supported; one it does not hold (the reader
    notes phase one copied from tool output into the raw memory only) should not, nor
    should a supported one with a number changed."""
    import difflib

    from generation import evidence
    from tests.poisoning_corpus import CORPUS

    memories = CORPUS / "workspace" / "memories"
    changed_digit = re.compile(r"\d+")
    cases: list[tuple[str, list[tuple[str, str]], bool]] = []
    # A task cites its rollouts' summaries and holds keyword bullets only; the sentences
    # to check are in its group's own sections (preferences, knowledge, failures), which
    # draw on what the group's tasks cite. Entries come in the file's order: a group's
    # header, its tasks, then its sections (keyed "... in task_group:<name>").
    group_cites: dict[str, list[str]] = {}
    group = ""
    for key, text, _ in entries:
        if key.startswith("memory_md:task_group:"):
            group = key.removeprefix("memory_md:task_group:")
        elif key.startswith("memory_md:task:") and group:
            group_cites.setdefault(group, []).extend(
                re.findall(r"rollout_summaries/[\w.-]+\.md", text)
            )
    for key, text, _ in entries:
        if not key.startswith("memory_md:") or " in task_group:" not in key:
            continue  # summary sections paraphrase many rollouts: no clean label
        cited = group_cites.get(key.rpartition(" in task_group:")[2], [])
        sources = [(p, (memories / p).read_text()) for p in cited if (memories / p).exists()]
        if not sources:
            continue
        held = " ".join(" ".join(t for _, t in sources).lower().split())
        for _, claim in evidence.claims_of(text):
            said = " ".join(claim.lower().rstrip(".").split()) in held
            cases.append((claim, sources, said))
            if said and changed_digit.search(claim):
                wrong = changed_digit.sub(lambda m: str(int(m.group(0)) + 1), claim, count=1)
                cases.append((wrong, sources, False))

    def lexical(claim: str, sources: list[tuple[str, str]]) -> bool:
        return evidence.check(f"- {claim}\n", sources)[0].supported

    def recall_only(claim: str, sources: list[tuple[str, str]]) -> bool:
        indexed, _ = evidence.index(sources)
        return evidence.best_passage(claim, indexed)[1] >= evidence.SUPPORT_RECALL

    def ratio(claim: str, sources: list[tuple[str, str]]) -> bool:
        best = max(
            difflib.SequenceMatcher(None, claim.lower(), p.text.lower()).ratio()
            for _, t in sources
            for p in evidence.passages("", t)
        )
        return best >= 0.6

    print("\n## Evidence matchers\n")
    print(
        f"{sum(1 for c in cases if c[2])} sentences their summaries hold, "
        f"{sum(1 for c in cases if not c[2])} they do not (notes from tool output, "
        "a number changed).\n"
    )
    if not cases:
        print("No sentence of the corpus's group sections has a cited summary to check.")
        return
    print("| matcher | supported found | unsupported caught | accuracy |")
    print("|---|---:|---:|---:|")
    for name, matcher in (
        ("content words + identifiers (used)", lexical),
        ("content words only", recall_only),
        ("difflib ratio >= 0.6", ratio),
    ):
        good = sum(1 for claim, s, ok in cases if ok and matcher(claim, s))
        caught = sum(1 for claim, s, ok in cases if not ok and not matcher(claim, s))
        supported = sum(1 for c in cases if c[2])
        changed = len(cases) - supported
        print(
            f"| {name} | {good}/{supported} | {caught}/{changed} | "
            f"{(good + caught) / len(cases):.0%} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library-python", help="a Python with agent-memory-guard installed")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-poisoning-") as tmp:
        workdir = Path(tmp)
        setup(workdir)
        _, entries = corpus_entries(workdir)
        numbers = report_flags(entries)
        report_evidence(entries, workdir)
        if args.library_python:
            report_library(args.library_python, entries)
        if args.json:
            print(json.dumps(numbers))


if __name__ == "__main__":
    main()
