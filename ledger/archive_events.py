"""The archive's head, published so a second system keeps it.

``ArchiveHead`` is appended by ``farebox archive verify --publish`` once the
archive verified intact: the manifest's last entry (``entry``, its number;
``head``, its hash) and how many files were live. Whoever consumes the event
log (a SIEM tailing Kafka, an auditor's copy of the log) then holds a head to
give back to ``farebox archive verify --expect-head``, which fails if entries
were cut off or the manifest was rewritten since. Its id names the head, so
publishing an unchanged head again appends nothing (the log dedupes by id).
It carries no money; the ledger folds ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ledger.envelope import Event, non_empty, non_negative
from ledger.errors import InvalidEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveHead(Event):
    """The manifest's head at ``time``: entry number, its SHA-256 hash (64 hex characters), live files."""

    type: ClassVar[str] = "archive.head"

    entry: int
    head: str
    files: int

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        non_empty(self, "head", self.head)
        if len(self.head) != 64 or any(c not in "0123456789abcdef" for c in self.head):
            raise InvalidEvent(f"{self.type}.head must be a SHA-256 in lower-case hex, got {self.head!r}")
        non_negative(self, "entry", self.entry)
        non_negative(self, "files", self.files)

    @property
    def id(self) -> str:
        return f"archive/head/{self.entry}/{self.head[:16]}"
