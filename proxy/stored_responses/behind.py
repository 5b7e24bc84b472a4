"""``WriteBehind``: a ``ResponseStore`` whose writes leave the answer's path, read-your-writes kept.

The Responses API keeps a response before its client can name it, but the answer need not wait for the store
(a SQLite transaction, a Redis round trip): ``put`` here returns at once: the record joins ``pending`` (this process's
unwritten records) and is written by a task of its own. So:

* a read in this process finds a record from the moment ``put`` returns (``pending`` first, then the store);
* a read in another process (the gateway processes of ``--workers``, distributed pods) that misses retries for
  up to ``miss_wait_s`` before answering "absent": the writes take milliseconds, a client's follow-up needs
  its answer first, so a follow-up on another process finds it; an id that really is absent (or another
  team's) answers after that wait;
* a write that fails is logged and counted (``on_failure``), as a refused synchronous write was: the answer,
  already paid for, has gone out; ``close`` waits for the writes still running (shutdown loses none);
* ``delete`` waits for a pending write of the same id first, so a deleted response never comes back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from proxy.stored_responses.port import ResponseStore, StoredResponse

log = logging.getLogger("farebox.proxy")


class WriteBehind:
    def __init__(self, store: ResponseStore, *, miss_wait_s: float = 1.0,
                 on_failure: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.miss_wait_s = miss_wait_s
        self.on_failure = on_failure
        self.pending: dict[str, StoredResponse] = {}
        self.writes: dict[str, asyncio.Future[None]] = {}  # a task, or the batching store's own future

    async def put(self, record: StoredResponse) -> None:
        previous = self.writes.get(record.id)
        self.pending[record.id] = record
        queue = getattr(self.store, "put_nowait", None)
        if previous is None and queue is not None:  # the store batches writes itself: no task of our own
            write: asyncio.Future[None] = queue(record)
            write.add_done_callback(lambda done: self._done(record, done))
            self.writes[record.id] = write
            return
        self.writes[record.id] = asyncio.create_task(self._write(record, previous))

    def _done(self, record: StoredResponse, write: asyncio.Future[None]) -> None:
        if not write.cancelled() and write.exception() is not None:
            log.warning("stored response %s not kept: the store failed", record.id, exc_info=write.exception())
            if self.on_failure is not None:
                self.on_failure("store_failed")
        if self.pending.get(record.id) is record:
            del self.pending[record.id]
            del self.writes[record.id]

    async def _write(self, record: StoredResponse, previous: asyncio.Future[None] | None) -> None:
        try:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await self.store.put(record)
        except Exception:  # noqa: BLE001 - logged and counted; the answer has gone out
            log.warning("stored response %s not kept: the store failed", record.id, exc_info=True)
            if self.on_failure is not None:
                self.on_failure("store_failed")
        finally:
            if self.pending.get(record.id) is record:
                del self.pending[record.id]
                del self.writes[record.id]

    async def get(self, response_id: str, now: float) -> StoredResponse | None:
        kept = self.pending.get(response_id)
        if kept is not None:
            return kept if kept.expires_at > now else None
        found = await self.store.get(response_id, now)
        waited, step = 0.0, 0.05
        while found is None and waited < self.miss_wait_s:  # another process may be writing it right now
            await asyncio.sleep(step)
            waited, step = waited + step, min(step * 2, 0.4)
            found = await self.store.get(response_id, now)
        return found

    async def delete(self, response_id: str) -> bool:
        write = self.writes.get(response_id)
        if write is not None:
            await asyncio.gather(write, return_exceptions=True)
        return await self.store.delete(response_id)

    async def close(self) -> None:
        if self.writes:
            await asyncio.gather(*self.writes.values(), return_exceptions=True)
        await self.store.close()
