"""The request ids a ledger has closed: what makes a late duplicate admit change nothing, and how long they are kept.

A request is closed when its ``request.settled`` or ``hold.expired`` folds; an admit of a closed id is a
duplicate. How long a closed id must be remembered depends on where the events come from:

* **Per month** (``keep_s`` None; replays and what-ifs over an archive, where a duplicate can arrive any time
  within the month): ids are kept per hold period until ``prune(before_period)`` forgets whole months, so two
  months of ids are held. At a steady 240 requests a second that is over a million ids a day: fine for a batch
  job, not for a process that runs for months.
* **For a window** (``keep_s`` seconds; the embedded gateway's ledgers): ids are kept per minute of their
  closing, by the closing events' own clock, and a minute is forgotten once a close ``keep_s`` later is folded.
  Sound there because the embedded log is its own idempotence: each offset is folded once (the runner folds in
  offset order and skips what it has), and an append of an event already in the log is acknowledged with its old
  offset, so no admit reaches the fold twice; the live ledger's catch-up skips what the process recorded itself
  (``streams.runner``), so the window only covers a read that overtakes an acknowledgement. Memory: the ids of
  ``keep_s`` seconds of traffic (2 minutes at 240/s: about 29,000 ids, some 4 MB), flat however long the
  process runs.

The state does not depend on the order the closes were folded in: the window holds exactly the ids closed in
the ``keep_s // 60 + 1`` minutes up to the latest closing minute seen (a close older than that is not kept), so
a ledger rebuilt from a checkpoint plus the events after it equals the live one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


class ClosedIds:
    """Closed request ids, per hold period (``keep_s`` None) or per closing minute for ``keep_s`` seconds."""

    __slots__ = ("_by_minute", "_by_period", "_newest", "keep_s")

    def __init__(self, keep_s: int | None = None) -> None:
        if keep_s is not None and keep_s < 60:
            raise ValueError(f"closed ids are kept at least a minute, not {keep_s} s")
        self.keep_s = keep_s
        self._by_period: dict[str, set[str]] = {}
        self._by_minute: dict[int, set[str]] = {}
        self._newest = -1  # the latest closing minute seen (window mode)

    def add(self, request_id: str, period: str, closed_at: datetime) -> None:
        if self.keep_s is None:
            self._by_period.setdefault(period, set()).add(request_id)
            return
        minute = int(closed_at.timestamp()) // 60
        if minute > self._newest:
            self._newest = minute
            self._forget_before(minute - self.keep_s // 60)
        elif minute < self._newest - self.keep_s // 60:
            return  # closed longer ago than the window reaches: as good as forgotten
        self._by_minute.setdefault(minute, set()).add(request_id)

    def has(self, request_id: str, period: str) -> bool:
        if self.keep_s is None:
            ids = self._by_period.get(period)
            return ids is not None and request_id in ids
        return any(request_id in ids for ids in self._by_minute.values())

    def __len__(self) -> int:
        return sum(map(len, self._by_period.values())) + sum(map(len, self._by_minute.values()))

    def prune(self, before_period: str) -> None:
        """Forget the months before ``before_period`` (month mode; a window forgets on its own)."""
        for period in [p for p in self._by_period if p < before_period]:
            del self._by_period[period]

    def keep_for(self, keep_s: int, now: datetime) -> None:
        """Switch to the window mode; the ids kept per month so far count as closed at ``now`` (a checkpoint
        written before the window existed)."""
        if keep_s < 60:
            raise ValueError(f"closed ids are kept at least a minute, not {keep_s} s")
        if self.keep_s is None:
            carried = set().union(*self._by_period.values()) if self._by_period else set()
            self._by_period = {}
            if carried:
                self._by_minute[int(now.timestamp()) // 60] = carried
                self._newest = max(self._by_minute)
        self.keep_s = keep_s

    def _forget_before(self, minute: int) -> None:
        for old in [m for m in self._by_minute if m < minute]:
            del self._by_minute[old]

    # --- checkpoints ----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The checkpoint's part (canonical: sorted), merged into the ledger's state."""
        if self.keep_s is None:
            return {"closed": {period: sorted(ids) for period, ids in sorted(self._by_period.items())}}
        return {"closed": {}, "closed_keep_s": self.keep_s,
                "closed_by_minute": [[minute, sorted(ids)] for minute, ids in sorted(self._by_minute.items())]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ClosedIds:
        """From ``state``'s keys (a checkpoint of format 1 or 2 has only ``closed``: the month mode)."""
        closed = cls(state.get("closed_keep_s"))
        closed._by_period = {period: set(ids) for period, ids in state["closed"].items()}
        closed._by_minute = {int(minute): set(ids) for minute, ids in state.get("closed_by_minute", ())}
        closed._newest = max(closed._by_minute, default=-1)
        return closed
