"""Evidence beside every claim: the sentences and bullets of a memory entry, each with the
passage of the sources it cites that supports it, or none ("unsupported sentence").
Deterministic, offline, no Django.

Matching is lexical, chosen on measurements (``bench/bench_evidence.py``): a claim is
supported by a passage when most of its content words are in that passage
(``SUPPORT_RECALL``) and every *identifier* it states (a number, a port, a path, a flag,
a version, anything in backticks) is in the cited text. Word overlap alone accepts a
changed port ("port 5433" vs "port 5432" share every word but one); a ratio over
characters (difflib) rewards long shared boilerplate and punishes rewording.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

# Share of a claim's content words that its best passage must hold.
SUPPORT_RECALL = 0.6
# Claims with fewer content words than this need all of them.
SHORT_CLAIM = 3

_STOP = frozenset(
    "a about after again all also am an and any are as at be because been before being "
    "both but by can could did do does doing done for from had has have having he her here "
    "him his how i if in into is it its itself just me more most my no nor not now of off "
    "on once only or other our out over own same she should so some such than that the "
    "their them then there these they this those through to too under until up very was "
    "we were what when where which while who whom why will with would you your yours "
    "task tasks user users asked asks ask".split()
)
_WORD = re.compile(r"(?<![\w.])\.?[A-Za-z0-9][A-Za-z0-9_./:@+-]*[A-Za-z0-9]|[A-Za-z0-9]")
_CODE = re.compile(r"`([^`\n]+)`")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'`(\[])")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_TASK_REF = re.compile(r"\[?\bTasks?\s+\d+(?:\s*(?:,|and)\s*\d+)*\]?", re.IGNORECASE)
_TRAILER = re.compile(r"\s*\[Task \d+\]\s*$")
# Sections of an entry that are not claims: its citations and its search keywords.
_NOT_CLAIMS = re.compile(r"^#+\s*(rollout_summary_files|keywords)\b", re.IGNORECASE)
# Labels of an entry (its scope slug, front-matter-like fields), not statements.
_LABEL = re.compile(r"^(?:scope|task|task_group|task_outcome|keywords|applies_to)\s*:", re.I)


@dataclass(frozen=True)
class Passage:
    """A line or sentence of a source, with its place (``start``, ``end`` offsets)."""

    source: str
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Claim:
    """One sentence or bullet of an entry and what supports it. ``matched``: the words
    of the passage the claim shares (to highlight); ``missing``: identifiers the claim
    states that no cited source holds."""

    text: str
    line: int
    passage: Passage | None
    recall: float
    matched: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    label: bool = False  # a title or keyword bullet (``labels_of``), not a sentence

    @property
    def supported(self) -> bool:
        return self.passage is not None


def words(text: str) -> list[str]:
    """Lower-cased tokens of a text; paths, flags, hosts and versions stay whole, and
    plain words lose their inflection ("changed", "changes" -> "chang")."""
    return [_stem(w.lower().rstrip(".:")) for w in _WORD.findall(text)]


def _stem(word: str) -> str:
    if not word.isalpha() or len(word) <= 4:
        return word
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word.rstrip("e") or word


def content_words(text: str) -> set[str]:
    raw = (w.lower().rstrip(".:") for w in _WORD.findall(text))
    return {_stem(w) for w in raw if w not in _STOP and len(w) > 1 or w.isdigit()}


def identifiers(text: str) -> set[str]:
    """What a claim states exactly: numbers, ports, versions, paths, flags and code."""
    # Task references are the entry's structure; every other number counts, one digit
    # or two included ("after 30 minutes" is not supported by a summary that says 15).
    text = _TASK_REF.sub(" ", text)
    found = {w for w in words(text) if any(c.isdigit() for c in w) or "/" in w or w[:1] == "-"}
    return found | {w for code in _CODE.findall(text) for w in words(code)}


def claims_of(entry_text: str) -> list[tuple[int, str]]:
    """The sentences and bullets of an entry worth checking, with their line numbers:
    headings, citations and keyword lists are not claims."""
    out: list[tuple[int, str]] = []
    skipping = False
    for number, line in enumerate(entry_text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            skipping = bool(_NOT_CLAIMS.match(stripped))
            continue
        if skipping or not stripped or _LABEL.match(stripped):
            continue
        body = _TRAILER.sub("", _BULLET.sub("", stripped))
        for sentence in _SENTENCE_END.split(body):
            if len(content_words(sentence)) >= 1:
                out.append((number, sentence.strip()))
    return out


def passages(source: str, text: str) -> list[Passage]:
    """The lines of a source, long lines cut into sentences."""
    out = []
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped:
            base = offset + line.index(stripped)
            position = 0
            for sentence in _SENTENCE_END.split(stripped):
                start = stripped.index(sentence, position)
                position = start + len(sentence)
                out.append(Passage(source, sentence, base + start, base + position))
        offset += len(line)
    return out


@dataclass(frozen=True)
class _Indexed:
    passage: Passage
    words: frozenset[str]


def index(sources: Iterable[tuple[str, str]]) -> tuple[list[_Indexed], frozenset[str]]:
    """Passages of every source with their words, and every word of every source."""
    indexed = [
        _Indexed(p, frozenset(words(p.text)))
        for name, text in sources
        for p in passages(name, text)
    ]
    return indexed, frozenset(w for i in indexed for w in i.words)


def best_passage(
    claim: str, indexed: Sequence[_Indexed]
) -> tuple[Passage | None, float, tuple[str, ...]]:
    """The passage holding most of the claim's content words (first of equals)."""
    wanted = content_words(claim)
    if not wanted or not indexed:
        return None, 0.0, ()
    best, score, shared = None, 0.0, frozenset[str]()
    for item in indexed:
        common = wanted & item.words
        recall = len(common) / len(wanted)
        if recall > score:
            best, score, shared = item.passage, recall, frozenset(common)
    return best, score, tuple(sorted(shared))


