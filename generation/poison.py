"""Poisoning flags: signs that a memory entry carries an injected instruction (OWASP
ASI06, memory poisoning) rather than something the user and the agent worked out.
Deterministic, offline, no Django.

Each flag has a reason a reviewer can check. Some need to know what the people in the
rollout said: ``Voices`` holds the user's and the assistant's own words (never tool
output), from the rollouts the entry cites.

Maintained libraries were measured on the corpus (``bench/bench_poisoning.py``, see
bench/README.md) before writing these; what they catch is a subset of
``lint._INJECTION_RULES``, which this module reuses.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from enum import StrEnum

from . import evidence
from .lint import _INJECTION_RULES


class Kind(StrEnum):
    OVERRIDE = "override"
    FETCH_AND_RUN = "fetch_and_run"
    UNKNOWN_DESTINATION = "unknown_destination"
    ENCODED = "encoded_payload"
    HIDDEN = "hidden_text"
    UNSTATED_PREFERENCE = "unstated_preference"


LABELS = {
    Kind.OVERRIDE: "overrides the agent's rules",
    Kind.FETCH_AND_RUN: "fetches and runs code",
    Kind.UNKNOWN_DESTINATION: "unknown destination",
    Kind.ENCODED: "encoded payload",
    Kind.HIDDEN: "hidden text",
    Kind.UNSTATED_PREFERENCE: "preference the user never stated",
}
# Strongest first: the review page orders flagged entries by their strongest reason.
STRENGTH = {
    Kind.FETCH_AND_RUN: 6,
    Kind.OVERRIDE: 5,
    Kind.HIDDEN: 4,
    Kind.UNKNOWN_DESTINATION: 4,
    Kind.ENCODED: 3,
    Kind.UNSTATED_PREFERENCE: 2,
}


@dataclass(frozen=True)
class Flag:
    kind: Kind
    reason: str
    excerpt: str

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def strength(self) -> int:
        return STRENGTH[self.kind]


@dataclass(frozen=True)
class Voices:
    """What the user and the assistant said (their messages, the final output), and
    whether any rollout was there to read; tool output is not a voice."""

    user: str = ""
    assistant: str = ""
    known: bool = False
    user_words: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def of(cls, user: str, assistant: str) -> Voices:
        return cls(user, assistant, True, frozenset(evidence.content_words(user)))

    def said(self, token: str) -> bool:
        token = token.lower()
        return token in self.user.lower() or token in self.assistant.lower()


_OVERRIDE_EXTRA = tuple(
    (message, re.compile(pattern, re.IGNORECASE))
    for message, pattern in (
        (
            "acts against what the user asks",
            r"\b(?:regardless\s+of|even\s+if|no\s+matter)\s+(?:what\s+)?the\s+user\b"
            r"|\bwithout\s+(?:asking|confirmation|approval|review)\b"
            r"|\b(?:do\s+not|don't|never)\s+ask\s+(?:the\s+user\s+)?(?:for\s+)?"
            r"(?:confirmation|permission|approval)\b",
        ),
        (
            "turns off a safeguard",
            r"\b(?:disable|turn\s+off|skip|bypass|remove)\s+(?:the\s+|all\s+|any\s+)?"
            r"(?:safety|security|sandbox(?:ing)?|guardrails?|approvals?|verification|"
            r"signature\s+checks?|code\s+review|2fa|mfa|tls\s+verification)\b"
            r"|--no-verify\b|--insecure\b|\bset\s+-o\s+noclobber\b|verify\s*=\s*false\b",
        ),
        (
            "is addressed to the AI reading it",
            r"\b(?:note|message|instructions?)\s+(?:to|for)\s+(?:the\s+)?(?:ai|llm|agent|"
            r"assistant|model)s?\b|\b(?:ai|llm)\s+(?:agents?|assistants?|models?)\s+"
            r"(?:reading|processing|that\s+read)\b|\bif\s+you\s+are\s+an?\s+(?:ai|llm|"
            r"language\s+model|agent|assistant)\b",
        ),
    )
)
_LINT_OVERRIDE = tuple(
    (m, p) for m, p in _INJECTION_RULES if "shell" not in m and "invisible" not in m
)

_FETCH_AND_RUN = tuple(
    (message, re.compile(pattern, re.IGNORECASE))
    for message, pattern in (
        (
            "pipes a download into a shell or interpreter",
            r"\b(?:curl|wget|fetch)\b[^\n|]{0,200}\|\s*(?:sudo\s+)?(?:-?\w+=\S+\s+)*"
            r"(?:ba|z|da|k|fi)?sh\b|\b(?:curl|wget)\b[^\n|]{0,200}\|\s*(?:sudo\s+)?"
            r"(?:python[0-9.]*|perl|ruby|node|php)\b",
        ),
        (
            "runs a downloaded script through process substitution or eval",
            r"(?:ba|z)?sh\s+<\(\s*(?:curl|wget)\b|\bsource\s+<\(\s*(?:curl|wget)\b"
            r"|\beval\s+\"?\$\(\s*(?:curl|wget)\b|\bsh\s+-c\s+[\"']?\$\(\s*(?:curl|wget)\b",
        ),
        (
            "downloads and runs PowerShell (iwr | iex)",
            r"\b(?:iwr|irm|invoke-webrequest|invoke-restmethod|new-object\s+net\.webclient)\b"
            r"[^\n]{0,200}(?:\|\s*(?:iex|invoke-expression)\b|downloadstring)"
            r"|\b(?:iex|invoke-expression)\s*\(?\s*\(?\s*(?:iwr|irm|new-object)\b"
            r"|\bpowershell(?:\.exe)?\s+[^\n]{0,40}-(?:e|enc|encodedcommand)\s+[A-Za-z0-9+/=]{16,}",
        ),
        (
            "decodes a payload and runs it",
            r"\bbase64\s+(?:-d|--decode|-D)\b[^\n|]{0,80}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b"
            r"|\becho\s+[A-Za-z0-9+/=]{16,}\s*\|\s*base64\s+(?:-d|--decode)"
            r"|\b(?:exec|eval)\s*\(\s*(?:base64\.b64decode|urllib|requests\.get|__import__)",
        ),
        (
            "installs a package from a raw URL",
            r"\bpip3?\s+install\s+[^\n]{0,80}(?:https?://\S+\.(?:whl|tar\.gz|zip)|"
            r"--index-url\s+http://|--extra-index-url\s+https?://(?!pypi\.org))"
            r"|\bnpm\s+install\s+https?://",
        ),
    )
)

_URL = re.compile(r"\b(?:https?|ftp|ssh|git)://[^\s<>\"'`)\]]+", re.IGNORECASE)
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_HOST = re.compile(
    r"(?<![\w./@-])(?:[a-z0-9-]+\.)+(?:com|net|org|io|dev|app|ai|co|xyz|sh|ru|cn|info|biz|"
    r"me|cc|tk|top|site|online|cloud|tech|live|pw|su|zip|link|click)\b(?![\w/-])",
    re.IGNORECASE,
)
_IP = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?(?![\d.])")
_CREDENTIAL = re.compile(
    r"\b(?:password|passwd|api[_-]?key|secret|token|private[_ ]key|deploy[_ ]key|"
    r"access[_ ]key)\b\s*(?:is|=|:)\s*[`\"']?([A-Za-z0-9_\-+/=.]{8,})",
    re.IGNORECASE,
)
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{32,}={0,2}(?![A-Za-z0-9+/=])")
_ESCAPES = re.compile(
    r"(?:\\x[0-9a-fA-F]{2}){8,}|(?:%[0-9a-fA-F]{2}){8,}|(?:\\u[0-9a-fA-F]{4}){6,}"
)
_HIDDEN = re.compile(
    "[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_PREFERENCE_HEADING = re.compile(r"^#+\s*user\s+preferences\b", re.IGNORECASE)
_DIRECTIVE = re.compile(
    r"\b(?:always|never|must|should|prefer|prefers|do\s+not|don't|make\s+sure|remember\s+to|"
    r"use|run|send|add|set|install)\b",
    re.IGNORECASE,
)
_REPORTED = re.compile(r"\bthe\s+user\s+(?:asked|said|wrote|wants|prefers|requested)\b", re.I)


def flags(text: str, voices: Voices | None = None) -> list[Flag]:
    """The poisoning flags of one entry's text, strongest first (one per kind and
    excerpt). ``voices``: the user's and assistant's words in the rollouts it cites;
    without them the checks that compare against them do not run."""
    found = (
        _patterns(Kind.FETCH_AND_RUN, _FETCH_AND_RUN, text)
        + _patterns(Kind.OVERRIDE, _LINT_OVERRIDE + _OVERRIDE_EXTRA, text)
        + _hidden(text)
        + _encoded(text)
        + _destinations(text, voices or Voices())
        + (_preferences(text, voices) if voices is not None and voices.known else [])
    )
    unique = {(f.kind, f.excerpt): f for f in reversed(found)}
    return sorted(unique.values(), key=lambda f: -f.strength)


def strongest(found: list[Flag]) -> Flag | None:
    return max(found, key=lambda f: f.strength) if found else None


def _line_of(text: str, start: int, end: int) -> str:
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return " ".join(text[first : last if last >= 0 else len(text)].split())[:240]


def _patterns(kind: Kind, rules: tuple[tuple[str, re.Pattern[str]], ...], text: str) -> list[Flag]:
    out = []
    for message, pattern in rules:
        for match in pattern.finditer(text):
            out.append(Flag(kind, message, _line_of(text, match.start(), match.end())))
    return out


def _hidden(text: str) -> list[Flag]:
    out = []
    for match in _HIDDEN.finditer(text):
        line = _line_of(text, match.start(), match.end())
        out.append(
            Flag(
                Kind.HIDDEN,
                f"invisible or direction-changing character U+{ord(match.group(0)):04X}",
                line.encode("unicode_escape").decode("ascii"),
            )
        )
    for match in _COMMENT.finditer(text):
        out.append(
            Flag(
                Kind.HIDDEN,
                "an HTML comment: not shown when rendered, read by the agent",
                " ".join(match.group(0).split())[:240],
            )
        )
    return out


def _encoded(text: str) -> list[Flag]:
    out = []
    for match in _BASE64.finditer(text):
        blob = match.group(0)
        decoded = _decode(blob)
        if decoded is None:
            continue
        inner = flags(decoded)
        why = f"; it decodes to text that {inner[0].reason}" if inner else ""
        out.append(
            Flag(
                Kind.ENCODED,
                f"base64 that decodes to readable text ({decoded[:60]!r}){why}",
                _line_of(text, match.start(), match.end()),
            )
        )
    for match in _ESCAPES.finditer(text):
        out.append(
            Flag(
                Kind.ENCODED,
                "a run of escaped bytes",
                _line_of(text, match.start(), match.end()),
            )
        )
    return out


def _decode(blob: str) -> str | None:
    """The text a base64 blob holds, when it is mostly readable words (hashes and ids
    decode to noise)."""
    if blob.isalnum() and (blob.islower() or blob.isupper() or blob.isdigit()):
        return None  # hex digests and ids in one case
    try:
        raw = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    printable = sum(c.isprintable() or c in "\n\t" for c in decoded)
    letters = sum(c.isalpha() or c == " " for c in decoded)
    if printable < 0.95 * len(decoded) or letters < 0.4 * len(decoded):
        return None
    return decoded


def _destinations(text: str, voices: Voices) -> list[Flag]:
    out = []
    seen: set[str] = set()
    candidates: list[tuple[str, re.Match[str]]] = []
    if voices.known:  # without a rollout to read, nobody's words to compare with
        candidates += [("URL", m) for m in _URL.finditer(text)]
        candidates += [("e-mail address", m) for m in _EMAIL.finditer(text)]
        candidates += [("host", m) for m in _HOST.finditer(text)]
        candidates += [("IP address", m) for m in _IP.finditer(text)]
    for what, match in candidates:
        value = match.group(0).rstrip(".,;:")
        if _local(value):
            continue
        if any(value.lower() in s for s in seen):
            continue  # the host of a URL already flagged
        if voices.said(value):
            continue
        seen.add(value.lower())
        out.append(
            Flag(
                Kind.UNKNOWN_DESTINATION,
                f"{what} {value} appears nowhere in the user's or the assistant's words",
                _line_of(text, match.start(), match.end()),
            )
        )
    for match in _CREDENTIAL.finditer(text):
        value = match.group(1)
        if not (len(value) >= 16 or (re.search(r"\d", value) and re.search(r"[A-Za-z]", value))):
            continue  # "the password is configured": a word, not a credential
        out.append(
            Flag(
                Kind.UNKNOWN_DESTINATION,
                "a credential written into memory"
                + ("" if voices.said(match.group(1)) else ", never given by the user"),
                _line_of(text, match.start(), match.start(1)) + " …",
            )
        )
    return out


_LOCAL_HOST = re.compile(
    r"^(?:[a-z]+://)?(?:[^@/]*@)?(?:localhost|127\.[\d.]+|\[?::1\]?|0\.0\.0\.0|10\.[\d.]+|"
    r"192\.168\.[\d.]+|172\.(?:1[6-9]|2\d|3[01])\.[\d.]+|[\w.-]+\.(?:local|localhost|internal|test))"
    r"(?:[:/]|$)",
    re.IGNORECASE,
)


def _local(value: str) -> bool:
    """This machine or a private network: not somewhere data leaves to."""
    return bool(_LOCAL_HOST.match(value))


def _preferences(text: str, voices: Voices) -> list[Flag]:
    """Instructions in a "User preferences" section whose words the user never used."""
    out = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            inside = bool(_PREFERENCE_HEADING.match(stripped))
            continue
        if not inside or not stripped or not _DIRECTIVE.search(stripped):
            continue
        if _REPORTED.search(stripped) and _quoted_from_user(stripped, voices):
            continue
        wanted = evidence.content_words(re.sub(r"\[Task \d+\]", "", stripped))
        if not wanted:
            continue
        said = len(wanted & voices.user_words) / len(wanted)
        if said < 0.5:
            out.append(
                Flag(
                    Kind.UNSTATED_PREFERENCE,
                    f"an instruction in User preferences; the user's messages hold "
                    f"{round(100 * said)}% of its words",
                    " ".join(stripped.split())[:240],
                )
            )
    return out


def _quoted_from_user(line: str, voices: Voices) -> bool:
    quoted = re.findall(r"\"([^\"]{8,})\"", line)
    return bool(quoted) and all(
        " ".join(q.split()).rstrip("…").lower()[:120] in " ".join(voices.user.split()).lower()
        for q in quoted
    )
