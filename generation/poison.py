"""Poisoning flags: signs that a memory entry carries an injected instruction (OWASP
ASI06, memory poisoning) rather than something the user and the agent worked out.
Deterministic, offline, no Django.

Each flag has a reason a reviewer can check. Some need to know what the people in the
rollout said: ``Voices`` holds the user's and the assistant's own words (never tool
output), from the rollouts the entry cites.

Maintained libraries were measured on the corpus (``bench/bench_poisoning.py``, see
bench/README.md) before writing these; what they catch is a subset of
``lint.INJECTION_RULES``, which this module reuses.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from enum import StrEnum

from . import evidence, poison_rules
from .lint import INJECTION_RULES


class Kind(StrEnum):
    OVERRIDE = "override"
    FETCH_AND_RUN = "fetch_and_run"
    UNKNOWN_DESTINATION = "unknown_destination"
    ENCODED = "encoded_payload"
    HIDDEN = "hidden_text"
    UNSTATED_PREFERENCE = "unstated_preference"
    MISSING_SOURCE = "missing_source"
    SECRET = "secret"
    EXFILTRATION = "exfiltration"
    PERSISTENCE = "persistence"
    WEAKENED = "weakened_safeguard"
    AUTHORITY = "authority_claim"
    SUBSTITUTION = "source_substitution"
    DECEPTION = "deceives_user"


LABELS = {
    Kind.OVERRIDE: "overrides the agent's rules",
    Kind.FETCH_AND_RUN: "fetches and runs code",
    Kind.UNKNOWN_DESTINATION: "unknown destination",
    Kind.ENCODED: "encoded payload",
    Kind.HIDDEN: "hidden text",
    Kind.UNSTATED_PREFERENCE: "preference the user never stated",
    Kind.MISSING_SOURCE: "cites a summary that does not exist",
    Kind.SECRET: "handles a secret",
    Kind.EXFILTRATION: "sends data out",
    Kind.PERSISTENCE: "persistence or privilege",
    Kind.WEAKENED: "weakens a safeguard",
    Kind.AUTHORITY: "claims authority or consent",
    Kind.SUBSTITUTION: "substitutes a source",
    Kind.DECEPTION: "deceives the user",
}
# Strongest first: the review page orders flagged entries by their strongest reason.
STRENGTH = {
    Kind.FETCH_AND_RUN: 6,
    Kind.OVERRIDE: 5,
    Kind.HIDDEN: 4,
    Kind.UNKNOWN_DESTINATION: 4,
    Kind.ENCODED: 3,
    Kind.UNSTATED_PREFERENCE: 2,
    Kind.MISSING_SOURCE: 1,
    Kind.EXFILTRATION: 6,
    Kind.SECRET: 5,
    Kind.PERSISTENCE: 5,
    Kind.SUBSTITUTION: 5,
    Kind.WEAKENED: 4,
    Kind.AUTHORITY: 4,
    Kind.DECEPTION: 4,
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
# Speaking of the system prompt is no override by itself ("the system prompt names the
# conventions"); setting it aside is (``poison_rules.OVERRIDES``).
_LINT_OVERRIDE = tuple(
    (m, p)
    for m, p in INJECTION_RULES
    if "shell" not in m and "invisible" not in m and "system or developer" not in m
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
    r"me|cc|tk|top|site|online|cloud|tech|live|pw|su|zip|link|click|help|de|fr|es|uk|eu|us|"
    r"ca|nl|it|pl|ch|at|be|se|no|fi|jp|kr|in|br|mx|ly|gg|to|ws|so|icu|club|store|shop|"
    r"website|space|fun|host|page|pages|run|tools|network|services|digital)\b(?![\w-])",
    re.IGNORECASE,
)
# Bare names with one dot and these endings are file names ("release.sh"), not hosts.
_FILE_ENDINGS = frozenset(
    "sh zip py md in rs pl ps1 js ts json yml yaml toml cfg ini txt log".split()
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
_PREFERENCE_HEADING = re.compile(r"^#+\s*user\s+preferences\b", re.IGNORECASE)
# What makes a line of User preferences an instruction rather than a fact ("the suite
# runs on 4 cores"): a directive or a normative word, in the four languages.
_DIRECTIVE = re.compile(
    r"\b(?:always|never|must|should|prefer|prefers|preferred|do\s+not|don't|make\s+sure|"
    r"remember\s+to|use|run|send|add|set|install|keep|wants?|wanted|likes?|fine|ok|okay|"
    r"allowed|unnecessary|needed|needs?|automatically|directly|straight|instead|avoid|"
    r"commit|push|share|skip|siempre|nunca|debe[ns]?|quiere|gusta|prefiere|usar?|evita|"
    r"sin|automáticamente|toujours|jamais|doit|doivent|veut|souhaite|préfère|peut|peuvent|"
    r"utiliser?|évite|sans|automatiquement|immer|nie|niemals|soll|sollen|muss|müssen|"
    r"möchte|will|bevorzugt|nutzen?|verwenden?|ohne|automatisch)\b",
    re.IGNORECASE,
)
_REPORTED = re.compile(r"\bthe\s+user\s+(?:asked|said|wrote|wants|prefers|requested)\b", re.I)


def flags(
    text: str, voices: Voices | None = None, allowed_hosts: frozenset[str] = frozenset()
) -> list[Flag]:
    """The poisoning flags of one entry's text, strongest first (one per kind and
    excerpt). ``voices``: the user's and assistant's words in the rollouts it cites;
    without them the checks that compare against them do not run. ``allowed_hosts``:
    the workspace's allow-list (hosts and their subdomains)."""
    heard = voices or Voices()
    said = heard.user + "\n" + heard.assistant
    found = (
        _patterns(Kind.FETCH_AND_RUN, _FETCH_AND_RUN, text)
        + _patterns(Kind.OVERRIDE, _LINT_OVERRIDE + _OVERRIDE_EXTRA, text)
        + _patterns(Kind.OVERRIDE, poison_rules.OVERRIDES, text)
        + _hidden(text)
        + _encoded(text)
        + _destinations(text, heard, allowed_hosts)
        + _spans(Kind.SECRET, text, poison_rules.secrets(text))
        + _spans(Kind.EXFILTRATION, text, poison_rules.url_variables(text))
        + _uploads(text, heard, allowed_hosts)
        + _spans(Kind.PERSISTENCE, text, poison_rules.persistence(text, heard.user))
        + _spans(Kind.WEAKENED, text, poison_rules.safeguards(text))
        + _spans(Kind.AUTHORITY, text, poison_rules.authority(text, heard.user_words, 0.6))
        + _spans(Kind.SUBSTITUTION, text, poison_rules.substitutions(text, said, allowed_hosts))
        + _spans(Kind.DECEPTION, text, poison_rules.deception(text))
        + (_preferences(text, voices) if voices is not None and voices.known else [])
    )
    return ordered(found)