def support(claim: str, indexed: Sequence[_Indexed], vocabulary: frozenset[str]) -> Claim:
    return _support(0, claim, indexed, vocabulary)


def _support(
    line: int, claim: str, indexed: Sequence[_Indexed], vocabulary: frozenset[str]
) -> Claim:
    passage, recall, matched = best_passage(claim, indexed)
    missing = tuple(sorted(i for i in identifiers(claim) if i not in vocabulary))
    needed = 1.0 if len(content_words(claim)) < SHORT_CLAIM else SUPPORT_RECALL
    if passage is None or recall < needed or missing:
        return Claim(claim, line, None, recall, matched, missing)
    return Claim(claim, line, passage, recall, matched, missing)


def check(
    entry_text: str, sources: Iterable[tuple[str, str]], *, labels: bool = False
) -> list[Claim]:
    """Every claim of an entry with its supporting passage in ``sources`` ((name, text)
    pairs: the rollout summaries it cites), or none; with ``labels``, its title and
    keyword bullets too (``labels_of``), in line order."""
    indexed, vocabulary = index(sources)
    claims = [_support(line, text, indexed, vocabulary) for line, text in claims_of(entry_text)]
    if labels:
        claims += [
            replace(
                _keywords(line, text, indexed, vocabulary)
                if keywords
                else _support(line, text, indexed, vocabulary),
                label=True,
            )
            for line, text, keywords in labels_of(entry_text)
        ]
        claims.sort(key=lambda c: c.line)
    return claims


_TITLE = re.compile(r"^#{1,6}\s*(?:Task Group:|Task \d+:)\s*(.*?)(?:,\s*outcome\s+\S+)?\s*$", re.I)
_KEYWORDS = re.compile(r"^#+\s*keywords\b", re.IGNORECASE)


def labels_of(entry_text: str) -> list[tuple[int, str, bool]]:
    """What names an entry rather than states something, checked all the same: a task's
    or task group's title (without its outcome) and each bullet of its keywords, as
    (line, text, is_keywords)."""
    out: list[tuple[int, str, bool]] = []
    in_keywords = False
    for number, line in enumerate(entry_text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            in_keywords = bool(_KEYWORDS.match(stripped))
            title = _TITLE.match(stripped)
            if title and content_words(title.group(1)):
                out.append((number, title.group(1).strip(), False))
        elif in_keywords and _BULLET.match(stripped):
            body = _BULLET.sub("", stripped)
            if content_words(body):
                out.append((number, body, True))
    return out


def _keywords(
    line: int, text: str, indexed: Sequence[_Indexed], vocabulary: frozenset[str]
) -> Claim:
    """A keyword bullet is supported when every keyword's words are somewhere in what
    the entry cites (keywords need not stand in one sentence); ``missing``: the others."""
    missing = tuple(
        keyword.strip()
        for keyword in text.split(",")
        if keyword.strip() and not content_words(keyword) <= vocabulary
    )
    passage, recall, matched = best_passage(text, indexed)
    return Claim(text, line, None if missing else passage, recall, matched, missing)


def highlight(passage: str, matched: Iterable[str]) -> list[tuple[str, bool]]:
    """``passage`` cut into (text, is_match) runs: the words a claim shares marked."""
    wanted = set(matched)
    runs: list[tuple[str, bool]] = []
    position = 0
    for match in _WORD.finditer(passage):
        if _stem(match.group(0).lower().rstrip(".:")) in wanted:
            if match.start() > position:
                runs.append((passage[position : match.start()], False))
            runs.append((match.group(0), True))
            position = match.end()
    if position < len(passage):
        runs.append((passage[position:], False))
    return runs
