"""What a future agent receives from ``memory_summary.md``.

At read time the SDK decodes the file (bad bytes replaced), strips it, and, when it is
over 15,000 tokens (counted as 4 bytes a token), keeps a head and a tail around a
marker saying how many tokens were cut. This module reproduces that result so that
people see exactly what is injected and what is lost before they approve it.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_TOKENS = 15_000
BYTES_PER_TOKEN = 4


def approx_tokens(text: str) -> int:
    """Tokens as the SDK estimates them: UTF-8 bytes / 4, rounded up."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


@dataclass(frozen=True)
class Injection:
    """The injected text, as its kept head, the marker (empty when nothing is cut) and
    its kept tail; ``cut`` is the middle that is lost."""

    head: str
    marker: str
    tail: str
    cut: str
    tokens: int
    max_tokens: int

    @property
    def text(self) -> str:
        return self.head + self.marker + self.tail

    @property
    def truncated(self) -> bool:
        return bool(self.marker)

    @property
    def cut_tokens(self) -> int:
        return approx_tokens(self.cut)

    @property
    def percent_of_cap(self) -> int:
        return round(100 * self.tokens / self.max_tokens) if self.max_tokens else 0


def _marker(tokens: int) -> str:
    return f"\u2026{tokens} tokens truncated\u2026"


def _head_within(text: str, budget: int) -> str:
    """The longest prefix of whole characters whose UTF-8 size is at most ``budget``."""
    encoded = text.encode("utf-8")
    return encoded[:budget].decode("utf-8", errors="ignore")


def _tail_within(text: str, budget: int) -> str:
    """The longest suffix of whole characters whose UTF-8 size is at most ``budget``."""
    encoded = text.encode("utf-8")
    start = max(0, len(encoded) - budget)
    # Skip continuation bytes so that the tail starts on a character boundary.
    while start < len(encoded) and (encoded[start] & 0xC0) == 0x80:
        start += 1
    return encoded[start:].decode("utf-8")


def injected_summary(data: bytes, max_tokens: int = MAX_TOKENS) -> Injection:
    text = data.decode("utf-8", errors="replace").strip()
    tokens = approx_tokens(text)
    budget = max_tokens * BYTES_PER_TOKEN
    size = len(text.encode("utf-8"))
    if size <= budget or not text:
        return Injection(text, "", "", "", tokens, max_tokens)
    # The room for content is what the marker, sized for the whole text, leaves over.
    room = max(0, budget - len(_marker(tokens).encode("utf-8")))
    head = _head_within(text, room // 2)
    tail = _tail_within(text[len(head) :], room - room // 2)
    cut = text[len(head) : len(text) - len(tail)]
    removed = size - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return Injection(head, _marker(-(-removed // BYTES_PER_TOKEN)), tail, cut, tokens, max_tokens)
