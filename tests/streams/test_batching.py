"""``streams.batching.Batcher``: the worker agents' per-event handling with batched, pipelined flushes.

Completions must run strictly in flush order, events be acknowledged only
after their own completion, and a failed completion leave its events and
every later flush's unacknowledged. ``pause`` (partitions revoked) must leave
nothing handled and unwritten, and nothing handled until ``resume``; an event
from before the rebalance is dropped unacknowledged (Faust delivers it again).
"""

from __future__ import annotations

import asyncio

import pytest

from streams.batching import Batcher


class FakeStream:
    """What ``Batcher`` uses of a Faust stream: ``noack``, ``events`` and ``ack``."""

    def __init__(self, events: list[int]) -> None:
        self.items = events
        self.acked: list[int] = []

    def noack(self) -> "FakeStream":
        return self

    async def events(self):  # type: ignore[no-untyped-def]
        for item in self.items:
            await asyncio.sleep(0)
            yield item

    async def ack(self, event: int) -> None:
        self.acked.append(event)


def run_batcher(fail_at: int | None = None) -> tuple[FakeStream, list[str], BaseException | None]:
    log: list[str] = []
    stream = FakeStream(list(range(12)))
    batch: list[int] = []
    flushes = 0

    async def handle(event: int) -> None:
        batch.append(event)

    async def flush():  # type: ignore[no-untyped-def]
        nonlocal flushes
        n, events = flushes, list(batch)
        flushes += 1
        batch.clear()
        log.append(f"flush {n}")

        async def complete() -> None:
            await asyncio.sleep(0.02 if n % 2 == 0 else 0.001)  # an earlier completion may be slower
            if n == fail_at:
                raise RuntimeError("kafka down")
            assert not set(events) & set(stream.acked)
            log.append(f"done {n}")
        return complete()

    async def main() -> BaseException | None:
        batcher = Batcher(stream, handle, flush, max_events=3, within_s=10.0)
        try:
            await batcher.run()
        except RuntimeError as exc:
            return exc
        return batcher.failed

    return stream, log, asyncio.run(main())


def test_completions_run_in_flush_order_and_ack_after() -> None:
    stream, log, failed = run_batcher()
    assert failed is None
    assert [line for line in log if line.startswith("done")] == [f"done {n}" for n in range(4)]
    assert stream.acked == list(range(12))


def test_a_failed_completion_leaves_it_and_later_flushes_unacked() -> None:
    stream, log, failed = run_batcher(fail_at=1)
    assert isinstance(failed, RuntimeError)
    assert stream.acked == [0, 1, 2]
    assert "done 2" not in log and "done 3" not in log


async def test_a_failed_flush_reports_once_to_on_failure():
    """The worker passes ``on_failure`` = stop the process (``streams.worker.delivery.stop_worker``)."""
    class Stream:
        def __init__(self, n: int) -> None:
            self.n, self.acked = n, []

        def noack(self):  # type: ignore[no-untyped-def]
            return self

        async def events(self):  # type: ignore[no-untyped-def]
            for i in range(self.n):
                yield i
                await asyncio.sleep(0)

        async def ack(self, event) -> None:  # type: ignore[no-untyped-def]
            self.acked.append(event)

    failures: list[BaseException] = []

    async def handle(event) -> None:  # type: ignore[no-untyped-def]
        return None

    async def flush():  # type: ignore[no-untyped-def]
        async def completion() -> None:
            raise RuntimeError("Kafka refused the batch")
        return completion()

    stream = Stream(10)
    batcher = Batcher(stream, handle, flush, max_events=3, within_s=10, on_failure=failures.append)
    with pytest.raises(RuntimeError):
        await batcher.run()
    assert len(failures) == 1 and str(failures[0]) == "Kafka refused the batch" and stream.acked == []


class GatedStream:
    """Events 0..n-1 (or ``items``), each once its gate opens (``release``): the test decides what arrives when."""

    def __init__(self, n: int, items: list | None = None) -> None:
        self.items = items if items is not None else list(range(n))
        self.acked: list = []
        self.released = asyncio.Semaphore(0)

    def noack(self) -> "GatedStream":
        return self

    def release(self, k: int = 1) -> None:
        for _ in range(k):
            self.released.release()

    async def events(self):  # type: ignore[no-untyped-def]
        for item in self.items:
            await self.released.acquire()
            yield item

    async def ack(self, event) -> None:  # type: ignore[no-untyped-def]
        self.acked.append(event)


