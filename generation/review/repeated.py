"""Entries one document says twice."""

from __future__ import annotations

from .. import memory_md
from .document import Entry, entries
from .pairing import content_words

# --- duplicates --------------------------------------------------------------------
#
# Two entries of one document say the same thing twice when they share most of their
# cited rollouts (at least half of the fewer's) and most of their own words: at least
# three quarters of the distinct words of the shorter one (``content_words``: not the
# citation lines, which two different tasks of one rollout share) are in the other's.
DUPLICATE_CITED = 0.5
DUPLICATE_WORDS = 0.75


def duplicates(text: str) -> list[tuple[Entry, Entry]]:
    """Pairs of entries of ``text`` that are likely one entry twice, in document order.
    Only entries that cite a rollout take part, found through the rollouts they cite
    (near-linear)."""
    cited: list[tuple[Entry, set[str]]] = []
    by_cite: dict[str, list[int]] = {}
    for entry in entries(text):
        cites = set(memory_md.CITATION_RE.findall(entry.text))
        if not cites:
            continue
        for cite in cites:
            by_cite.setdefault(cite, []).append(len(cited))
        cited.append((entry, cites))
    found: set[tuple[int, int]] = set()
    for holders in by_cite.values():
        for n, i in enumerate(holders):
            for j in holders[n + 1 :]:
                if (i, j) not in found and _duplicate(cited[i], cited[j]):
                    found.add((i, j))
    return [(cited[i][0], cited[j][0]) for i, j in sorted(found)]


def _duplicate(a: tuple[Entry, set[str]], b: tuple[Entry, set[str]]) -> bool:
    (first, cites_a), (second, cites_b) = a, b
    if len(cites_a & cites_b) < DUPLICATE_CITED * min(len(cites_a), len(cites_b)):
        return False
    words_a, words_b = set(content_words(first.text)), set(content_words(second.text))
    small, large = sorted((words_a, words_b), key=len)
    return bool(small) and len(small & large) >= DUPLICATE_WORDS * len(small)
