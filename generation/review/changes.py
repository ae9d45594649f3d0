"""A Change: what a comparison says happened to one entry (or to a pair of them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .document import entries


@dataclass(frozen=True)
class Change:
    key: str
    status: str  # "added", "removed", "changed", "moved", "unchanged"
    kind: str
    title: str
    current: str  # "" when added
    proposed: str  # "" when removed
    # A pair (see ``pair``): the removed entries it replaces, how ("renamed", "merged",
    # "split", "rewritten"), and every member entry as (slot, side, key, text) so that
    # ``assemble`` puts each one back where it belongs.
    previous: tuple[str, ...] = ()
    pairing: str = ""
    pieces: tuple[tuple[int, str, str, str], ...] = ()
    slot: int = 0
    also: tuple[str, ...] = field(default=())  # further proposed keys of a split
    group: str = ""  # the task group it is in (proposed, else current)
    # Where a rejected move puts a task or section back (a slot between two others);
    # None: it stays where it is proposed.
    home: float | None = None
    home_group: str = ""  # and the group it goes back to
    piece_groups: tuple[str, ...] = ()  # the group of each of ``pieces``

    @property
    def paired(self) -> bool:
        return bool(self.pairing)

    @property
    def previous_titles(self) -> list[str]:
        if not self.pieces and self.previous:  # renamed in place: its own old text
            first = entries(self.current)
            return [first[0].title if first else self.previous[0]]
        old = [(key, title) for _, side, key, title in self._titled() if side == "old"]
        old.sort(key=lambda kt: kt[0] != self.key)  # the entry that kept its key first
        return [title for _, title in old]

    @property
    def proposed_titles(self) -> list[str]:
        return [title for _, side, _, title in self._titled() if side == "new"]

    def _titled(self) -> list[tuple[int, str, str, str]]:
        out = []
        for slot, side, key, text in self.pieces:
            first = entries(text)
            out.append((slot, side, key, first[0].title if first else key))
        return out