async def test_pause_writes_what_was_handled_and_handles_nothing_until_resume():
    stream = GatedStream(7)
    handled: list[int] = []
    written: list[list[int]] = []
    batch: list[int] = []

    async def handle(event: int) -> None:
        handled.append(event)
        batch.append(event)

    async def flush():  # type: ignore[no-untyped-def]
        events = list(batch)
        batch.clear()

        async def complete() -> None:
            await asyncio.sleep(0.02)  # Kafka's round trip: pause must wait for it
            written.append(events)
        return complete()

    generation = 1
    batcher = Batcher(stream, handle, flush, max_events=100, within_s=60.0,
                      stale=lambda event: event < 4 and generation == 2)  # 0-3 were delivered in generation 1
    task = asyncio.create_task(batcher.run())
    stream.release(2)
    await asyncio.sleep(0.01)
    assert handled == [0, 1] and written == []
    await batcher.pause()  # partitions revoked: 0 and 1 flushed, written and acknowledged before it returns
    assert written == [[0, 1]] and stream.acked == [0, 1]
    stream.release(1)  # event 2 reaches the agent during the rebalance: dropped at once (the stream keeps
    await asyncio.sleep(0.01)  # draining: Faust's recovery reads changelogs through the same delivery loop)
    assert handled == [0, 1] and batcher.dropped == 1
    generation = 2
    batcher.resume()
    stream.release(4)
    await asyncio.sleep(0.01)
    assert handled == [0, 1, 4, 5, 6]  # 3 is from generation 1: dropped too
    assert batcher.dropped == 2 and 2 not in stream.acked and 3 not in stream.acked  # Faust delivers them again
    await batcher.pause()
    assert written == [[0, 1], [4, 5, 6]] and stream.acked == [0, 1, 4, 5, 6]
    await task


async def test_pause_with_nothing_pending_returns_at_once_and_the_ticker_waits():
    stream = GatedStream(2)  # the second is never released: the stream stays open, as Faust's does
    flushes = 0

    async def handle(event: int) -> None:
        return None

    async def flush():  # type: ignore[no-untyped-def]
        nonlocal flushes
        flushes += 1
        return None

    batcher = Batcher(stream, handle, flush, max_events=100, within_s=0.02)
    task = asyncio.create_task(batcher.run())
    await asyncio.wait_for(batcher.pause(), 1.0)
    assert flushes == 0
    batcher.resume()
    stream.release(1)
    await asyncio.sleep(0.1)  # flushed by the ticker within ``within_s``
    assert flushes == 1 and stream.acked == [0]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def positioned(stream: GatedStream) -> tuple[Batcher, list]:
    """A Batcher over (partition, offset) events that records what it handles and flushes nothing."""
    handled: list[tuple[str, int]] = []

    async def handle(event: tuple[str, int]) -> None:
        handled.append(event)

    async def flush():  # type: ignore[no-untyped-def]
        return None

    return Batcher(stream, handle, flush, max_events=100, within_s=60.0, position=lambda event: event), handled


