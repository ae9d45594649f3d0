"""``MEMORY.md`` and ``memory_summary.md`` as a tree of entries, losslessly.

Phase two's model writes these files, so their shape is a convention, not a contract:
the parser recognises the SDK's headings (task groups, tasks, their cited rollout
summaries and keywords, preferences, knowledge, failures; the summary's sections) and
keeps everything else as generic sections, paragraphs and bullets. Every byte of the
input belongs to exactly one block, so ``parse(text).dump() == text`` for any text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

HEADING_RE = re.compile(r"^(#{1,6})(?:[ \t]+(.*?))?[ \t]*#*[ \t]*\r?\n?$")
FENCE_RE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})")
CLOSING_FENCE_RE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})[ \t]*\r?\n?$")
BULLET_RE = re.compile(r"^(?:[-*+]|\d{1,9}[.)])(?:[ \t]|\r?\n|$)")
CITATION_RE = re.compile(r"rollout_summaries/[A-Za-z0-9][A-Za-z0-9._-]*\.md")
TASK_REF_RE = re.compile(r"\[Task (\d+)\]")
TASK_GROUP_RE = re.compile(r"^Task Group:\s*(.*)$", re.IGNORECASE)
TASK_RE = re.compile(r"^Task (\d+):\s*(.*)$", re.IGNORECASE)
SCOPE_RE = re.compile(r"^scope:\s*(.*)$", re.MULTILINE)

_SECTION_KINDS = {
    "rollout_summary_files": "rollout_summary_files",
    "keywords": "keywords",
    "user preferences": "user_preferences",
    "reusable knowledge": "reusable_knowledge",
    "failures and how to do differently": "failures",
    "user profile": "user_profile",
    "general tips": "general_tips",
    "what's in memory": "whats_in_memory",
}

KIND_LABELS = {
    "document": "Document",
    "preamble": "Preamble",
    "task_group": "Task group",
    "task": "Task",
    "rollout_summary_files": "Rollout summary files",
    "keywords": "Keywords",
    "user_preferences": "User preferences",
    "reusable_knowledge": "Reusable knowledge",
    "failures": "Failures and how to do differently",
    "user_profile": "User profile",
    "general_tips": "General tips",
    "whats_in_memory": "What's in memory",
    "section": "Section",
    "bullet": "Bullet",
    "text": "Text",
}


@dataclass(slots=True)
class Block:
    """One entry: a heading with the text under it (``level`` 1-6), a bullet or a
    paragraph (``level`` 0), or the document root. ``text`` is the block's own text up
    to its first child."""

    kind: str
    title: str
    level: int
    text: str
    key: str = ""
    children: list[Block] = field(default_factory=list)

    def dump(self) -> str:
        if not self.children:
            return self.text
        return self.text + "".join([child.dump() for child in self.children])

    def walk(self) -> Iterator[Block]:
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind)

    @property
    def citations(self) -> list[str]:
        """Rollout summary files this block (and what is under it) cites, in order."""
        seen: dict[str, None] = {}
        for match in CITATION_RE.finditer(self.dump()):
            seen.setdefault(match.group(0), None)
        return list(seen)

    @property
    def keywords(self) -> list[str]:
        words: dict[str, None] = {}
        for block in self.walk():
            if block.kind != "keywords":
                continue
            for bullet in block.children:
                if bullet.kind != "bullet":
                    continue
                item = BULLET_RE.sub("", bullet.text.strip(), count=1)
                for word in item.split(","):
                    if word.strip():
                        words.setdefault(word.strip(), None)
        return list(words)

    @property
    def scope(self) -> str:
        match = SCOPE_RE.search(self.text)
        return match.group(1).strip() if match else ""

    @property
    def task_refs(self) -> list[int]:
        return [int(n) for n in TASK_REF_RE.findall(self.text)]


def _heading_kind(level: int, title: str) -> tuple[str, str]:
    if level == 1 and (m := TASK_GROUP_RE.match(title)):
        return "task_group", m.group(1).strip()
    if (m := TASK_RE.match(title)) and level >= 2:
        return "task", title
    normalized = title.strip().lower().replace("\u2019", "'")
    return _SECTION_KINDS.get(normalized, "section"), title.strip()


_NOT_SLUG_RE = re.compile(r"[^a-z0-9]+")


def _slug(text: str) -> str:
    return _NOT_SLUG_RE.sub("-", text.lower()).strip("-")[:60] or "x"


def parse(text: str) -> Block:
    """Parse markdown into a block tree; ``parse(text).dump() == text`` always."""
    return parse_open(text)[0]


def parse_open(text: str) -> tuple[Block, bool]:
    """``parse``, and whether ``text`` ends inside a fenced code block (what follows it
    would then be read as code too)."""
    root = Block(kind="document", title="", level=0, text="")
    stack: list[Block] = [root]
    fence: str | None = None
    in_list = False
    # A line's first character says which patterns could match it (most lines are
    # plain text): a large MEMORY.md has hundreds of thousands of lines.
    heading_at, fence_at, bullet_at = HEADING_RE.match, FENCE_RE.match, BULLET_RE.match
    for line in text.splitlines(keepends=True):  # never an empty line
        current = stack[-1]
        first = line[0]
        if fence is None:
            if first == "#" and (heading := heading_at(line)):
                level = len(heading.group(1))
                title = (heading.group(2) or "").strip()
                while len(stack) > 1 and stack[-1].level >= level:
                    stack.pop()
                kind, name = _heading_kind(level, title)
                block = Block(kind=kind, title=name, level=level, text=line)
                stack[-1].children.append(block)
                stack.append(block)
                in_list = False
                continue
            if first in _FENCE_FIRST and (fence_match := fence_at(line)):
                fence = fence_match.group(1)
        elif first in _FENCE_FIRST and _closes(fence, line):
            fence = None
            _append(current, line)
            continue
        else:
            _append(current, line)
            continue

        if (first in _BULLET_FIRST or first.isdecimal()) and bullet_at(line):
            current.children.append(Block(kind="bullet", title="", level=0, text=line))
            in_list = True
        elif not current.children:
            current.text += line
        elif in_list and (first in " \t" or not line.strip()):
            _append(current, line)
        elif not line.strip():
            _append(current, line)
        else:
            last = current.children[-1]
            if last.kind == "text" and not last.text.endswith(("\n\n", "\r\n\r\n")):
                last.text += line
            else:
                current.children.append(Block(kind="text", title="", level=0, text=line))
            in_list = False
    if not stack[0].children and not root.text:
        return root, fence is not None
    if root.text:
        root.children.insert(0, Block(kind="preamble", title="", level=0, text=root.text))
        root.text = ""
    _assign_keys(root, "")
    return root, fence is not None


# The first characters a fence (up to three spaces, then ``` or ~~~) or a bullet (-, *,
# +, or a number: any decimal digit, as the pattern's \d) can start with.
_FENCE_FIRST = frozenset(" `~")
_BULLET_FIRST = frozenset("-*+")


def _closes(fence: str, line: str) -> bool:
    """A closing fence uses the opening's character, is at least as long, and carries
    nothing after it (CommonMark)."""
    match = CLOSING_FENCE_RE.match(line)
    return match is not None and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence)


def _append(block: Block, line: str) -> None:
    if block.children:
        target = block.children[-1]
        while target.children:
            target = target.children[-1]
        target.text += line
    else:
        block.text += line


def _assign_keys(block: Block, prefix: str) -> None:
    counts: dict[str, int] = {}
    for child in block.children:
        kind = child.kind
        if kind == "bullet" or kind == "text":
            base = kind
        elif kind == "task" and (m := TASK_RE.match(child.title)):
            base = f"task-{m.group(1)}"
        else:
            base = _slug(child.title or kind)
        count = counts[base] = counts.get(base, 0) + 1
        name = base if count == 1 else f"{base}~{count}"
        child.key = f"{prefix}/{name}" if prefix else name
        if child.children:
            _assign_keys(child, child.key)


def entries(root: Block) -> list[Block]:
    """The headed blocks, in document order (what navigation lists)."""
    return [b for b in root.walk() if b.level > 0]


def task_groups(root: Block) -> list[Block]:
    return [b for b in root.children if b.kind == "task_group"]
