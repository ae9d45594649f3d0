"""The lint that runs before memory leaves memoryui (write-back, export) and on review:
what must not reach every future prompt. No Django here.

- secrets: API keys, tokens, private keys, found by ``detect-secrets``;
- instruction-like text copied from tool output, a poisoning risk (``INJECTION_RULES``);
- paths that point into another layout of the workspace;
- a ``memory_summary.md`` over the SDK's 15,000-token injection cap.

Each finding has an id that stays the same for the same problem in the same file, so an
admin's decision to let it through survives unrelated edits.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

from .summary import MAX_TOKENS, injected_summary
from .tree import LayoutDirs, classify

# Bump when the lint changes what it finds: cached results carry it.
LINT_VERSION = 1


class FindingKind(StrEnum):
    SECRET = "secret"
    INJECTION = "injection"
    CROSS_LAYOUT = "cross_layout"
    SUMMARY_CAP = "summary_cap"


@dataclass(frozen=True)
class Finding:
    """One reason a file should not leave as it is. ``id`` is stable for the same
    problem in the same file, so an admin's override survives unrelated edits."""

    id: str
    kind: FindingKind
    path: str
    line: int | None
    message: str
    excerpt: str


# Instruction-like text copied from tool output: phrases aimed at a model rather than a
# person. Heuristics, deliberately narrow (every fixture memory passes clean); each is a
# reason for a person to look, not proof of an attack.
INJECTION_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (message, re.compile(pattern, re.IGNORECASE | re.MULTILINE))
    for message, pattern in (
        (
            "tells the model to ignore its instructions",
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
            r"(?:previous|prior|above|earlier|preceding|system|original|existing)\s+"
            r"(?:\w+\s+)?(?:instructions?|prompts?|rules|directions|guidelines|messages)\b",
        ),
        (
            "gives the model a new identity",
            r"\byou\s+are\s+now\b|\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must|should)\b"
            r"|\bpretend\s+(?:to\s+be|you\s+are)\b",
        ),
        (
            "speaks of the system or developer prompt",
            r"\b(?:system|developer)\s+(?:prompt|message)\b"
            r"|\breveal\s+(?:your|the)\s+(?:instructions|prompt)\b",
        ),
        (
            "contains chat-template markup",
            r"<\|(?:im_start|im_end|system|user|assistant|endoftext)\|>|\[/?INST\]|<</?SYS>>",
        ),
        (
            "announces new instructions",
            r"\b(?:new|updated|real|additional)\s+instructions?\s*:|^\s*#+\s*instructions?\s*:?\s*$",
        ),
        (
            "asks to hide something from the user",
            r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|show|mention\s+(?:this\s+)?to)\s+the\s+user\b"
            r"|\bwithout\s+(?:telling|informing|asking)\s+the\s+user\b",
        ),
        (
            "asks to send credentials somewhere",
            r"\b(?:send|post|upload|exfiltrate|forward|email)\b[^\n.]{0,60}\b(?:credentials?|"
            r"secrets?|api[\s_-]?keys?|tokens?|passwords?|ssh\s+keys?)\b[^\n.]{0,40}\bto\s+"
            r"(?:https?://|\S+@\S+)",
        ),
        (
            "pipes a downloaded script into a shell",
            r"\b(?:curl|wget)\b[^\n|]{0,200}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b",
        ),
        (
            "contains invisible or direction-changing characters that can hide text",
            "[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069]",
        ),
    )
)

# Files and folders that only a memories dir has: a relative path naming one of these
# under another layout's memories dir points at that layout's memory.
_MEMORY_ARTIFACTS = {
    "MEMORY.md",
    "memory_summary.md",
    "raw_memories.md",
    "phase_two_selection.json",
    "raw_memories",
    "rollout_summaries",
    "skills",
}
_PATH_TOKEN = re.compile(
    r"(?<![\w.@/~-])((?:\.{1,2}/)+[\w.@+-]+(?:/[\w.@+-]+)*|[\w@+-][\w.@+-]*(?:/[\w.@+-]+)+)/?"
)
_SECRETS_LOCK = threading.Lock()
_EXCLUDED_DETECTORS = {
    # Entropy detectors flag every hash, UUID and rollout id that memory cites.
    "Base64HighEntropyString",
    "HexHighEntropyString",
    # A public IP address in memory is a fact, not a credential.
    "IPPublicDetector",
}


def _finding(
    kind: FindingKind, path: str, key: str, line: int | None, message: str, excerpt: str
) -> Finding:
    digest = hashlib.sha256(f"{kind}\0{path}\0{key}".encode()).hexdigest()[:12]
    return Finding(f"{kind}-{digest}", kind, path, line, message, excerpt[:300])


