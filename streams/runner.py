"""The embedded processor runner: the ledger fold over the SQLite log, in-process.

Two ledgers, one fold:

* the **follower** folds only what it reads back from the log (so it holds
  exactly the durable events up to ``offset``) and is what gets checkpointed;
* the **live** ledger, handed to admission, starts as a copy of the follower
  after rebuild and then applies events as the gateway records them (before
  their append is acknowledged), which keeps admission exact and fast.

The follower is fed by the log's acknowledgements (``acknowledged``), so the
events it folds are the very objects the gateway recorded, in offset order,
with no read-back; a periodic ``catch_up`` read is the safety net, and the way
events another process appended (``farebox rerate --apply``'s corrections)
arrive: ``catch_up`` folds them into the follower and the live ledger both.
The gateway's own events acknowledged past such a hole are already in the
live ledger: ``acknowledged`` notes their offsets and ``catch_up`` folds them
into the follower only. One read back before its acknowledgement arrived is
applied to the live ledger again and changes nothing (the fold is idempotent,
ledger invariant 2: its closed id is kept for ``CLOSED_KEEP_S``, far longer
than that race lasts). Both are the same pure fold over the same events, so
they agree once every append is acknowledged; ``caught_up_equal()`` checks
that in tests.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from ledger.balances import Ledger
from ledger.events import Event
from streams.checkpoints import Checkpointer, CheckpointStore, rebuild
from streams.eventlog import EventLog

log = logging.getLogger("farebox.streams")

# How long the embedded ledgers remember a closed request id (``ledger.closed_ids``): the log is its own
# idempotence and a catch-up does not re-apply what this process recorded (``acknowledged`` notes it), so the
# window only covers a read that overtakes an acknowledgement (milliseconds; the follow interval is 2 s).
CLOSED_KEEP_S = 120


class EmbeddedLedgerRunner:
    def __init__(
        self,
        events: EventLog,
        store: CheckpointStore,
        tz: ZoneInfo,
        *,
        every_events: int = 100_000,
        every_seconds: float = 300.0,
        follow_interval_s: float = 2.0,
        page: int = 10_000,
        closed_keep_s: int = CLOSED_KEEP_S,
    ) -> None:
        self.events = events
        self.store = store
        self.tz = tz
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.follow_interval_s = follow_interval_s
        self.page = page
        self.closed_keep_s = closed_keep_s
        self.follower: Ledger | None = None
        self.offset = 0
        self._own: set[int] = set()  # offsets of our own events acknowledged past a hole: already in the live ledger
        self.checkpointer: Checkpointer | None = None
        self.live: Ledger | None = None

    async def start(self) -> Ledger:
        """Rebuild from the latest checkpoint; returns the live ledger for admission."""
        self.follower, self.offset = await rebuild(self.events, self.store, self.tz, page=self.page,
                                                    closed_keep_s=self.closed_keep_s)
        self.checkpointer = Checkpointer(
            self.store, every_events=self.every_events, every_seconds=self.every_seconds, start_offset=self.offset
        )
        log.info("ledger rebuilt to offset %d (%d open holds)", self.offset, len(self.follower.open_holds()))
        self.live = Ledger.from_bytes(self.follower.to_bytes())
        return self.live

    def acknowledged(self, offset: int, event: Event) -> None:
        """Fold an event the log has just acknowledged (durable; acks arrive in offset order).

        The usual path: no read-back and no decode on the hot path. A duplicate
        append is acknowledged with its old offset and is skipped here. An offset
        past a hole (another process appended to the log: ``farebox rerate
        --apply``) is left to ``catch_up``, which reads the hole and folds in
        offset order; folding past it here would checkpoint an offset beyond an
        event the follower never saw.
        """
        if self.follower is None:
            return
        if offset != self.offset + 1:
            if offset > self.offset:
                self._own.add(offset)  # catch_up folds it into the follower, not again into the live ledger
            return
        self.follower.apply(event)
        self.offset = offset

    async def catch_up(self) -> int:
        """Fold whatever the log holds beyond ``offset`` (a safety net; acks normally leave nothing)."""
        assert self.follower is not None and self.checkpointer is not None
        folded = 0
        while batch := await self.events.read(after=self.offset, limit=self.page):
            for offset, event in batch:
                if offset <= self.offset:  # folded by ``acknowledged`` while we were reading
                    continue
                self.follower.apply(event)
                if offset in self._own:
                    self._own.discard(offset)
                elif self.live is not None:  # what another process appended (or ours, read before its ack)
                    self.live.apply(event)
                self.offset = offset
                folded += 1
            await self.checkpointer.observe(self.offset, self.follower)
        return folded

    async def follow(self) -> None:
        """Runs until cancelled: every ``follow_interval_s``, catch up and checkpoint when due."""
        assert self.follower is not None and self.checkpointer is not None
        while True:
            await asyncio.sleep(self.follow_interval_s)
            try:
                await self.catch_up()
                self.follower.prune_for(datetime.now(timezone.utc))  # same horizon as the live ledger's sweeper
                await self.checkpointer.observe(self.offset, self.follower)
            except Exception:  # keep following; the next round retries from the same offset
                log.exception("ledger follower failed at offset %d", self.offset)

    async def final_checkpoint(self) -> None:
        """At clean shutdown, after the log flushed: fold the rest and checkpoint."""
        await self.events.flush()
        await self.catch_up()
        assert self.follower is not None and self.checkpointer is not None
        if self.offset > self.checkpointer.saved_offset:
            await self.checkpointer.save(self.offset, self.follower)

    def caught_up_equal(self, live: Ledger) -> bool:
        assert self.follower is not None
        return self.follower.to_bytes() == live.to_bytes()
