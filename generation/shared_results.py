"""What the review computes from large texts, shared by every process of a deployment.

Parsing a document into its entries and comparing two documents take seconds for a large
``MEMORY.md`` (27 MB at 100,000 rollouts: ~2.7 s to parse, ~1.8 s more to compare).
Each process keeps its results (``functools.lru_cache``), but a process started anew (a
deploy, a restart, a new web worker) computed them all again while a reviewer waited.

With a store given (``keep_in``: memoryui gives its cache when that is shared, Redis in
production), a result for texts of at least ``SHARED_FROM`` characters is looked up
there by the texts' digests before it is computed, and kept there once computed:
whichever process computes it first (a worker, as a proposal is made) computes it for
every process. A result is stored pickled and compressed; its key also names the code
that computed it (``code_digest``: the parser's and the review's source), so a release
that changes what they compute never reads what an earlier one stored.

The store is a cache: a value it lost or cannot give back is computed again, and a store
that fails says so to its own log and answers nothing (``Store``).
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)

# Texts shorter than this (together) are computed where they are needed: fetching a
# result costs a round trip and its unpickling, more than computing a small one.
SHARED_FROM = 1_000_000

T = TypeVar("T")


class Store(Protocol):
    """Where results are kept by key. ``get`` answers None for a key it does not hold
    (or cannot reach); ``set`` keeps a value or gives up quietly."""

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes) -> None: ...


_store: Store | None = None


def keep_in(store: Store | None) -> None:
    """Share results through ``store`` from now on (None: compute them in each process)."""
    global _store
    _store = store


def sharing() -> bool:
    """Whether results are shared (a store was given)."""
    return _store is not None


def through(kind: str, texts: tuple[str, ...], compute: Callable[[], T]) -> T:
    """``compute()``, or what a process stored for the same ``kind`` of result of the same
    ``texts`` computed by the same code. Computed here, it is stored for the others."""
    store = _store
    if store is None or sum(len(text) for text in texts) < SHARED_FROM:
        return compute()
    key = ":".join(("review", kind, code_digest(), *(_digest(text) for text in texts)))
    kept = store.get(key)
    if kept is not None:
        try:
            result: T = pickle.loads(zlib.decompress(kept))
        except (zlib.error, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            log.warning("a shared %s result could not be read (%s): computed again", kind, exc)
        else:
            return result
    result = compute()
    store.set(key, zlib.compress(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL), 1))
    return result


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@cache
def code_digest() -> str:
    """A digest of the source of what computes the shared results (the parser and the
    review's modules): any change to them makes new keys."""
    here = Path(__file__).resolve().parent
    sources = [here / "memory_md.py", *sorted((here / "review").glob("*.py"))]
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]
