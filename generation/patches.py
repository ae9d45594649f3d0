"""Applying the two patch forms a model writes: the V4A form of the SDK's ``apply_patch``
tool (``*** Begin Patch`` / ``*** Update File:`` / ``@@`` hunks) and unified diffs
(``--- a/x`` / ``+++ b/x`` / ``@@ -l,n +l,n @@``). No file system here: a patch becomes
a list of operations on texts, so the caller decides what may be touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal


class PatchError(ValueError):
    """The patch cannot be parsed or does not apply; the message says where."""


@dataclass
class Hunk:
    old: list[str]  # context and removed lines, in order
    new: list[str]  # context and added lines, in order
    anchors: list[str] = field(default_factory=list)  # V4A "@@ <line>" headers
    at_end: bool = False  # V4A "*** End of File"
    line: int | None = None  # unified diff: the old start line (1-based)


@dataclass
class FileOp:
    kind: Literal["add", "update", "delete"]
    path: str
    content: str = ""  # for "add"
    hunks: list[Hunk] = field(default_factory=list)


def parse_patch(patch: str) -> list[FileOp]:
    """The file operations of a V4A patch or a unified diff."""
    text = patch.replace("\r\n", "\n").strip("\n")
    if text.lstrip().startswith("*** Begin Patch"):
        return _parse_v4a(text.strip().split("\n"))
    if re.search(r"(?m)^--- ", text) and re.search(r"(?m)^\+\+\+ ", text):
        return _parse_unified(text.split("\n"))
    raise PatchError(
        "not a patch: expected a V4A patch ('*** Begin Patch' ... '*** End Patch') or a "
        "unified diff ('--- a/FILE', '+++ b/FILE', '@@ -l,n +l,n @@')"
    )


def _parse_v4a(lines: list[str]) -> list[FileOp]:
    if lines[-1].strip() != "*** End Patch":
        raise PatchError("the patch does not end with '*** End Patch'")
    ops: list[FileOp] = []
    i = 1
    body = lines[:-1]
    while i < len(body):
        line = body[i]
        if line.startswith("*** Add File: "):
            path, i = line[len("*** Add File: ") :].strip(), i + 1
            added: list[str] = []
            while i < len(body) and not body[i].startswith("*** "):
                if not body[i].startswith("+"):
                    raise PatchError(f"line {i + 1}: every line of an added file starts with '+'")
                added.append(body[i][1:])
                i += 1
            ops.append(FileOp("add", path, content="\n".join(added) + "\n" if added else ""))
        elif line.startswith("*** Delete File: "):
            ops.append(FileOp("delete", line[len("*** Delete File: ") :].strip()))
            i += 1
        elif line.startswith("*** Update File: "):
            op = FileOp("update", line[len("*** Update File: ") :].strip())
            i += 1
            if i < len(body) and body[i].startswith("*** Move to: "):
                raise PatchError("moving a file is not supported: add the new one, delete the old")
            hunk = Hunk([], [])
            while i < len(body) and not body[i].startswith(
                ("*** Add File: ", "*** Delete File: ", "*** Update File: ")
            ):
                row = body[i]
                if row.startswith("@@"):
                    if hunk.old or hunk.new:
                        op.hunks.append(hunk)
                        hunk = Hunk([], [])
                    anchor = row[2:].strip()
                    if anchor:
                        hunk.anchors.append(row[3:] if row.startswith("@@ ") else anchor)
                elif row == "*** End of File":
                    hunk.at_end = True
                elif row.startswith("+"):
                    hunk.new.append(row[1:])
                elif row.startswith("-"):
                    hunk.old.append(row[1:])
                elif row.startswith(" ") or row == "":
                    hunk.old.append(row[1:])
                    hunk.new.append(row[1:])
                else:
                    raise PatchError(
                        f"line {i + 1}: a hunk line starts with ' ', '-' or '+': {row[:80]!r}"
                    )
                i += 1
            if hunk.old or hunk.new:
                op.hunks.append(hunk)
            if not op.hunks:
                raise PatchError(f"the update of {op.path} has no change")
            ops.append(op)
        elif not line.strip():
            i += 1
        else:
            raise PatchError(f"line {i + 1}: expected '*** Add/Update/Delete File:', got {line!r}")
    if not ops:
        raise PatchError("the patch changes no file")
    return ops


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_prefix(path: str) -> str:
    path = path.split("\t", 1)[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def _parse_unified(lines: list[str]) -> list[FileOp]:
    ops: list[FileOp] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines)):
            i += 1
            continue
        if not lines[i + 1].startswith("+++ "):
            raise PatchError(f"line {i + 2}: '+++ FILE' must follow '--- FILE'")
        old_path, new_path = _strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:])
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and (match := _HUNK_RE.match(lines[i])):
            hunk = Hunk([], [], line=int(match.group(1)))
            i += 1
            while i < len(lines) and not lines[i].startswith(("@@ ", "--- ")):
                row = lines[i]
                if row.startswith("\\"):  # "\ No newline at end of file"
                    pass
                elif row.startswith("+"):
                    hunk.new.append(row[1:])
                elif row.startswith("-"):
                    hunk.old.append(row[1:])
                elif row.startswith(" ") or row == "":
                    hunk.old.append(row[1:])
                    hunk.new.append(row[1:])
                else:
                    break
                i += 1
            hunks.append(hunk)
        if new_path == "/dev/null":
            ops.append(FileOp("delete", old_path))
        elif old_path == "/dev/null":
            added = [line for h in hunks for line in h.new]
            ops.append(FileOp("add", new_path, content="\n".join(added) + "\n" if added else ""))
        else:
            if old_path != new_path:
                raise PatchError(
                    "renaming a file is not supported: add the new one, delete the old"
                )
            if not hunks:
                raise PatchError(f"the diff of {new_path} has no hunk")
            ops.append(FileOp("update", new_path, hunks=hunks))
    if not ops:
        raise PatchError("the diff changes no file")
    return ops


def _matches(lines: list[str], block: list[str], at: int, norm: Callable[[str], str]) -> bool:
    if at < 0 or at + len(block) > len(lines):
        return False
    return all(norm(lines[at + k]) == norm(line) for k, line in enumerate(block))


def _find(lines: list[str], block: list[str], start: int, hint: int | None, at_end: bool) -> int:
    """Where ``block`` starts in ``lines`` at or after ``start``: at the end for an
    end-of-file hunk, nearest the hint for a unified hunk, else the first match; exact
    lines first, then ignoring trailing, then surrounding whitespace."""
    norms: list[Callable[[str], str]] = [lambda s: s, str.rstrip, str.strip]
    for norm in norms:
        if at_end:
            at = len(lines) - len(block)
            if at >= start and _matches(lines, block, at, norm):
                return at
            continue
        found = [
            at
            for at in range(start, len(lines) - len(block) + 1)
            if _matches(lines, block, at, norm)
        ]
        if found:
            if hint is None:
                return found[0]
            return min(found, key=lambda at: abs(at - hint))
    return -1


def apply_hunks(text: str, hunks: list[Hunk], path: str = "the file") -> str:
    """``text`` with every hunk applied in order; PatchError names the first hunk whose
    lines are not found."""
    ends_with_newline = text.endswith("\n") or not text
    lines = text.split("\n")
    if ends_with_newline and lines and lines[-1] == "":
        lines.pop()
    cursor = 0
    for number, hunk in enumerate(hunks, 1):
        for anchor in hunk.anchors:
            anchored = _find(lines, [anchor], cursor, None, False)
            if anchored < 0:
                raise PatchError(f"hunk {number} of {path}: the line {anchor!r} is not in it")
            cursor = anchored + 1
        if not hunk.old:  # pure insertion
            at = len(lines) if hunk.at_end else cursor
            if hunk.line is not None:
                at = min(len(lines), max(0, hunk.line))
        else:
            hint = hunk.line - 1 if hunk.line is not None else None
            at = _find(lines, hunk.old, cursor, hint, hunk.at_end)
            if at < 0:
                first = next((line for line in hunk.old if line.strip()), hunk.old[0])
                raise PatchError(
                    f"hunk {number} of {path}: its context and removed lines are not in the "
                    f"file (from {first[:80]!r}); read the file again and retry"
                )
        lines[at : at + len(hunk.old)] = hunk.new
        cursor = at + len(hunk.new)
    result = "\n".join(lines)
    return result + "\n" if ends_with_newline and lines else result
