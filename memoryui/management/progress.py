"""Progress for the management commands, on stderr: a bar redrawn in place on a
terminal; otherwise plain lines (each stage's start, every quarter, its end), so that a
log or a test sees the same steps."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30


class ProgressBar:
    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._stage: str | None = None
        self._quarter = -1
        self._drawn = 0.0
        self._open = False  # a bar is drawn on the current line

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage:
            self._end_line()
            self._stage, self._quarter = stage, -1
        if self.tty:
            now = time.monotonic()
            if done < total and now - self._drawn < 0.1:
                return  # redraw at most ten times a second
            self._drawn = now
            if total:
                filled = WIDTH * done // total
                bar = "#" * filled + "-" * (WIDTH - filled)
                self.stream.write(f"\r{stage:>8} [{bar}] {done}/{total}")
            else:
                self.stream.write(f"\r{stage:>8} {done}")
            self._open = True
        else:
            if not total:
                return  # a count without an end: the line comes when the total is known
            quarter = 4 * done // total
            if quarter == self._quarter:
                return
            self._quarter = quarter
            self.stream.write(f"{stage}: {done}/{total}\n")
        self.stream.flush()

    def _end_line(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False

    def close(self) -> None:
        self._end_line()
