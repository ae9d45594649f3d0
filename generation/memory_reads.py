"""Which memory files an agent read in a rollout, and which lines of them.

With the SDK's ``Memory()`` capability the agent is told to search ``MEMORY.md`` and
open a rollout summary or a skill (its memory read prompt); it does so with its shell
tool (``exec_command``, ``shell_call``, ``local_shell_call``) and with ``load_skill``.
Shell commands are parsed with tree-sitter's bash grammar, not with regular
expressions: lists (``&&``, ``||``, ``;``), pipelines, quoting and ``cd`` are followed
the way the shell runs them. A read is a command that prints a memory file (``cat``,
``nl``, ``head``, ``tail``, ``sed -n a,bp``, a ``cat`` piped into one of them) or
searches one (``rg``, ``grep``, ``ag``, ``git grep``); a command that only names a
memory path (``echo``, ``ls``, ``printf``, a redirect target) reads nothing.

An output the shell tool cut (``max_output_tokens``) shows a whole file or a range only
as far as its head and tail went. ``generation.memory_entries`` maps a read to the
entries of the ``MEMORY.md`` the agent had.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import tree_sitter
import tree_sitter_bash

MEMORY_MD = "memory_md"
MEMORY_SUMMARY = "memory_summary"
RAW_MEMORIES = "raw_memories"
ROLLOUT_SUMMARY = "rollout_summary"
SKILL = "skill"
KINDS = (MEMORY_SUMMARY, MEMORY_MD, RAW_MEMORIES, ROLLOUT_SUMMARY, SKILL)
KIND_LABELS = {
    MEMORY_SUMMARY: "memory_summary.md",
    MEMORY_MD: "MEMORY.md",
    RAW_MEMORIES: "raw memories",
    ROLLOUT_SUMMARY: "rollout summaries",
    SKILL: "skills",
}

WHOLE = "whole"  # the whole file printed
RANGE = "range"  # some lines by number (sed, head, tail)
CUT = "cut"  # a whole file or a range, as far as the head and tail of a cut output went
SEARCH = "search"  # the lines a search printed
LOAD_SKILL = "load_skill"

PRINTERS = frozenset({"cat", "nl", "less", "more", "bat", "batcat", "tac", "view"})
SEARCHERS = frozenset({"rg", "grep", "egrep", "fgrep", "ag", "ack"})
# Options of the searchers that take a value as the next word (so it is no file).
_SEARCH_VALUE_OPTIONS = frozenset(
    {
        "-e",
        "-f",
        "-m",
        "-A",
        "-B",
        "-C",
        "-g",
        "-t",
        "-T",
        "-M",
        "-j",
        "--glob",
        "--type",
        "--type-not",
        "--max-count",
        "--context",
        "--after-context",
        "--before-context",
        "--regexp",
        "--file",
        "--max-columns",
        "--threads",
        "--include",
        "--exclude",
        "--color",
        "--colors",
        "--sort",
        "--sortr",
        "--encoding",
        "-E",
        "--max-depth",
        "--iglob",
    }
)
_SED_RANGE_RE = re.compile(r"^(\d+)(?:,(\+?)(\d+|\$))?p$")
_COUNT_RE = re.compile(r"^-?(\d+)$")


# Slots: an import holds the reads of every rollout until its end (about 100,000 of
# each at 100,000 rollouts), and an instance's dict was most of each one's bytes.
@dataclass(frozen=True, slots=True)
class Read:
    """One read of one memory file. ``path`` is relative to the memories dir;
    ``lines`` are 1-based inclusive ranges (a negative start: that many lines from the
    end, ``tail``); ``numbered`` are line numbers a search printed, ``printed`` the text
    of lines it printed without numbers."""

    kind: str
    path: str
    how: str
    lines: tuple[tuple[int, int], ...] = ()
    numbered: tuple[int, ...] = ()
    printed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ItemReads:
    """The reads of one call item of a segment (``segment`` and ``index`` 1-based as
    the rollout page counts them: input items first, then generated ones)."""

    segment: int
    index: int
    command: str
    reads: tuple[Read, ...]


def kind_of(path: str) -> str | None:
    """The kind of a memory file by its path relative to the memories dir, or None."""
    if path == "MEMORY.md":
        return MEMORY_MD
    if path == "memory_summary.md":
        return MEMORY_SUMMARY
    if path == "raw_memories.md" or path.startswith("raw_memories/"):
        return RAW_MEMORIES
    if path.startswith("rollout_summaries/") and path.endswith(".md"):
        return ROLLOUT_SUMMARY
    if path.startswith("skills/") and path.count("/") >= 2:
        return SKILL
    return None


@lru_cache(maxsize=1)
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


# --- words ------------------------------------------------------------------------


def _word(node: tree_sitter.Node) -> str | None:
    """The literal value of a word as the shell passes it, or None when it depends on
    an expansion (a variable, a command substitution, a glob is kept as written)."""
    kind = node.type
    text = (node.text or b"").decode("utf-8", "replace")
    if kind in ("word", "number"):
        return re.sub(r"\\(.)", r"\1", text) if "\\" in text else text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        parts = []
        for child in node.children:
            if child.type == '"':
                continue
            if child.type != "string_content":
                return None
            parts.append(re.sub(r'\\([$`"\\\n])', r"\1", (child.text or b"").decode()))
        return "".join(parts)
    if kind == "ansi_c_string":
        return text[2:-1]
    if kind == "concatenation":
        pieces = [_word(child) for child in node.children]
        if any(p is None for p in pieces):
            return None
        return "".join(p for p in pieces if p is not None)
    return None


@dataclass
class _Command:
    name: str
    args: list[str | None]


def _simple(node: tree_sitter.Node) -> _Command | None:
    name_node = node.child_by_field_name("name")
    if name_node is None:
        return None
    name = _word(name_node.children[0]) if name_node.children else None
    if name is None:
        return None
    args = [
        _word(child)
        for child in node.children_by_field_name("argument")
        if child.type not in ("file_redirect", "herestring_redirect", "heredoc_redirect")
    ]
    return _Command(posixpath.basename(name), args)


# --- walking the command ------------------------------------------------------------


@dataclass
class _Context:
    memories_dir: str
    # Relative to the workspace root ("" the root itself); None: outside it or unknown
    # (``cd /tmp``, ``cd $DIR``), where a relative path names no memory file.
    cwd: str | None
    reads: list[_Step] = field(default_factory=list)


# What a command reads, kept by its text: agents run the same few commands run after run
# (the SDK's memory prompt has each run search MEMORY.md and open a summary), and parsing
# and walking one costs more than the rest of a rollout's reading. A search is kept as
# what it searched; the lines it read come from what it printed, each time.
_PLANS_KEPT = 4096
_plans: dict[tuple[str, str, str], tuple[_Step, ...]] = {}
_plans_lock = threading.Lock()


def command_reads(
    cmd: str, memories_dir: str, *, workdir: str = "", output: str = ""
) -> list[Read]:
    """The memory files a shell command read (``workdir`` relative to the workspace
    root, or absolute; ``output`` what it printed, for the lines a search found)."""
    if not _mentions_memory(cmd, workdir, memories_dir):
        return []
    key = (cmd, workdir, memories_dir)
    plan = _plans.get(key)
    if plan is None:
        tree = _parser().parse(cmd.encode("utf-8", "replace"))
        cwd = _resolve("", workdir or ".", memories_dir)
        context = _Context(memories_dir, cwd)
        _statements(tree.root_node, context)
        plan = tuple(context.reads)
        with _plans_lock:  # web threads may import at once
            if len(_plans) >= _PLANS_KEPT:
                del _plans[next(iter(_plans))]  # the oldest kept
            _plans[key] = plan
    reads: list[Read] = []
    for step in plan:
        if isinstance(step, Read):
            reads.append(step)
        else:
            reads.extend(step.reads(output))
    if len(reads) == 1 and TRUNCATED in output:
        return [_as_printed(reads[0], output)]
    return reads


# The middle of an output longer than the model's ``max_output_tokens``, as the SDK's
# shell tool cuts it: the count of the output's lines first, then its head, a marker
# in place of the middle, and its tail.
TRUNCATED = " truncated…"
_CUT_RE = re.compile(
    r"\ATotal output lines: (\d+)\n\n(.*?)…\d+ (?:tokens|chars) truncated…(.*)\Z", re.S
)


def _as_printed(read: Read, output: str) -> Read:
    """``read`` (a command's only one) as far as its cut output showed it: a whole file
    or one range of lines becomes the lines of the output's head and tail, those of the
    middle unseen. Left whole where that cannot be told (no count of lines, several
    ranges), which counts more entries read, never fewer."""
    cut = _CUT_RE.match(output)
    if cut is None or read.how not in (WHOLE, RANGE):
        return read
    total = int(cut.group(1))
    head, tail = len(cut.group(2).splitlines()), len(cut.group(3).splitlines())
    if read.how == WHOLE:
        start, end = 1, total
    elif len(read.lines) == 1:
        first, last = read.lines[0]
        # A tail (negative) printed the file's last ``total`` lines at most; a range
        # from ``first`` as many lines as the output had, up to its end.
        start, end = (-total, -1) if first < 0 else (first, min(last, first + total - 1))
    else:
        return read
    if head + tail >= end - start + 1:
        return read  # nothing of it unseen
    lines = tuple((a, b) for a, b in ((start, start + head - 1), (end - tail + 1, end)) if a <= b)
    return Read(read.kind, read.path, CUT, lines)


def _mentions_memory(cmd: str, workdir: str, memories_dir: str) -> bool:
    search = _memory_words(memories_dir).search
    return search(cmd) is not None or (bool(workdir) and search(workdir) is not None)


@lru_cache(maxsize=64)
def _memory_words(memories_dir: str) -> re.Pattern[str]:
    """Any word a command that reads memory must contain (one scan of the text)."""
    words = ["MEMORY.md", "memory_summary", "raw_memories", "rollout_summaries", "skills"]
    words.append(memories_dir.rsplit("/", 1)[-1])
    return re.compile("|".join(re.escape(word) for word in words if word))


def _statements(node: tree_sitter.Node, context: _Context) -> None:
    """Run the statements under ``node`` in order; ``cd`` changes the directory of
    what follows it (a subshell's or a pipeline's stays inside)."""
    for child in node.named_children:
        _statement(child, context)


def _statement(node: tree_sitter.Node, context: _Context) -> None:
    kind = node.type
    if kind == "command":
        command = _simple(node)
        if command is None:
            return
        if command.name == "cd":
            words = [a for a in command.args if a != "--"]
            target = words[0] if words else None
            context.cwd = (
                None if target is None else _resolve(context.cwd, target, context.memories_dir)
            )
            return
        context.reads.extend(_pipeline([command], context))
    elif kind == "pipeline":
        commands = [_simple(c) if c.type == "command" else None for c in node.named_children]
        if commands and commands[0] is not None:
            context.reads.extend(_pipeline([c for c in commands if c is not None], context))
    elif kind in ("list", "program", "compound_statement", "redirected_statement"):
        _statements(node, context)
    elif kind == "subshell":
        inner = _Context(context.memories_dir, context.cwd)
        _statements(node, inner)
        context.reads.extend(inner.reads)
    elif kind in ("if_statement", "while_statement", "for_statement", "elif_clause"):
        _statements(node, context)
    elif kind in ("else_clause", "do_group"):
        _statements(node, context)


@lru_cache(maxsize=4096)
def _resolve(cwd: str | None, path: str, memories_dir: str) -> str | None:
    """``path`` relative to the workspace root, or None when it is not under it. An
    absolute path is taken to be inside the sandbox's workspace when it goes through
    the memories dir (the workspace root is another absolute path in every sandbox)."""
    if path.startswith("~") or not path:
        return None
    if path.startswith("/"):
        parts = [p for p in posixpath.normpath(path).split("/") if p]
        anchor = memories_dir.split("/")
        for start in range(len(parts) - len(anchor), -1, -1):
            if parts[start : start + len(anchor)] == anchor:
                return "/".join(parts[start:])
        return None
    if cwd is None:
        return None
    joined = posixpath.normpath(posixpath.join(cwd or ".", path))
    if joined == ".":
        return ""
    if joined.startswith("../") or joined == "..":
        return None
    return joined


@lru_cache(maxsize=4096)
def _memory_path(cwd: str | None, path: str, memories_dir: str) -> str | None:
    """``path`` relative to the memories dir, or None when it is outside it."""
    full = _resolve(cwd, path, memories_dir)
    if full is None:
        return None
    if full == memories_dir:
        return ""
    prefix = memories_dir + "/"
    return full[len(prefix) :] if full.startswith(prefix) else None


def _operands(args: Sequence[str | None], value_options: frozenset[str] = frozenset()) -> list[str]:
    """The non-option words (after ``--`` all of them), skipping option values."""
    out: list[str] = []
    skip = False
    ended = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg is None:
            continue
        if not ended and arg == "--":
            ended = True
            continue
        if not ended and arg.startswith("-") and arg != "-":
            if arg in value_options:
                skip = True
            continue
        out.append(arg)
    return out


def _pipeline(commands: list[_Command], context: _Context) -> list[_Step]:
    """Reads of a pipeline: its first command reads files; a ``head``, ``tail``,
    ``sed -n`` or search after a whole-file print narrows what was printed."""
    first, rest = commands[0], commands[1:]
    reads = _source(first, context)
    for command in rest:
        reads = [_narrowed(read, command) for read in reads]
    return reads


def _files(args: list[str], context: _Context) -> list[tuple[str, str]]:
    """(memory path, kind) of the file operands that are memory files."""
    found = []
    for arg in args:
        path = _memory_path(context.cwd, arg, context.memories_dir)
        if path is None:
            continue
        kind = kind_of(path)
        if kind is not None:
            found.append((path, kind))
    return found


def _source(command: _Command, context: _Context) -> list[_Step]:
    name, args = command.name, command.args
    if name in PRINTERS:
        return [Read(kind, path, WHOLE) for path, kind in _files(_operands(args), context)]
    if name == "sed":
        return _sed(args, context)
    if name in ("head", "tail"):
        count, operands = _count(args)
        lines = _head_tail(name, count)
        return [Read(kind, path, RANGE, lines) for path, kind in _files(operands, context)]
    if name == "git" and args[:1] == ["grep"]:
        return _search(_Command("grep", args[1:]), context)
    if name in SEARCHERS:
        return _search(command, context)
    return []


def _count(args: Sequence[str | None]) -> tuple[str, list[str]]:
    """``head``/``tail``'s line count as written (default 10) and its file operands."""
    count = "10"
    operands: list[str] = []
    words = [a for a in args if a is not None]
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-n", "--lines") and i + 1 < len(words):
            count = words[i + 1]
            i += 2
            continue
        if word.startswith("--lines="):
            count = word.split("=", 1)[1]
        elif word.startswith("-n") and len(word) > 2:
            count = word[2:]
        elif _COUNT_RE.match(word) and word.startswith("-"):
            count = word[1:]
        elif not word.startswith("-") or word == "-":
            operands.append(word)
        i += 1
    return count, operands


def _head_tail(name: str, count: str) -> tuple[tuple[int, int], ...]:
    if name == "head":
        return ((1, int(count)),) if count.isdigit() else ()
    if count.startswith("+") and count[1:].isdigit():
        return ((int(count[1:]), 10**9),)
    return ((-int(count), -1),) if count.isdigit() else ()


def _sed_lines(script: str) -> tuple[tuple[int, int], ...] | None:
    """The lines ``sed -n`` prints for scripts of ``a,bp``/``ap`` parts (``;``)."""
    ranges = []
    for part in script.replace("\n", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        match = _SED_RANGE_RE.match(part)
        if match is None:
            return None
        start = int(match.group(1))
        if match.group(3) is None:
            end = start
        elif match.group(3) == "$":
            end = 10**9
        elif match.group(2):
            end = start + int(match.group(3))
        else:
            end = int(match.group(3))
        ranges.append((start, end))
    return tuple(ranges)


def _sed(args: Sequence[str | None], context: _Context) -> list[_Step]:
    words = [a for a in args if a is not None]
    quiet = any(w in ("-n", "--quiet", "--silent") for w in words)
    scripts = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-e"]
    operands = _operands(words, frozenset({"-e", "-f"}))
    if not scripts and operands:
        scripts, operands = [operands[0]], operands[1:]
    if not quiet:
        return [Read(kind, path, WHOLE) for path, kind in _files(operands, context)]
    lines = _sed_lines(";".join(scripts))
    if lines is None:
        return [Read(kind, path, WHOLE) for path, kind in _files(operands, context)]
    return [Read(kind, path, RANGE, lines) for path, kind in _files(operands, context)]


def _search(command: _Command, context: _Context) -> list[_Step]:
    words = [a for a in command.args if a is not None]
    explicit_pattern = any(w in ("-e", "-f", "--regexp", "--file") for w in words) or any(
        w.startswith(("--regexp=", "--file=")) for w in words
    )
    operands = _operands(words, _SEARCH_VALUE_OPTIONS)
    targets = operands if explicit_pattern else operands[1:]
    files: list[tuple[str, str]] = []
    folders: list[str] = []
    for target in targets:
        path = _memory_path(context.cwd, target, context.memories_dir)
        if path is None:
            continue
        if kind_of(path) is not None:
            files.append((path, kind_of(path) or ""))
        elif "." not in posixpath.basename(path) or path == "":
            folders.append(path)
    if not targets and _memory_path(context.cwd, ".", context.memories_dir) is not None:
        folders.append(_memory_path(context.cwd, ".", context.memories_dir) or "")
    if not files and not folders:
        return []
    numbered = _numbers_lines(command.name, words)
    return [_Search(tuple(files), tuple(folders), numbered, context.cwd, context.memories_dir)]


def _numbers_lines(name: str, words: list[str]) -> bool:
    if any(w in ("--line-number",) for w in words):
        return True
    if any(w in ("-N", "--no-line-number") for w in words):
        return False
    short = [w for w in words if w.startswith("-") and not w.startswith("--")]
    if any("n" in w[1:] for w in short):
        return True
    return name in ("ag", "ack")  # these number lines by default


@dataclass(frozen=True)
class _Search:
    """A search of memory files: which lines it read is what it printed."""

    files: tuple[tuple[str, str], ...]  # (memory path, kind)
    folders: tuple[str, ...]
    numbered: bool
    cwd: str | None
    memories_dir: str
    how: str = SEARCH

    def reads(self, output: str) -> list[Read]:
        """One read per memory file searched: with what it printed of that file. A
        search of one file prints its lines bare; of several, or a folder, each line
        after its file's name as written (``name:line`` or ``name:number:line``)."""
        files, folders = self.files, self.folders
        prefixed = len(files) + len(folders) > 1 or bool(folders)
        printed: dict[str, list[str]] = {path: [] for path, _ in files}
        kinds = dict(files)
        for line in output.splitlines():
            if prefixed:
                name, sep, rest = line.partition(":")
                if not sep:
                    continue
                path = _memory_path(self.cwd, name, self.memories_dir)
                if path is None or kind_of(path) is None:
                    continue
                if not (path in kinds or any(path.startswith(f + "/") or f == "" for f in folders)):
                    continue
                kinds.setdefault(path, kind_of(path) or "")
                printed.setdefault(path, []).append(rest)
            elif files:
                printed[files[0][0]].append(line)
        reads = []
        for path, lines in printed.items():
            if self.numbered:
                reads.append(Read(kinds[path], path, SEARCH, numbered=_numbers(lines)))
            else:
                reads.append(Read(kinds[path], path, SEARCH, printed=tuple(lines)))
        return reads


@dataclass(frozen=True)
class _Filtered:
    """A whole file piped into a search: the lines it read are the ones printed."""

    kind: str
    path: str
    numbered: bool
    how: str = SEARCH

    def reads(self, output: str) -> list[Read]:
        shown = output.splitlines()
        if self.numbered:
            return [Read(self.kind, self.path, SEARCH, numbered=_numbers(shown))]
        return [Read(self.kind, self.path, SEARCH, printed=tuple(shown))]


def _numbers(lines: list[str]) -> tuple[int, ...]:
    """The line numbers a numbered search printed (``number:line``)."""
    parts = [line.partition(":") for line in lines]
    return tuple(int(head) for head, sep, _ in parts if sep and head.isdigit())


# A step of what a command reads: a read, or a search whose lines its output gives.
_Step = Read | _Search | _Filtered


def _narrowed(step: _Step, command: _Command) -> _Step:
    """A whole-file read piped into ``head``/``tail``/``sed -n``/a search prints
    only part of the file."""
    if not isinstance(step, Read) or step.how != WHOLE:
        return step
    name = command.name
    words = [a for a in command.args if a is not None]
    if name in ("head", "tail"):
        count, _ = _count(words)
        return Read(step.kind, step.path, RANGE, _head_tail(name, count))
    if name == "sed" and any(w in ("-n", "--quiet", "--silent") for w in words):
        operands = _operands(words, frozenset({"-e", "-f"}))
        script = operands[0] if operands else ""
        lines = _sed_lines(script)
        if lines is not None:
            return Read(step.kind, step.path, RANGE, lines)
    if name in SEARCHERS:
        return _Filtered(step.kind, step.path, _numbers_lines(name, words))
    return step


# --- items of a rollout -------------------------------------------------------------


def _arguments(item: dict[str, Any]) -> dict[str, Any]:
    raw = item.get("arguments")
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def exec_output(text: str) -> str:
    """What a command printed, from the exec tool's output (``Chunk ID: ...`` header,
    then ``Output:``); any other text as it is."""
    if text.startswith("Chunk ID: "):
        marker = text.find("\nOutput:", 0, 1000)
        if marker != -1:
            return text[marker + len("\nOutput:") :].removeprefix("\n")
    return text


def _output_text(item: dict[str, Any]) -> str:
    output = item.get("output")
    if isinstance(output, str):
        return exec_output(output)
    if isinstance(output, list):  # shell_call_output: [{stdout, stderr, outcome}]
        return "\n".join(str(part.get("stdout", "")) for part in output if isinstance(part, dict))
    return ""


def segment_reads(
    input_items: Sequence[Any], generated: Sequence[Any], segment: int, memories_dir: str
) -> Iterator[ItemReads]:
    """The memory reads of one run segment's generated items (its input repeats what
    earlier runs did), each with the output its call got."""
    calls = [
        (position, item)
        for position, item in enumerate(generated)
        if isinstance(item, dict)
        and item.get("type") in _CALL_TYPES  # messages and outputs: no call of a function
        and _may_read(item, memories_dir)
    ]
    if not calls:
        return  # most segments: no call names a memory file, no output is decoded
    wanted = {item.get("call_id") for _, item in calls}
    outputs: dict[str, str] = {}
    for item in generated:
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_output"):
            call_id = item.get("call_id") or item.get("id")
            if isinstance(call_id, str) and call_id in wanted:
                outputs[call_id] = _output_text(item)
    offset = len(input_items)
    for position, item in calls:
        found = _item_reads(item, outputs, memories_dir)
        if found is not None:
            command, reads = found
            if reads:
                yield ItemReads(segment, offset + position + 1, command, tuple(reads))


# The item types that call a tool that can read a file (a tuple: an item's type can be
# any JSON, a list too, which a set could not look up).
_CALL_TYPES = ("function_call", "shell_call", "local_shell_call")


def _may_read(item: dict[str, Any], memories_dir: str) -> bool:
    """Whether a generated item can be a read at all: a ``load_skill`` call, or a shell
    call whose text names a memory file or folder (checked before any JSON is decoded)."""
    kind = item.get("type")
    if kind == "function_call":
        name = item.get("name")
        if name == LOAD_SKILL:
            return True
        if name != "exec_command":
            return False
        raw = item.get("arguments")
        if isinstance(raw, str):
            return _mentions_memory(raw, "", memories_dir)
        return isinstance(raw, dict)
    return kind in ("shell_call", "local_shell_call")


def _item_reads(
    item: dict[str, Any], outputs: dict[str, str], memories_dir: str
) -> tuple[str, list[Read]] | None:
    kind = item.get("type")
    call_id = item.get("call_id")
    output = outputs.get(call_id, "") if isinstance(call_id, str) else ""
    if kind == "function_call":
        name = item.get("name")
        if name not in ("exec_command", LOAD_SKILL):
            return None
        raw = item.get("arguments")
        if name == "exec_command" and isinstance(raw, str):
            if not _mentions_memory(raw, "", memories_dir):
                return None  # most calls: no JSON to decode
        args = _arguments(item)
        if name == "exec_command" and isinstance(args.get("cmd"), str):
            workdir = args.get("workdir")
            cmd = args["cmd"]
            return cmd, command_reads(
                cmd,
                memories_dir,
                workdir=workdir if isinstance(workdir, str) else "",
                output=output,
            )
        if name == LOAD_SKILL and isinstance(args.get("skill_name"), str):
            skill = args["skill_name"].strip().strip("/")
            if skill and "/" not in skill and skill not in (".", ".."):
                path = f"skills/{skill}/SKILL.md"
                return f"load_skill {skill}", [Read(SKILL, path, LOAD_SKILL)]
        return None
    if kind in ("shell_call", "local_shell_call"):
        action = item.get("action")
        if not isinstance(action, dict):
            return None
        commands = action.get("commands", action.get("command"))
        workdir = action.get("working_directory") or ""
        if kind == "local_shell_call" and isinstance(commands, list):
            commands = [shlex.join(str(c) for c in commands)]
        if not isinstance(commands, list):
            return None
        reads: list[Read] = []
        for cmd in commands:
            if isinstance(cmd, str):
                reads += command_reads(cmd, memories_dir, workdir=str(workdir), output=output)
        return "\n".join(str(c) for c in commands), reads
    return None
