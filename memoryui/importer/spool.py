"""The memory reads an import finds, held until its versions are recorded.

Reads map to the ``MEMORY.md`` version each agent had, so they are written after every
file of the import is stored (``usage.record_reads``). Until then an import of many
rollouts would hold what it found in each (about 600 bytes a rollout: 57 MB at
100,000). Past ``HELD`` rollouts they go to an unnamed temporary file a batch at a
time and are read back a batch at a time, each time they are gone through; a smaller
import (a sandbox's persist, a tree of ten thousand rollouts) keeps them in memory.
"""

from __future__ import annotations

import pickle
import tempfile
from array import array
from collections.abc import Iterator
from typing import IO

from .. import usage

# Rollouts whose reads are held in memory before they go to the temporary file, and
# how many go there at once.
HELD = 20_000
BATCH = 5_000


class ReadSpool:
    """``usage.FoundReads`` in the order added, readable as often as needed
    (``usage.Found``); ``close`` (or the end of the import) deletes its file."""

    def __init__(self, held: int | None = None, batch: int | None = None) -> None:
        self.held = HELD if held is None else held
        self.batch = BATCH if batch is None else batch
        self.file_ids = array("q")
        self.layout_ids: set[int] = set()
        self._pending: list[usage.FoundReads] = []
        self._file: IO[bytes] | None = None
        self._offsets: list[int] = []  # where each batch in the file begins

    def add(self, found: usage.FoundReads) -> None:
        self.file_ids.append(found.file_id)
        self.layout_ids.add(found.layout_id)
        self._pending.append(found)
        if len(self.file_ids) > self.held and len(self._pending) >= self.batch:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            # Created unlinked, readable by this process alone; gone when closed.
            self._file = tempfile.TemporaryFile(prefix="memoryui-reads-")
        self._offsets.append(self._file.seek(0, 2))
        pickle.dump(self._pending, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._pending = []

    def __len__(self) -> int:
        return len(self.file_ids)

    def __iter__(self) -> Iterator[usage.FoundReads]:
        for offset in self._offsets:
            assert self._file is not None
            self._file.seek(offset)  # each batch found by its place: goings-through may nest
            batch: list[usage.FoundReads] = pickle.load(self._file)  # noqa: S301 (its own file)
            yield from batch
        yield from list(self._pending)

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._pending = []
        self._offsets = []
        self.file_ids = array("q")
        self.layout_ids = set()