async def test_each_partition_is_handled_in_offset_order_without_holes():
    """Around a rebalance: 3 and 4 arrive while paused (dropped), 5 and 6 arrive after ``resume`` but before
    Faust's seek (past a hole: dropped), then the seek delivers 2..6 again. The ledger's high-water idempotence
    needs 3 and 4 handled before 5 and 6; 2 is handled again (a redelivery: the ledger drops it)."""
    order = [("p0", 0), ("p0", 1), ("p1", 0), ("p0", 2), "pause", ("p0", 3), ("p0", 4), "resume",
             ("p0", 5), ("p0", 6), ("p1", 1), ("p0", 2), ("p0", 3), ("p0", 4), ("p0", 5), ("p0", 6)]
    stream = GatedStream(0, [step for step in order if isinstance(step, tuple)])
    batcher, handled = positioned(stream)
    task = asyncio.create_task(batcher.run())
    for step in order:
        if step == "pause":
            await batcher.pause()
        elif step == "resume":
            batcher.keep({"p0", "p1"})
            batcher.resume()
        else:
            stream.release(1)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    assert handled == [("p0", 0), ("p0", 1), ("p1", 0), ("p0", 2), ("p1", 1),
                       ("p0", 2), ("p0", 3), ("p0", 4), ("p0", 5), ("p0", 6)]
    assert (batcher.dropped, batcher.holes) == (2, 2)
    batcher.keep({"p1"})  # p0 moved to another worker: its next delivery starts wherever that one committed
    assert batcher.last == {"p1": 1}
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_hole_no_seek_fills_is_a_failure():
    """Records gone (retention while the worker was behind): stop, so a restart starts from the committed offset."""
    items = [("p0", 0), ("p0", 1), ("p0", 7), ("p0", 8)]

    class Stream(GatedStream):
        async def events(self):  # type: ignore[no-untyped-def]
            for item in items:
                await asyncio.sleep(0.03)
                yield item

    failures: list[BaseException] = []

    async def handle(event) -> None:  # type: ignore[no-untyped-def]
        return None

    async def flush():  # type: ignore[no-untyped-def]
        return None

    batcher = Batcher(Stream(0), handle, flush, max_events=100, within_s=60.0, position=lambda event: event,
                      hole_patience_s=0.02, on_failure=failures.append)
    with pytest.raises(RuntimeError, match="offset 8 follows 1"):
        await batcher.run()
    assert len(failures) == 1 and batcher.holes == 2


async def test_a_partition_whose_first_events_were_dropped_starts_at_them():
    """A newly assigned partition: 10 and 11 arrive while the agent is paused (Faust delivers during recovery),
    12 after ``resume`` but before the seek; the seek then delivers 10.. again. 12 must wait for 10 and 11."""
    stream = GatedStream(0, [("p2", 10), ("p2", 11), ("p2", 12), ("p2", 10), ("p2", 11), ("p2", 12)])
    batcher, handled = positioned(stream)
    task = asyncio.create_task(batcher.run())
    await batcher.pause()
    stream.release(2)
    await asyncio.sleep(0.01)
    batcher.keep({"p2"})
    batcher.resume()
    stream.release(4)
    await asyncio.sleep(0.01)
    assert handled == [("p2", 10), ("p2", 11), ("p2", 12)]
    assert (batcher.dropped, batcher.holes) == (2, 1)
    await task


