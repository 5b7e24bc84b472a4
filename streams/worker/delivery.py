"""How the agents' effects reach Kafka: their batchers, immediate sends, dead letters and flush completions.

Invariants every agent keeps through these:

* events are acknowledged only after their flush's completion (``Batcher``),
  so a committed offset never covers an effect that is not in Kafka;
* a completion waits for the flush's sends before it writes the tables
  (``complete``): a crash in between re-sends entries with the same source
  offsets (skipped by the scopes' high-water marks) or grants and notices with
  the same ids; the other order would lose them;
* a record an agent cannot read goes to the dead-letter topic unchanged, and
  is acknowledged with its batch only once Kafka has the dead letter;
* a flush that cannot be written ends the process (``stop_worker``): memory is
  then ahead of Kafka, and only a restart recovers from the changelogs and
  gets the unacknowledged events again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from ledger.codec import encode
from ledger.events import Event
from streams import dead_letters
from streams.batching import Batcher, Completion
from streams.kafka.clients import ID_HEADER
from streams.kafka.internals import aiokafka_producer, committed_offset
from streams.table_writes import TableWrites
from streams.worker.state import Worker, WorkerState

log = logging.getLogger("farebox.worker")

EXIT_WRITE_FAILED = 70  # EX_SOFTWARE: a batch could not be written; restart to recover


def stop_worker(exc: BaseException) -> None:
    """A batch failed (its write to Kafka, its handling, or a hole no redelivery filled): memory may be
    ahead of Kafka, so end the process as a kill -9 would. Restarted (by its supervisor), the worker
    recovers its tables from their changelogs and gets the unacknowledged events again; the ledger's
    idempotence drops what was already written."""
    log.critical("the worker stops (exit %d): a batch failed and its events stay unacknowledged (%r); "
                 "restart it to recover", EXIT_WRITE_FAILED, exc)
    logging.shutdown()
    os._exit(EXIT_WRITE_FAILED)


def batcher(w: Worker, state: WorkerState, name: str, stream: Any, handle: Callable[[Any], Awaitable[None]],
            flush: Callable[[], Awaitable[Completion]], within_s: float) -> Batcher:
    """The agent's batcher, registered in ``state.batchers`` under ``name`` (paused on a rebalance)."""

    async def rewind(tp: Any, offset: int) -> None:
        # through Faust (``seek_wait``: the seek runs in its consumer thread, and its read offset follows, so
        # the records from ``offset`` on are delivered again instead of dropped as already read)
        try:
            await w.app.consumer.seek_wait({tp: offset})
        except Exception:  # e.g. the partition was revoked meanwhile: the next owner starts at the commit
            log.warning("could not rewind %s to offset %d", tp, offset, exc_info=True)

    b = state.batchers[name] = Batcher(
        stream, handle, flush, max_events=w.cfg.batch_max, within_s=within_s, on_failure=stop_worker,
        stale=lambda event: event.message.generation_id != w.app.consumer_generation_id,
        position=lambda event: (event.message.tp, event.message.offset), rewind=rewind,
        floor=lambda tp: committed_offset(w.app.consumer, tp))
    return b


async def send_event(topic: Any, key: str, event: Event) -> asyncio.Future:
    """Produce now (``force``: not attached to the current event, which Faust would publish only at the
    next commit, after the table writes); the future resolves when Kafka has the record."""
    return await topic.send(key=key.encode(), value=encode(event), headers=[(ID_HEADER, event.id.encode())],
                            force=True)


async def dead_letter(w: Worker, state: WorkerState, event: Any, exc: BaseException) -> None:
    """A record the agent cannot read: to the dead-letter topic, unchanged (``streams.dead_letters``).
    Waits for Kafka's ack: the record's offset is committed with its batch, so its dead letter must be in."""
    m = event.message
    state.stats.dead_letters += 1
    log.error("unreadable record at %s[%d] offset %d, sent to %s: %s", m.topic, m.partition, m.offset,
              w.cfg.dead_letter_topic, dead_letters.reason_of(exc))
    producer = aiokafka_producer(w.app)
    await (await producer.send(w.cfg.dead_letter_topic, key=m.key, value=m.value,
                               headers=dead_letters.headers(m.topic, m.partition, m.offset, exc)))


async def complete(sent: list[asyncio.Future], writes: TableWrites, then: Callable[[], None] | None = None) -> None:
    """A flush's completion: wait until Kafka has ``sent``, then write the tables, then call ``then``."""
    if sent:
        await asyncio.gather(*sent)
    await writes.write()
    if then is not None:
        then()