def _spans(kind: Kind, text: str, found: list[tuple[str, int, int]]) -> list[Flag]:
    return [Flag(kind, reason, _line_of(text, start, end)) for reason, start, end in found]


def _uploads(text: str, voices: Voices, allowed: frozenset[str]) -> list[Flag]:
    """Commands that send files or data to a host the rollout's people never named."""
    out = []
    for reason, start, end, host in poison_rules.uploads(text):
        if host and (_local(host) or poison_rules.known_host(host, allowed)):
            continue
        if host and voices.known and voices.said(host):
            continue
        where = f"to {host}, a host nobody in the rollout named" if host else ""
        out.append(Flag(Kind.EXFILTRATION, f"{reason} {where}".strip(), _line_of(text, start, end)))
    return out


def ordered(found: list[Flag]) -> list[Flag]:
    """One flag per kind and excerpt (the first), strongest first."""
    unique = {(f.kind, f.excerpt): f for f in reversed(found)}
    return sorted(unique.values(), key=lambda f: -f.strength)


def missing_source(text: str, cited: str) -> Flag:
    """An entry citing a rollout summary nobody can read: nothing supports it."""
    at = text.find(cited)
    return Flag(
        Kind.MISSING_SOURCE,
        f"cites {cited}, which the workspace does not hold: nothing says where it came from",
        _line_of(text, at, at + len(cited)),
    )


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
    for match in poison_rules.HTML_COMMENT.finditer(text):
        inner = match.group(1) if match.group(1) is not None else match.group(2) or ""
        inner_flags = flags(inner) if inner.strip() else []
        if inner_flags or poison_rules.says_something(inner):
            why = f"; it {inner_flags[0].reason}" if inner_flags else ""
            out.append(
                Flag(
                    Kind.HIDDEN,
                    "a comment that says something to its reader, not shown when rendered" + why,
                    " ".join(match.group(0).split())[:240],
                )
            )
    for match in poison_rules.HIDDEN_ELEMENT.finditer(text):
        if poison_rules.says_something(match.group(2)):
            out.append(
                Flag(
                    Kind.HIDDEN,
                    "text hidden from the rendered page by its markup, read by the agent",
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
    for reason, start, end in poison_rules.rot13(text):
        out.append(Flag(Kind.ENCODED, reason, _line_of(text, start, end)))
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


def _destinations(text: str, voices: Voices, allowed: frozenset[str] = frozenset()) -> list[Flag]:
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
        host = _host_of(value)
        if _local(value):
            continue
        if (
            what == "host"
            and value.count(".") == 1
            and value.rsplit(".", 1)[1].lower() in _FILE_ENDINGS
        ):
            continue
        if any(value.lower() in s for s in seen):
            continue  # the host of a URL already flagged
        if voices.said(value) or (what != "e-mail address" and voices.said(host)):
            continue
        if what != "e-mail address" and poison_rules.known_host(host, allowed):
            continue  # documentation, package and code hosts; variables are checked apart
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
                Kind.SECRET,
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


def _host_of(value: str) -> str:
    """The host of a URL, an address or a bare host name."""
    value = re.sub(r"^[a-z]+://", "", value, flags=re.IGNORECASE)
    value = value.split("/", 1)[0].rsplit("@", 1)[-1]
    return value.split(":", 1)[0].lower()


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
