"""Patches of Faust and aiokafka internals the worker depends on, each measured or needed, each idempotent.

* ``_short_fetch_wait``: the worker consumer's fetch long-poll is 150 ms, not
  Faust's hard-coded 1.5 s (throughput).
* ``LivePartitions`` / ``_fetch_only_active``: aiokafka never drains the
  records of partitions Faust has paused (the recovery stall of issue 4).
* ``_strict_commits``: a committed offset covers only records the agents
  acknowledged, every one of them (no event lost across a kill).
* ``_one_task_delivery``: Faust's delivery loop hands each record to the
  agents in one task, not four (throughput).

All rely on internals (``_create_worker_consumer``, ``_fetch_records``,
the consumer's ``_add_gap``, ``_new_offset`` and ``stop_flow``, and the
delivery loop's ``wait_first(callback(message), suspend_flow.wait())``);
``tests/streams`` and ``tests/distributed`` cover them: run both on a Faust or
aiokafka upgrade. ``apply_patches`` applies them all (``create_app`` does).
"""

from __future__ import annotations

import asyncio
from typing import Any

FETCH_MAX_WAIT_MS = 150  # measured: 10 ms ~4,300 events/s, 50 ms ~4,750, 150 ms ~5,000 (fewer empty polls)


def _short_fetch_wait() -> None:
    """Faust's worker consumer long-polls fetches for up to 1.5 s (``fetch_max_wait_ms=1500``, hard-coded in
    its aiokafka driver). aiokafka sends one fetch at a time per broker, without the partitions whose records
    are still buffered; so once the agents have drained those, new records wait for the in-flight poll on
    the idle partitions to time out: ~1 s stalls with nothing delivered, which held one worker to ~3,000
    request events/s. The worker consumer is created with a short wait instead (idempotent)."""
    from faust.transport.drivers import aiokafka as driver

    original = driver.AIOKafkaConsumerThread._create_worker_consumer
    if getattr(original, "farebox_short_wait", False):
        return

    def create(self, transport):  # type: ignore[no-untyped-def]
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read by aiokafka's Fetcher when the consumer starts
        return consumer

    create.farebox_short_wait = True  # type: ignore[attr-defined]
    driver.AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]


class LivePartitions:
    """Faust's live set of active partitions, as aiokafka's ``Fetcher.fetched_records`` should see it.

    Faust passes its own set (``Consumer._active_partitions``) to ``fetched_records``, which runs in the
    consumer thread and may wait there for up to a second; meanwhile a rebalance pauses every partition
    and the set becomes empty. aiokafka reads an empty set as "every partition" (``if partitions and tp
    not in partitions``), so the waiting call then drains the records of all partitions, and Faust's
    delivery loop drops them (flow stopped, or the partition paused). For a newly assigned changelog
    partition that is its whole history, read right after the recovery's seek: aiokafka's position ends
    at the high-water mark, Faust never delivers a record of it, and its table recovery waits forever
    (issue 4; ``streams.watchdog`` reports it). This view keeps the membership live and is never empty:
    while nothing is active, nothing is drained."""

    __slots__ = ("tps",)

    def __init__(self, tps: Any) -> None:
        self.tps = tps

    def __contains__(self, tp: object) -> bool:
        return tp in self.tps

    def __bool__(self) -> bool:
        return True


def _fetch_only_active() -> None:
    """Give aiokafka's ``fetched_records`` a ``LivePartitions`` view of Faust's active set (idempotent)."""
    from faust.transport.drivers import aiokafka as driver

    original = driver.AIOKafkaConsumerThread._fetch_records
    if getattr(original, "farebox_live_partitions", False):
        return

    async def fetch(self, consumer, active_partitions, timeout=None, max_records=None):  # type: ignore[no-untyped-def]
        return await original(self, consumer, LivePartitions(active_partitions), timeout=timeout,
                              max_records=max_records)

    fetch.farebox_live_partitions = True  # type: ignore[attr-defined]
    driver.AIOKafkaConsumerThread._fetch_records = fetch  # type: ignore[method-assign]