def _redact(line: str, secret: str | None) -> str:
    if secret and len(secret) > 4:
        line = line.replace(secret, secret[:4] + "…" + "*" * 4)
    return line.strip()


def find_secrets(path: str, text: str) -> list[Finding]:
    """Credentials found by ``detect-secrets`` (every detector but the entropy ones,
    with its default false-positive filters). Each distinct line is scanned once, and
    what a line holds is kept for the process (``_SCANNED_LINES``): an edit of a large
    ``MEMORY.md`` (a sandbox's, a person's) costs a scan of the lines it changed."""
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            first_line.setdefault(line, number)
    scanned = _scanned(first_line)
    found: list[Finding] = []
    for line, number in first_line.items():
        for kind, secret_hash, excerpt in scanned[line]:
            found.append(
                _finding(
                    FindingKind.SECRET,
                    path,
                    f"{kind}\0{secret_hash}",
                    number,
                    f"{kind}: a credential must not go into memory",
                    excerpt,
                )
            )
    return _unique(found)


# (type, hash, the line with the credential masked) of each credential detect-secrets
# found in a line: no credential is kept in the clear.
Secrets = tuple[tuple[str, str, str], ...]
# What the secret scan found in each line met lately, by the line's digest (a line
# without a credential, the usual case, costs ~100 bytes). Bounded, oldest dropped.
_SCANNED_LINES: OrderedDict[bytes, Secrets] = OrderedDict()
_SCANNED_LINES_SIZE = 200_000


def _scanned(lines: Iterable[str]) -> dict[str, Secrets]:
    """What ``detect-secrets`` finds in each line, scanning only the lines this process
    has not met lately. Its settings are process-global, hence the lock."""
    result: dict[str, Secrets] = {}
    unseen: dict[str, bytes] = {}
    with _SECRETS_LOCK:
        for line in lines:
            key = hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            known = _SCANNED_LINES.get(key)
            if known is None:
                unseen[line] = key
            else:
                _SCANNED_LINES.move_to_end(key)
                result[line] = known
        if unseen:
            for line, secrets in _scan_lines(list(unseen)).items():
                result[line] = secrets
                _SCANNED_LINES[unseen[line]] = secrets
            while len(_SCANNED_LINES) > _SCANNED_LINES_SIZE:
                _SCANNED_LINES.popitem(last=False)
    return result


def _scan_lines(lines: list[str]) -> dict[str, Secrets]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class  # noqa: PLC0415 (deferred: detect-secrets loads at the first scan)
    from detect_secrets.core.scan import scan_line  # noqa: PLC0415 (deferred: detect-secrets loads at the first scan)
    from detect_secrets.settings import transient_settings  # noqa: PLC0415 (deferred: detect-secrets loads at the first scan)

    detectors: list[type] = list(get_mapping_from_secret_type_to_class().values())
    plugins = [
        {"name": cls.__name__} for cls in detectors if cls.__name__ not in _EXCLUDED_DETECTORS
    ]
    with transient_settings({"plugins_used": plugins}):
        return {
            line: tuple(
                (secret.type, secret.secret_hash, _redact(line, secret.secret_value))
                for secret in scan_line(line)
            )
            for line in lines
        }


def find_injections(path: str, text: str) -> list[Finding]:
    found = []
    for message, pattern in INJECTION_RULES:
        for match in pattern.finditer(text):
            number = text.count("\n", 0, match.start()) + 1
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = text[start : end if end >= 0 else len(text)]
            found.append(
                _finding(
                    FindingKind.INJECTION,
                    path,
                    f"{message}\0{match.group(0).lower()}\0{line.strip()}",
                    number,
                    f"instruction-like text: {message}",
                    line.strip().encode("unicode_escape").decode("ascii")
                    if "hide text" in message
                    else line.strip(),
                )
            )
    return _unique(found)


def find_cross_layout_paths(path: str, text: str, layouts: Sequence[LayoutDirs]) -> list[Finding]:
    """Paths in ``path``'s text that point into another layout's directories: written
    from the workspace root (``sessions/engineering/x.jsonl``), relative to this memories
    dir and naming another layout's memory (``engineering/MEMORY.md``), or climbing out
    with ``..``."""
    own = classify(path, list(layouts)).layout
    if own is None or len(layouts) < 2:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _PATH_TOKEN.finditer(line):
            token = match.group(1).rstrip(".,:;")
            other = _other_layout(token, own, layouts)
            if other is not None:
                found.append(
                    _finding(
                        FindingKind.CROSS_LAYOUT,
                        path,
                        token,
                        number,
                        f"points into another layout ({other.memories_dir}); an agent of "
                        f"{own.memories_dir} would read or cite another agent's memory",
                        line.strip(),
                    )
                )
    return _unique(found)


