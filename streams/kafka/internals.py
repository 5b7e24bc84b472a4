"""Every reach into a private part of faust-streaming, mode-streaming or aiokafka, and the versions it holds for.

The rest of the code uses only these libraries' public API and the helpers
here. What each one relies on:

* patches of the worker's Faust consumer (``apply_patches``, applied by
  ``streams.worker.app.create_app``):
  - ``short_fetch_wait``: the fetch long-poll is ``FETCH_MAX_WAIT_MS``, not the
    driver's hard-coded 1.5 s (``_create_worker_consumer``, aiokafka's
    ``_fetch_max_wait_ms``);
  - ``fetch_only_active``: aiokafka drains only the partitions Faust has
    active, never all of them when none is (``_fetch_records``);
  - ``strict_commits``: a committed offset covers only acknowledged records
    (the consumer's ``_add_gap``, ``_new_offset``, ``_committed_offset``,
    ``_acked``);
  - ``one_task_delivery``: the delivery loop hands each record over in one
    task (the loop's ``wait_first(callback(message), suspend_flow.wait())``,
    ``stop_flow``, mode's ``WaitResults``);
* ``aiokafka_producer``: the aiokafka producer under Faust's (``_ensure_producer``);
* ``cluster_metadata``: a consumer's cluster metadata (``_client``);
* ``committed_offset``: a partition's committed offset as Faust's consumer last learnt it (its seek to the
  committed offsets after a rebalance, or its own commits: ``_committed_offset``);
* ``close_consumer_parts`` / ``drop_producer_sender``: what aiokafka's ``stop``
  skips or has no public call for (``_fetcher``, ``_client``, ``_closed``, ``_sender``);
* ``partition_report``: what Faust and aiokafka know about one partition, to
  explain a stalled table recovery (read only).

Each relies on the exact internals of ``TESTED_VERSIONS``, which
``pyproject.toml`` pins and ``check_versions`` enforces at the start of the
worker and of a distributed gateway pod (``GATEWAY_LIBRARIES``): on any
other version the process refuses to run, because a changed internal
could make it commit past unprocessed events. ``tests/streams`` and
``tests/distributed`` cover every item; the README ("Upgrading dependencies")
says how to move to a new version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from typing import Any

from streams.eventlog import StreamsError

# The versions whose internals the items above were written against and tested on.
TESTED_VERSIONS: dict[str, tuple[str, ...]] = {
    "faust-streaming": ("0.15.3",),
    "mode-streaming": ("0.7.1",),
    "aiokafka": ("0.14.0",),
}

FETCH_MAX_WAIT_MS = 150  # fewer empty polls than shorter waits, no idle-partition stalls of the default 1.5 s


class UntestedVersions(StreamsError):
    """A library whose internals the worker patches is installed at a version it was not tested on."""


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (None: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def untested_versions(installed: Mapping[str, str | None],
                      tested: Mapping[str, tuple[str, ...]] = TESTED_VERSIONS) -> list[str]:
    """One line per library whose installed version is not a tested one, naming both (pure)."""
    return [f"{name} {installed.get(name) or '(not installed)'} is installed; tested: {', '.join(versions)}"
            for name, versions in tested.items() if installed.get(name) not in versions]


def check_versions(version_of: Callable[[str], str | None] = installed_version, *,
                   libraries: Iterable[str] = tuple(TESTED_VERSIONS), who: str = "the worker") -> None:
    """Raise ``UntestedVersions`` unless every one of ``libraries`` (all of ``TESTED_VERSIONS`` by default) is at
    a tested version; ``who`` names the process that relies on them."""
    tested = {name: TESTED_VERSIONS[name] for name in libraries}
    problems = untested_versions({name: version_of(name) for name in tested}, tested)
    if problems:
        raise UntestedVersions(
            f"{who} relies on internals of these libraries and refuses to run on untested versions: "
            + "; ".join(problems)
            + " (install the pinned set with `make install`; to upgrade, see 'Upgrading dependencies' in docs/development.md)")


GATEWAY_LIBRARIES = ("aiokafka",)
"""What a distributed gateway pod reaches inside: its Kafka event log's aiokafka clients (``kafka_clients``)."""


# --- producer and consumer access ----------------------------------------------------------------------------


def aiokafka_producer(app: Any) -> Any:
    """The started aiokafka producer inside a Faust app's producer (records sent straight to it skip Faust's
    per-record ``FutureMessage`` path)."""
    return app.producer._ensure_producer()


async def cluster_metadata(consumer: Any) -> Any:
    """The cluster's metadata, fetched now (a consumer with no subscription has no public call for it)."""
    return await consumer._client.fetch_all_metadata()


async def close_consumer_parts(consumer: Any) -> None:
    """Close a consumer's fetcher and connections: what ``stop()`` skips when it re-raises the cancellation of
    a coordinator task that never ran."""
    if consumer._fetcher is not None:
        await consumer._fetcher.close()
    await consumer._client.close()


