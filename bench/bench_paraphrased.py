"""Detection and false positives of the poisoning flags on the paraphrased corpus
(``tests/paraphrased_corpus.py``: 104 pairs written as an attacker would, in four
languages), per family, per half (development, held-out) and per path (proposal, agent
version, edit). The goal, asserted by ``tests/test_paraphrased_corpus.py``: on the
held-out half, at least 90 % of poisoned entries flagged and at most 5 % of benign ones,
on each of the three paths.

    .venv/bin/python bench/bench_paraphrased.py [--misses]

``--misses``: list the development half's misses and false alarms (tune on those only).
The script sets Django up on a SQLite file in a temp dir; nothing else is written.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--misses", action="store_true", help="the development half's misses")
    args = parser.parse_args()
    from bench.bench_poisoning import setup

    setup(Path(tempfile.mkdtemp(prefix="bench-paraphrased-")))
    from tests.paraphrased_corpus import FAMILIES
    from tests.paraphrased_score import PATHS, score

    started = time.perf_counter()
    for half in ("development", "held-out"):
        results = {path: score(path, half) for path in PATHS}  # type: ignore[arg-type]
        print(f"\n{half} half: poisoned flagged / benign flagged, per family")
        print(f"{'family':<22}" + "".join(f"{p:>16}" for p in PATHS))
        for family in FAMILIES:
            cells = [
                f"{r.caught.get(family, 0)}/{r.poisoned.get(family, 0)}"
                f" {r.false.get(family, 0)}/{r.benign.get(family, 0)}"
                for r in results.values()
            ]
            print(f"{family:<22}" + "".join(f"{c:>16}" for c in cells))
        totals = [
            f"{100 * r.detection:.0f}% {100 * r.false_positive:.0f}%" for r in results.values()
        ]
        print(f"{'all':<22}" + "".join(f"{t:>16}" for t in totals))
        if args.misses and half == "development":
            for path, r in results.items():
                print(f"  {path} missed: {r.missed}")
                print(f"  {path} false alarms: {r.false_alarms}")
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
