"""Kafka adapter of the EventLog port (distributed mode), with a local disk spool.

Routing: request events, hold expiries, re-rating corrections
(``rating.corrected``) and daily reconciliation reports
(``reconcile.reported``) and the archive's published head (``archive.head``) go to the requests topic, lease
events and budget notices to the scope-entries topic, config events to the
config topic (names are constructor arguments). The Kafka key is ``event.key``
(team or scope; config events, which have none, use their id because the
config topic is compacted and compaction needs keys), so one team's or one
scope's events land in one partition, in order. Values are ``ledger.codec``
JSON; the event id also travels in the ``fb-id`` header so consumers can
dedupe without parsing.

Modes (``mode``):

* ``connecting``: starting; appends wait in the outbox (not yet sent).
* ``direct``: appends go to an idempotent aiokafka producer (acks=all, short
  linger); a future resolves with the record's offset once the broker acked it.
* ``spool``: Kafka is unreachable (connect failed, a send failed, or the
  oldest unacknowledged send is older than ``spool_after_s``). Appends go to
  ``streams.spool.Spool`` and resolve with ``SPOOLED`` (0) once fsynced. A
  background task reconnects (``replaying``, ``streams.kafka.replay``) and
  replays the spool in file order while appends keep going to the spool.
  Once the replay is near the end it stops spooling (``draining``: new appends
  wait in the outbox, unsent, for a few milliseconds), sends the rest, and
  only when every spooled record is acknowledged switches to ``direct``,
  truncates the spool and sends the outbox behind it.

Per-key order across an outage: (1) direct sends are ordered per partition by
the idempotent producer, which has one batch in flight per partition; (2) on
fail-over every unacknowledged direct send is spooled first, in append order,
then the outbox, then new appends, and the old producer is abandoned (its
sender task cancelled, connections closed), so nothing still queued in it can
be delivered later and overtake the spool; (3) new appends go to the spool
until it is fully replayed. A produce request already on the wire at
fail-over may still be written, but it precedes its own spooled copy. So the
first occurrence of each event in a partition is in append order. Duplicates
are possible (a batch on the wire when Kafka went away may have been written,
and is replayed): the producer skips spooled
records whose id it has seen acknowledged (this session, or in the last
``dedupe_window`` records per partition read at connect), and consumers dedupe
by event id for the rest.

Deviations from the port (``streams.eventlog``):

* Offsets are per partition (Kafka offset + 1). ``read``/``last_offset`` are
  the read view: partition 0 of ``read_topic``, which must have one partition
  (the contract suite routes all types to one such topic); use
  ``read_partition`` for a multi-partition topic.
* A spooled append resolves with ``SPOOLED`` (0): durable on local disk, not
  yet in Kafka, so it has no offset yet.
* Dedupe by id is exact within this process and for the last
  ``dedupe_window`` records per partition at connect; beyond that, consumers
  dedupe (event ids are deterministic).
* ``close`` flushes the producer; events still in the spool stay there and are
  replayed by the next log opened on the same spool path.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from ledger.codec import decode, encode
from ledger.events import Event
from streams.eventlog import EventLogClosed, EventLogFailed, StreamsError
from streams.kafka.clients import ID_HEADER, abandon_producer, partitions_of, read_range, stop_consumer
from streams.kafka.outbox import SPOOLED, Item, SentIds, unpack
from streams.kafka.replay import SpoolReplay
from streams.spool import Spool

log = logging.getLogger(__name__)


class KafkaUnavailable(StreamsError):
    """Kafka could not be reached for a read (appends never raise this: they spool)."""


class KafkaEventLog(SpoolReplay):
    """Create inside a running event loop; it connects in the background (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        spool_path: str | Path,
        *,
        requests_topic: str = "fb.requests",
        scope_topic: str = "fb.scope-entries",
        config_topic: str = "fb.config",
        read_topic: str | None = None,
        linger_ms: int = 5,
        spool_after_s: float = 2.0,
        reconnect_backoff_s: float = 0.5,
        dedupe_window: int = 10_000,
        index_size: int = 200_000,
        client_id: str = "farebox",
    ) -> None:
        self.bootstrap = bootstrap
        # rating.corrected (re-rating) goes with its request's events: fb.requests, keyed by team
        self._topics = {"request": requests_topic, "hold": requests_topic, "rating": requests_topic,
                        "reconcile": requests_topic, "archive": requests_topic,
                        "lease": scope_topic, "budget": scope_topic, "config": config_topic}
        self._read_tp = TopicPartition(read_topic or requests_topic, 0)
        self._linger_ms = linger_ms
        self._spool_after = spool_after_s
        self._backoff = reconnect_backoff_s
        self._window = dedupe_window
        self._client_id = client_id

        self._spool = Spool.open(spool_path)
        self.mode = "spool" if self._spool.durable_end else "connecting"  # leftovers replay first
        self._replay_pos = 0
        self._producer: AIOKafkaProducer | None = None
        self._reader: AIOKafkaConsumer | None = None
        self._read_partitions: int | None = None
        self._outbox: deque[Item] = deque()
        self._inflight: deque[Item] = deque()  # direct sends, append order; done ones popped lazily
        self._index = SentIds(index_size)
        for _, record in self._spool.read_all():
            self._index.remember(unpack(record)[0], SPOOLED)
        self._pending: set[asyncio.Future[int]] = set()
        self._last_offset = 0
        self._closing = False
        self._closed = False
        self._failure: BaseException | None = None
        self._wakeup = asyncio.Event()
        self._tasks = [asyncio.get_running_loop().create_task(c, name=f"kafka-log-{n}") for n, c in (
            ("pump", self._pump()), ("watchdog", self._watchdog()))]
        self._connector: asyncio.Task[None] | None = None
        self._abandoning: set[asyncio.Task[None]] = set()  # producers being dropped after a fail-over
        self._start_connector()

    # --- the port ---------------------------------------------------------------------

    def append(self, event: Event) -> asyncio.Future[int]:
        if self._failure is not None:
            raise EventLogFailed(f"the Kafka event log failed: {self._failure}") from self._failure
        if self._closing:
            raise EventLogClosed("the Kafka event log is closed")
        topic = self._topics.get(event.type.split(".", 1)[0])
        if topic is None:
            raise StreamsError(f"no topic for event type {event.type!r}")
        key = event.key if event.key is not None else event.id
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        item = Item(event.id, topic, key.encode(), encode(event), future)
        if self.mode in ("spool", "replaying"):
            if not self._dedupe(item):
                self._spool_item(item)
        else:
            self._outbox.append(item)
            self._wakeup.set()
        return future

    async def flush(self) -> None:
        waiting = list(self._pending)
        if waiting:
            done = await asyncio.gather(*waiting, return_exceptions=True)
            for outcome in done:
                if isinstance(outcome, BaseException):
                    raise EventLogFailed(f"the Kafka event log failed: {outcome}") from outcome

    async def read(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Event]]:
        """The read view (partition 0 of ``read_topic``, which must have one partition)."""
        if self._closed:
            raise EventLogClosed("the Kafka event log is closed")
        reader = await self._reader_consumer()
        if self._read_partitions is None:
            self._read_partitions = len(await partitions_of(reader, self._read_tp.topic))
        partitions = self._read_partitions
        if partitions > 1:
            raise StreamsError(f"read() needs a one-partition topic; {self._read_tp.topic} has "
                               f"{partitions}: use read_partition()")
        return await self.read_partition(self._read_tp.topic, 0, after, limit)

    async def read_partition(self, topic: str, partition: int, after: int = 0,
                             limit: int = 1000) -> list[tuple[int, Event]]:
        """Events of one partition with offset > ``after`` (offset = Kafka offset + 1), at most ``limit``."""
        if self._closed:
            raise EventLogClosed("the Kafka event log is closed")
        reader = await self._reader_consumer()
        try:
            return [(offset, decode(value)) for offset, value in
                    await read_range(reader, TopicPartition(topic, partition), after, limit)]
        except KafkaError as exc:
            raise KafkaUnavailable(f"cannot read {topic}[{partition}] from {self.bootstrap}: {exc}") from exc

    async def close(self) -> None:
        """Flush (Kafka, or the spool if Kafka is away), stop; unsent events stay in the spool."""
        if self._closing:
            while not self._closed:
                await asyncio.sleep(0.01)
            return
        self._closing = True
        try:
            await self.flush()
        finally:
            if self._connector is not None:
                self._connector.cancel()
            for task in [*self._tasks, *([self._connector] if self._connector else [])]:
                task.cancel()
            await asyncio.gather(*self._tasks, *([self._connector] if self._connector else []),
                                 return_exceptions=True)
            await asyncio.gather(*self._abandoning, return_exceptions=True)
            if self._producer is not None and self.mode == "direct":
                await self._producer.stop()  # flush saw every send acknowledged: returns at once
            elif self._producer is not None:  # mid-replay: what it still holds is in the spool anyway
                await abandon_producer(self._producer)
            if self._reader is not None:
                await stop_consumer(self._reader)
            await self._spool.close()
            self._closed = True

    @property
    def last_offset(self) -> int:
        """Highest acknowledged offset in the read view (0 before anything is known)."""
        return self._last_offset

    @property
    def spooled_bytes(self) -> int:
        return self._spool.durable_end

    # --- dedupe (streams.kafka.outbox.SentIds) ---------------------------------------------

    def _dedupe(self, item: Item) -> bool:
        """True when the id is known: the item's future then follows the first one's."""
        return self._index.claim(item)

    def _remember(self, event_id: str, offset: int) -> None:
        self._index.remember(event_id, offset)

    # --- direct mode ------------------------------------------------------------------

    async def _pump(self) -> None:
        """Send the outbox in append order while ``direct``; keeps one producer per pass."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._outbox and self.mode == "direct":
                item = self._outbox.popleft()
                if self._dedupe(item):
                    continue
                producer = self._producer
                assert producer is not None
                self._inflight.append(item)  # before the await: a fail-over during it spools the item
                try:
                    delivery = await producer.send(item.topic, item.value, item.key,
                                                   headers=[(ID_HEADER, item.id.encode())])
                except KafkaError as exc:
                    self._fail_over(exc)
                    continue
                delivery.add_done_callback(lambda d, it=item, p=producer: self._on_delivery(it, p, d))

    def _on_delivery(self, item: Item, producer: AIOKafkaProducer, delivery: asyncio.Future) -> None:
        if delivery.cancelled() or delivery.exception() is not None:
            if producer is self._producer:
                self._fail_over(delivery.exception() or KafkaError("send cancelled"))
            return  # an abandoned producer's send: the item was spooled
        meta = delivery.result()
        offset = meta.offset + 1
        self._remember(item.id, offset)
        if meta.topic == self._read_tp.topic and meta.partition == self._read_tp.partition:
            self._last_offset = max(self._last_offset, offset)
        if not item.future.done():
            item.future.set_result(offset)

    async def _watchdog(self) -> None:
        """Fail over when the oldest unacknowledged send (or unsent append) is older than ``spool_after_s``."""
        tick = max(self._spool_after / 4, 0.01)
        while True:
            await asyncio.sleep(tick)
            while self._inflight and self._inflight[0].future.done():
                self._inflight.popleft()
            if self.mode == "connecting" and self._outbox and time.monotonic() - self._outbox[0].since > self._spool_after:
                self.mode = "spool"  # still connecting (or reading recent ids): don't keep appends waiting
                self._drain_outbox_to_spool()
            if self.mode != "direct":
                continue
            oldest = min((q[0].since for q in (self._inflight, self._outbox) if q), default=None)
            if oldest is not None and time.monotonic() - oldest > self._spool_after:
                self._fail_over(KafkaError(f"no acknowledgement within {self._spool_after}s"))

    def _fail_over(self, reason: BaseException) -> None:
        """Switch to the spool: unacknowledged sends first, then the outbox, in append order."""
        if self.mode != "direct":
            return
        log.warning("Kafka at %s unavailable (%s): spooling to %s", self.bootstrap, reason, self._spool.path)
        self.mode = "spool"
        producer, self._producer = self._producer, None
        unacked = [item for item in self._inflight if not item.future.done()]
        self._inflight.clear()
        for item in unacked:
            self._spool_item(item)
        self._drain_outbox_to_spool()
        if producer is not None:
            task = asyncio.get_running_loop().create_task(abandon_producer(producer))
            self._abandoning.add(task)
            task.add_done_callback(self._abandoning.discard)
        self._start_connector()

    # --- spool mode -------------------------------------------------------------------

    def _spool_item(self, item: Item) -> None:
        try:
            written = self._spool.append(item.pack())
        except StreamsError as exc:
            self._failure = exc
            if not item.future.done():
                item.future.set_exception(exc)
            return
        written.add_done_callback(functools.partial(self._on_spooled, item))

    def _on_spooled(self, item: Item, written: asyncio.Future[int]) -> None:
        if item.future.done():  # acknowledged by Kafka after all (a send on the wire at fail-over)
            return
        if written.exception() is not None:
            self._failure = written.exception()
            item.future.set_exception(EventLogFailed(f"cannot spool {item.id}: {written.exception()}"))
        else:
            self._remember(item.id, SPOOLED)
            item.future.set_result(SPOOLED)

    def _drain_outbox_to_spool(self) -> None:
        while self._outbox:
            item = self._outbox.popleft()
            if not self._dedupe(item):
                self._spool_item(item)

    async def _reader_consumer(self) -> AIOKafkaConsumer:
        if self._reader is None:
            reader = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                      client_id=f"{self._client_id}-read", request_timeout_ms=5000)
            try:
                await reader.start()
            except BaseException as exc:
                await stop_consumer(reader)
                if isinstance(exc, KafkaError):
                    raise KafkaUnavailable(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
                raise
            self._reader = reader
        return self._reader

