"""How the Kafka event log gets back to Kafka: connect, learn recent ids, replay the spool, switch to direct.

``SpoolReplay`` is the connector half of ``streams.kafka.log.KafkaEventLog``
(a mixin over its state). It runs as one task (``_start_connector``) while the
log is not ``direct``: it starts an idempotent producer, indexes the ids of the
last ``dedupe_window`` records of every partition the log writes to, and then
either goes ``direct`` (nothing spooled) or replays the spool in file order
(``replaying``), skipping records whose id is known to be in Kafka.

Invariants (the order argument is in ``streams.kafka.log``):

* once the replay is within ``_CUT_OVER_BYTES`` of the spool's end, new appends
  wait unsent in the outbox (``draining``), so the spool stops growing and they
  go to Kafka after its last record;
* the log switches to ``direct`` only when every spooled record is
  acknowledged, with no await between that check and the switch; then the
  spool is truncated and the outbox sent behind it;
* any failure returns the log to ``spool`` (the outbox spooled, the producer
  abandoned) and the connector tries again after ``reconnect_backoff_s``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from streams.kafka.clients import ID_HEADER, abandon_producer, recent_ids, stop_if_cancelled
from streams.kafka.outbox import SPOOLED, Item, SentIds, unpack
from streams.spool import Spool

log = logging.getLogger("streams.kafka.log")

_SCAN_TIMEOUT_S = 60.0  # reading the last ``dedupe_window`` ids of every partition at connect
_CUT_OVER_BYTES = 256 * 1024  # replay this close to the spool's end: stop spooling, finish, go direct


class SpoolReplay:
    """The connector of ``KafkaEventLog``; the attributes below are the log's, set by its ``__init__``."""

    bootstrap: str
    mode: str
    _client_id: str
    _linger_ms: int
    _spool_after: float
    _backoff: float
    _window: int
    _topics: dict[str, str]
    _read_tp: TopicPartition
    _last_offset: int
    _replay_pos: int
    _spool: Spool
    _index: SentIds
    _producer: AIOKafkaProducer | None
    _connector: asyncio.Task[None] | None
    _outbox: deque[Item]
    _wakeup: asyncio.Event
    _drain_outbox_to_spool: Callable[[], None]  # appends waiting in the outbox go to the spool, in order
    _remember: Callable[[str, int], None]  # where an event id is now (``SentIds.remember``)

    def _start_connector(self) -> None:
        if self._connector is None or self._connector.done():
            self._connector = asyncio.get_running_loop().create_task(self._connect(), name="kafka-log-connect")

    async def _connect(self) -> None:
        """Until ``direct``: connect, learn recent ids, replay the spool, switch over."""
        while True:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, client_id=self._client_id, acks="all",
                enable_idempotence=True, linger_ms=self._linger_ms, max_batch_size=256 * 1024,
                request_timeout_ms=max(int(self._spool_after * 4000), 5000),
            )
            try:
                await self._open(producer)
                self._producer = producer
                if self.mode == "connecting" and self._spool.empty:
                    self.mode = "direct"
                    self._wakeup.set()
                    return
                if self.mode == "connecting":  # leftovers in the spool: new appends queue behind them
                    self.mode = "spool"
                    self._drain_outbox_to_spool()
                self.mode = "replaying"
                await self._replay(producer)
                return
            except asyncio.CancelledError:  # close(): a producer that is not the log's own is dropped here
                if self._producer is not producer:
                    await abandon_producer(producer)
                raise
            except Exception as exc:  # noqa: BLE001 (whatever went wrong, keep spooling and retry)
                level = logging.INFO if isinstance(exc, (KafkaError, OSError, asyncio.TimeoutError)) else logging.ERROR
                log.log(level, "Kafka at %s not reachable (%r); retrying in %ss", self.bootstrap, exc, self._backoff)
                if self._producer is producer:
                    self._producer = None
                if self.mode in ("connecting", "replaying", "draining"):
                    self.mode = "spool"
                    self._drain_outbox_to_spool()
                await abandon_producer(producer)
                stop_if_cancelled()  # a cancel aiokafka turned into an error: close() is waiting for this task
                await asyncio.sleep(self._backoff)

    async def _open(self, producer: AIOKafkaProducer) -> None:
        await asyncio.wait_for(producer.start(), timeout=max(self._spool_after, 1.0))
        await asyncio.wait_for(self._scan_tail(), timeout=_SCAN_TIMEOUT_S)  # appends spool meanwhile

    async def _scan_tail(self) -> None:
        """Index the ids of the last ``dedupe_window`` records of each partition we write to."""
        ids, ends = await recent_ids(self.bootstrap, sorted(set(self._topics.values())), self._window,
                                     client_id=f"{self._client_id}-scan")
        for event_id, offset in ids:
            self._remember(event_id, offset)
        if self._read_tp in ends:
            self._last_offset = max(self._last_offset, ends[self._read_tp])

    async def _replay(self, producer: AIOKafkaProducer) -> None:
        """Send the spool in file order; switch to ``direct`` once all of it is acknowledged."""
        while True:
            records = await asyncio.to_thread(self._spool.read, self._replay_pos)
            if self.mode == "replaying" and self._spool.durable_end - self._replay_pos < _CUT_OVER_BYTES:
                # caught up: hold new appends in the outbox (unsent) so the spool stops growing;
                # they go to Kafka after the spool's last record, so order is kept
                self.mode = "draining"
            if not records:
                if self._spool.pending == 0 and self._replay_pos == self._spool.durable_end:
                    # nothing spooled is unacknowledged and no await separates this check from the switch
                    self.mode = "direct"
                    self._spool.truncate()
                    self._replay_pos = 0
                    self._wakeup.set()
                    log.warning("Kafka at %s is back: spool replayed", self.bootstrap)
                    return
                await asyncio.sleep(0.005)
                continue
            sent = []
            for _, record in records:
                event_id, topic, key, value = unpack(record)
                known = self._index.get(event_id)
                if isinstance(known, int) and known > SPOOLED:
                    continue  # already in Kafka (acked late, or found in the tail scan)
                delivery = await producer.send(topic, value, key, headers=[(ID_HEADER, event_id.encode())])
                sent.append((event_id, delivery))
            if sent:
                deliveries = [d for _, d in sent]
                done, waiting = await asyncio.wait(deliveries, timeout=max(self._spool_after * 4, 5.0))
                failed = [d for d in done if d.exception() is not None]
                if waiting or failed:
                    raise failed[0].exception() if failed else KafkaError("spool replay not acknowledged in time")
                for event_id, delivery in sent:
                    meta = delivery.result()
                    self._remember(event_id, meta.offset + 1)
                    if meta.topic == self._read_tp.topic and meta.partition == self._read_tp.partition:
                        self._last_offset = max(self._last_offset, meta.offset + 1)
            self._replay_pos = records[-1][0]