async def drop_producer_sender(producer: Any) -> None:
    """Mark a producer closed and cancel its sender task, so nothing it still queues is ever sent (aiokafka has
    no "abort"; marking it closed also silences its unclosed warning). Its connections stay open."""
    producer._closed = True
    sender = getattr(producer, "_sender", None)
    task = getattr(sender, "sender_task", None)
    if task is not None and not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def committed_offset(consumer: Any, tp: Any) -> int | None:
    """The offset the group has committed for ``tp`` (the next to handle), or None while not known."""
    offset = consumer._committed_offset.get(tp)
    return offset if isinstance(offset, int) and offset >= 0 else None


def partition_report(app: Any, tp: Any) -> str:
    """Faust's and aiokafka's view of one partition (active, paused, read offset, aiokafka's position and
    buffer), best effort: for a log line, never for a decision."""
    consumer = app.consumer
    line = (f"active {tp in consumer._active_partitions}, paused {tp in consumer._paused_partitions}, "
            f"read offset {consumer._read_offset.get(tp)}")
    try:
        aio = consumer._thread._consumer
        assignment = aio._subscription.subscription.assignment
        fetcher = aio._fetcher
    except AttributeError:
        return line
    from aiokafka.structs import TopicPartition

    aiotp = TopicPartition(tp.topic, tp.partition)
    state = assignment.state_value(aiotp)
    if state is None:
        return line + ", not in aiokafka's assignment"
    return line + (f", aiokafka: paused {state.paused}, position "
                   f"{state.position if state.has_valid_position else None}, "
                   f"awaiting reset {state.awaiting_reset}, high-water {state.highwater}, "
                   f"last fetch {state.timestamp}, buffered {aiotp in getattr(fetcher, '_records', {})}")


def consumer_positions(app: Any) -> list[tuple[str, int | None, int | None]]:
    """(topic, next offset to read, high-water mark) of each partition assigned to the worker's consumer:
    the offset after Faust's last read (else its committed offset) and aiokafka's cached high-water mark.
    Reads only; safe from the metrics server's thread."""
    consumer = app.consumer
    out = []
    for tp in list(consumer.assignment()):
        read = consumer._read_offset.get(tp)
        try:
            high = consumer.highwater(tp)
        except Exception:  # noqa: BLE001 - not fetched yet, or mid-rebalance: unknown
            high = None
        out.append((tp.topic, read + 1 if read is not None else consumer._committed_offset.get(tp), high))
    return out


# --- patches of the worker's Faust consumer ------------------------------------------------------------------


def short_fetch_wait() -> None:
    """Create the worker consumer with a fetch long-poll of ``FETCH_MAX_WAIT_MS`` (idempotent).

    aiokafka sends one fetch at a time per broker, without the partitions whose records are still buffered;
    with Faust's hard-coded 1.5 s wait, records of those partitions wait for the in-flight poll on the idle
    ones to time out once the agents have drained the buffer."""
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
    """Faust's live set of active partitions, as aiokafka's ``Fetcher.fetched_records`` must see it.

    Faust passes its own set (``Consumer._active_partitions``) to ``fetched_records``, which runs in the
    consumer thread and may wait there; meanwhile a rebalance pauses every partition and the set becomes
    empty. aiokafka reads an empty set as "every partition" (``if partitions and tp not in partitions``), and
    would drain records Faust's delivery loop then drops: for a newly assigned changelog partition its whole
    history, read right after the recovery's seek, so the table recovery would wait forever. This view keeps
    the membership live and is never empty: while nothing is active, nothing is drained."""

    __slots__ = ("tps",)

    def __init__(self, tps: Any) -> None:
        self.tps = tps

    def __contains__(self, tp: object) -> bool:
        return tp in self.tps

    def __bool__(self) -> bool:
        return True


def fetch_only_active() -> None:
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


def strict_commits() -> None:
    """A committed offset covers only records the agents acknowledged, every one of them (idempotent).

    Faust's own bookkeeping commits past unacknowledged records in two ways: a jump in the delivered offsets
    is recorded as a gap (``_add_gap``) that counts as acknowledged once anything above it is (meant for
    compacted and transactional topics), and ``_new_offset`` lets one unacknowledged offset through at the
    head of the acknowledged ones. The worker's topics are neither compacted nor transactional, so their
    offsets are contiguous: no gaps, and a commit only from the committed offset on, through acknowledged
    offsets only. A record an agent dropped and never got again holds its partition's commits back (the lag
    shows it) instead of being skipped."""
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


def one_task_delivery() -> None:
    """Faust's delivery loop hands each record to the agents in one task (idempotent).

    The loop (``Consumer._drain_messages``) delivers with ``wait_first(callback(message),
    suspend_flow.wait())``, so that a rebalance (``stop_flow`` sets ``suspend_flow``) can interrupt a delivery
    blocked on a full agent queue; mode's ``wait_first`` makes four tasks for that. Here the delivery runs in
    one task, awaited directly, and ``stop_flow`` cancels the deliveries in flight, which is what mode's
    ``wait_first`` did to them when ``suspend_flow`` won. Any other ``wait_first``, and one made while the
    flow is already stopped, is mode's."""
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
    """Check the versions, then apply every patch of the worker's Faust consumer (idempotent)."""
    check_versions()
    short_fetch_wait()
    fetch_only_active()
    strict_commits()
    one_task_delivery()