async def test_a_new_partitions_first_event_past_its_committed_offset_is_past_a_hole():
    """A newly assigned partition whose committed offset is 20: Faust skipped 20 and 21 (read before the
    rebalance, dropped as already read after it) and delivers 22 first. 22 must wait for a rewind to 20, else
    20 and 21 are never handled and the partition's commits stay behind them for good. A partition with no
    committed offset yet (None) accepts its first event as before; one at or below its commit is handled."""
    rewinds: list[tuple[str, int]] = []

    class Consumer(GatedStream):
        async def events(self):  # type: ignore[no-untyped-def]
            for item in [("p3", 22), ("p3", 23), ("p4", 5), ("p5", 7)]:
                yield item
            await asyncio.sleep(0)
            partition, offset = rewinds[-1]
            for n in range(offset, 24):
                yield (partition, n)
            await asyncio.Event().wait()

    async def rewind(partition: str, offset: int) -> None:
        rewinds.append((partition, offset))

    batcher, handled = positioned(Consumer(0))
    batcher.rewind, batcher.rewind_every_s = rewind, 60.0
    batcher.floor = {"p3": 20, "p4": None, "p5": 9}.get
    task = asyncio.create_task(batcher.run())
    await asyncio.sleep(0.05)
    assert rewinds == [("p3", 20)]
    assert handled == [("p4", 5), ("p5", 7)] + [("p3", n) for n in range(20, 24)]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_hole_is_rewound_to_its_first_missing_offset():
    """Faust's own seek does not come (a record fetched before the rebalance moved its read offset past the hole,
    so it would drop the redelivery as read): the batcher asks the consumer to deliver from the first missing
    offset, once per ``rewind_every_s`` while the hole stays, and the partition goes on in order from there."""
    rewinds: list[tuple[str, int]] = []

    class Consumer(GatedStream):
        async def events(self):  # type: ignore[no-untyped-def]
            for item in [("p0", 0), ("p0", 1), ("p0", 5), ("p0", 6)]:  # 2..4 skipped
                yield item
            if rewinds:  # nothing more comes unless the batcher rewinds
                partition, offset = rewinds[-1]
                for item in [(partition, n) for n in range(offset, 8)]:
                    yield item
            await asyncio.Event().wait()  # the stream stays open, as Faust's does

    async def rewind(partition: str, offset: int) -> None:
        rewinds.append((partition, offset))

    batcher, handled = positioned(Consumer(0))
    batcher.rewind, batcher.rewind_every_s = rewind, 60.0
    task = asyncio.create_task(batcher.run())
    await asyncio.sleep(0.05)
    assert rewinds == [("p0", 2)]  # at the first event past the hole; not again for 6 (within rewind_every_s)
    assert handled == [("p0", offset) for offset in range(8)]
    assert (batcher.holes, batcher.rewinds) == (2, 1) and batcher.rewound_at == {}
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_hole_is_rewound_again_when_nothing_more_arrives():
    """The first rewind is lost (a record still being delivered from before it moved Faust's read offset past the
    hole again, so Faust drops the redelivery as read) and nothing arrives past the hole after it: the ticker
    rewinds again while the hole stays, so the partition's last events are handled (and then committed) without
    waiting for traffic that may never come."""
    rewinds: list[tuple[str, int]] = []
    second = asyncio.Event()

    class Consumer(GatedStream):
        async def events(self):  # type: ignore[no-untyped-def]
            for item in [("p0", 0), ("p0", 1), ("p0", 5), ("p0", 6)]:  # 2..4 skipped; 6 is the partition's last
                yield item
            await second.wait()  # the first rewind delivers nothing
            partition, offset = rewinds[-1]
            for item in [(partition, n) for n in range(offset, 7)]:
                yield item
            await asyncio.Event().wait()  # the stream stays open, as Faust's does

    async def rewind(partition: str, offset: int) -> None:
        rewinds.append((partition, offset))
        if len(rewinds) == 2:
            second.set()

    batcher, handled = positioned(Consumer(0))
    batcher.rewind, batcher.rewind_every_s, batcher.within_s = rewind, 0.01, 0.01
    task = asyncio.create_task(batcher.run())
    await asyncio.wait_for(second.wait(), 5.0)

    async def all_handled() -> None:
        while len(handled) < 7:
            await asyncio.sleep(0.005)
    await asyncio.wait_for(all_handled(), 5.0)
    assert rewinds == [("p0", 2), ("p0", 2)]
    assert handled == [("p0", offset) for offset in range(7)]
    assert batcher.hole_since == {} and batcher.rewound_at == {}
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_hole_that_stays_with_nothing_more_arriving_is_a_failure():
    """No redelivery ever fills the hole and no record arrives after the one past it: still a failure, reported by
    the ticker once ``hole_patience_s`` has passed, so the worker restarts from its committed offset."""
    failures: list[BaseException] = []
    failed = asyncio.Event()

    class Consumer(GatedStream):
        async def events(self):  # type: ignore[no-untyped-def]
            for item in [("p0", 0), ("p0", 1), ("p0", 7)]:
                yield item
            await asyncio.Event().wait()

    def on_failure(exc: BaseException) -> None:
        failures.append(exc)
        failed.set()

    batcher, handled = positioned(Consumer(0))
    batcher.within_s, batcher.hole_patience_s, batcher.on_failure = 0.01, 0.05, on_failure
    task = asyncio.create_task(batcher.run())
    await asyncio.wait_for(failed.wait(), 5.0)
    assert len(failures) == 1 and "offset 2 is still missing" in str(failures[0])
    assert handled == [("p0", 0), ("p0", 1)] and batcher.holes == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