def _strict_commits() -> None:
    """Faust's consumer commits past records no agent acknowledged, in two ways:

    * a jump in the offsets it delivers (a record fetched before a rebalance and delivered after its seek,
      or records its delivery loop dropped) is recorded as a gap (``_add_gap``), and a gap counts as
      acknowledged as soon as anything above it is, the delivered record at its end included; meant for
      compacted and transactional topics, whose offsets have holes;
    * ``_new_offset`` lets one unacknowledged offset through at the head of the acknowledged ones
      (``min(acked) - committed > 1``).

    Either way a worker killed before those records are delivered again loses them: the next one starts
    after them (tests/streams/test_strict_commits.py shows both on Faust's own bookkeeping). The worker's
    topics are neither compacted nor transactional, so their offsets are contiguous: no gaps, and a commit
    only from the committed offset on, through acknowledged offsets only. A record an agent dropped and
    never got again holds its partition's commits back (the lag shows it) instead of being skipped."""
    from faust.transport.drivers import aiokafka as driver

    consumer_class = driver.Consumer
    original = consumer_class._new_offset
    if getattr(original, "farebox_strict", False):
        return

    async def _add_gap(self, tp, offset_from, offset_to):  # type: ignore[no-untyped-def]
        return None

    def _new_offset(self, tp):  # type: ignore[no-untyped-def]
        committed = self._committed_offset.get(tp)
        acked = self._acked.get(tp)
        if committed is not None and acked and min(acked) > committed:
            return None  # the record at the committed offset is not acknowledged yet
        return original(self, tp)

    _new_offset.farebox_strict = True  # type: ignore[attr-defined]
    consumer_class._add_gap = _add_gap  # type: ignore[method-assign]
    consumer_class._new_offset = _new_offset  # type: ignore[method-assign]


def _waits_on(coro: Any, event: asyncio.Event) -> bool:
    """Is ``coro`` a not yet started ``event.wait()``?"""
    frame = getattr(coro, "cr_frame", None)
    return (getattr(coro, "cr_code", None) is asyncio.Event.wait.__code__ and frame is not None
            and frame.f_locals.get("self") is event)


def _one_task_delivery() -> None:
    """Faust's delivery loop (``Consumer._drain_messages``) hands each record to the agents with
    ``wait_first(callback(message), suspend_flow.wait())``, so that a rebalance (``stop_flow`` sets
    ``suspend_flow``) can interrupt a delivery blocked on a full agent queue. mode's ``wait_first`` makes
    four tasks for that (the two, and the service's stopped and crashed waits), waits for the first and
    cancels the rest: 21-30 us a record on this machine, against 3.7 us for one task. Here the delivery
    runs in one task, as before, awaited directly; ``stop_flow`` cancels the deliveries in flight, which is
    what mode's ``wait_first`` did to them when ``suspend_flow`` won. Any other ``wait_first``, and one
    made while the flow is already stopped, is mode's."""
    from faust.transport.drivers import aiokafka as driver
    from mode.services import WaitResults

    consumer_class = driver.Consumer
    original_wait_first, original_stop_flow = consumer_class.wait_first, consumer_class.stop_flow
    if getattr(original_wait_first, "farebox_one_task", False):
        return

    async def wait_first(self, *coros, timeout=None):  # type: ignore[no-untyped-def]
        if timeout is not None or len(coros) != 2 or not asyncio.iscoroutine(coros[0]) \
                or not _waits_on(coros[1], self.suspend_flow) or self.suspend_flow.is_set():
            return await original_wait_first(self, *coros, timeout=timeout)
        coros[1].close()
        delivery = asyncio.ensure_future(coros[0])
        in_flight = self.__dict__.setdefault("_farebox_deliveries", set())
        in_flight.add(delivery)
        delivery.add_done_callback(in_flight.discard)
        try:
            return WaitResults([coros[0]], [await delivery], False)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if delivery.cancelled() and not (current is not None and current.cancelling()):
                return WaitResults([], [], False)  # stop_flow cancelled it: the loop goes on, as with mode's
            raise

    def stop_flow(self):  # type: ignore[no-untyped-def]
        original_stop_flow(self)
        for delivery in list(self.__dict__.get("_farebox_deliveries", ())):
            delivery.cancel()

    wait_first.farebox_one_task = True  # type: ignore[attr-defined]
    consumer_class.wait_first = wait_first  # type: ignore[method-assign]
    consumer_class.stop_flow = stop_flow  # type: ignore[method-assign]


def apply_patches() -> None:
    _short_fetch_wait()
    _fetch_only_active()
    _strict_commits()
    _one_task_delivery()