def _other_layout(token: str, own: LayoutDirs, layouts: Sequence[LayoutDirs]) -> LayoutDirs | None:
    bare = token.removeprefix("./")
    candidates: list[tuple[str, bool]] = []
    if bare.startswith("../") or "/../" in bare:
        resolved = posixpath.normpath(f"{own.memories_dir}/{bare}")
        if not resolved.startswith(".."):
            candidates.append((resolved, False))
    else:
        candidates.append((bare, False))
        candidates.append((f"{own.memories_dir}/{bare}", True))
    for candidate, relative in candidates:
        layout = _owner(candidate.rstrip("/"), layouts)
        if layout is None or layout == own:
            continue
        if relative:
            first = candidate[len(layout.memories_dir) + 1 :].split("/")[0]
            if (
                not candidate.startswith(layout.memories_dir + "/")
                or first not in _MEMORY_ARTIFACTS
            ):
                continue
        return layout
    return None


def _owner(path: str, layouts: Sequence[LayoutDirs]) -> LayoutDirs | None:
    """The layout a path belongs to; a layout's own directory belongs to it."""
    for layout in layouts:
        if path in (layout.memories_dir, layout.sessions_dir):
            return layout
    return classify(path, list(layouts)).layout


def find_summary_over_cap(path: str, data: bytes) -> list[Finding]:
    if PurePosixPath(path).name != "memory_summary.md":
        return []
    injection = injected_summary(data)
    if not injection.truncated:
        return []
    return [
        _finding(
            FindingKind.SUMMARY_CAP,
            path,
            hashlib.sha256(data).hexdigest(),
            None,
            f"about {injection.tokens:,} tokens, over the SDK's {MAX_TOKENS:,}-token cap: "
            f"about {injection.cut_tokens:,} tokens in the middle never reach the agent",
            injection.cut[:200],
        )
    ]


def _unique(findings: list[Finding]) -> list[Finding]:
    """Repeated identical problems (the same phrase on several lines) get ids of their
    own, numbered in order, so each can be overridden."""
    counts: dict[str, int] = {}
    result = []
    for f in findings:
        n = counts.get(f.id, 0)
        counts[f.id] = n + 1
        result.append(
            f
            if n == 0
            else Finding(f"{f.id}.{n + 1}", f.kind, f.path, f.line, f.message, f.excerpt)
        )
    return result


_LINT_CACHE: OrderedDict[tuple[str, str, tuple[LayoutDirs, ...]], tuple[Finding, ...]] = (
    OrderedDict()
)
# Keys and findings are small; a large layout has tens of thousands of memory files.
_LINT_CACHE_SIZE = 50_000
_LINT_CACHE_LOCK = threading.Lock()


def cached_findings(path: str, sha256: str, layouts: Sequence[LayoutDirs]) -> list[Finding] | None:
    """What ``lint_file`` found in the content of this digest at ``path`` under these
    layouts, if this process linted it; None if not (then call ``lint_file``)."""
    key = (path, sha256, tuple(layouts))
    with _LINT_CACHE_LOCK:
        cached = _LINT_CACHE.get(key)
        if cached is None:
            return None
        _LINT_CACHE.move_to_end(key)
        return list(cached)


def lint_file(path: str, data: bytes, layouts: Sequence[LayoutDirs]) -> list[Finding]:
    """What must not go into every future prompt, in one memory file (``path`` relative
    to the workspace):

    - secrets: API keys, tokens, private keys (``detect-secrets``);
    - instruction-like text copied from tool output (``INJECTION_RULES``);
    - paths pointing into another layout of the workspace;
    - a ``memory_summary.md`` over the SDK's 15,000-token injection cap.

    Results are cached by content, path and layouts (a large MEMORY.md takes a second).
    """
    key = (path, hashlib.sha256(data).hexdigest(), tuple(layouts))
    cached = cached_findings(*key)
    if cached is not None:
        return cached
    text = data.decode("utf-8", errors="replace")
    findings = (
        find_secrets(path, text)
        + find_injections(path, text)
        + find_cross_layout_paths(path, text, layouts)
        + find_summary_over_cap(path, data)
    )
    remember(*key, findings)
    return findings


def remember(
    path: str, sha256: str, layouts: Sequence[LayoutDirs], findings: Sequence[Finding]
) -> None:
    """Keep what the lint found in the content of this digest at ``path`` for this
    process (``cached_findings``): found here, or kept elsewhere (a database)."""
    with _LINT_CACHE_LOCK:
        _LINT_CACHE[(path, sha256, tuple(layouts))] = tuple(findings)
        while len(_LINT_CACHE) > _LINT_CACHE_SIZE:
            _LINT_CACHE.popitem(last=False)


def lint_files(files: Iterable[tuple[str, bytes]], layouts: Sequence[LayoutDirs]) -> list[Finding]:
    return [finding for path, data in files for finding in lint_file(path, data, layouts)]
