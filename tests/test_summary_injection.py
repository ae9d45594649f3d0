"""memory_summary.md as the SDK injects it: same text, same cut, on any input."""

import random

import pytest
from agents.sandbox.util.token_truncation import TruncationPolicy, truncate_text

from generation.summary import MAX_TOKENS, injected_summary


def sdk_injection(data: bytes) -> str:
    return truncate_text(
        data.decode("utf-8", errors="replace").strip(), TruncationPolicy.tokens(MAX_TOKENS)
    )


def test_fixture_summaries_are_injected_whole(fixtures_dir):
    for path in fixtures_dir.glob("*/workspace/memories/**/memory_summary.md"):
        data = path.read_bytes()
        injection = injected_summary(data)
        assert not injection.truncated
        assert injection.text == sdk_injection(data) == data.decode().strip()


@pytest.mark.parametrize("seed", range(12))
def test_oversized_summary_is_cut_exactly_as_the_sdk_cuts_it(seed):
    rng = random.Random(seed)
    alphabet = ["word ", "mot ", "Grüße ", "深い ", "🙂", "\n", "- bullet\n", "## Heading\n"]
    size = rng.randint(55_000, 140_000)
    parts, total = [], 0
    while total < size:
        piece = rng.choice(alphabet)
        parts.append(piece)
        total += len(piece.encode())
    data = ("  \n" + "".join(parts) + "\n\n").encode()
    if seed % 3 == 0:
        data += b"\xff\xfe broken bytes"

    injection = injected_summary(data)

    assert injection.text == sdk_injection(data)
    whole = data.decode("utf-8", errors="replace").strip()
    if len(whole.encode()) > MAX_TOKENS * 4:
        assert injection.truncated
        assert injection.head + injection.cut + injection.tail == whole
        assert injection.cut_tokens > 0
    else:
        assert not injection.truncated


def test_empty_summary_injects_nothing():
    assert injected_summary(b"  \n\n").text == sdk_injection(b"  \n\n") == ""
