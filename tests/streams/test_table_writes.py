"""``streams.table_writes`` and ``streams.batching`` without a broker: codec parity and flush order.

``TableWrites`` serializes changelog records itself (orjson) instead of going
through ``Table.send_changelog``; Faust's recovery reads them with the
table's changelog codec, so the bytes must be exactly what that codec makes
(checked here against ``changelog_topic.prepare_key`` / ``prepare_value``,
for the shapes the worker stores). That recovery really reads them back is
proved end to end by ``tests/distributed/test_worker_restart.py``.

``Batcher`` pipelines flushes: completions must run strictly in flush order,
events be acknowledged only after their own completion, and a failed
completion leave its events and every later flush's unacknowledged.
"""

from __future__ import annotations

import asyncio

import faust
import pytest

from streams.batching import Batcher
from streams.table_writes import PartitionView, TableWrites

VALUES = [
    {"s": "open", "period": "2026-11", "holds": {"team:alpha": 12_000, "key:k1": 12_000}, "leases": {"team:alpha": "l-1"},
     "team": "alpha", "key": "k1", "alias": "gpt-x", "currency": "INR", "at": "2026-11-29T10:00:00.123456+00:00",
     "ttl": 300, "ttft": [[1, 240]], "src": "2"},
    {"s": "closed", "at": "2026-11-29T10:00:00+00:00", "src": "0"},
    {"requests": 3, "tokens_in": 1200, "cost": 5_400_000, "note": "é ü ☃"},
    [None, {"requests": 1}],
]


@pytest.fixture()
def app() -> faust.App:
    return faust.App("table-writes-test", broker="kafka://127.0.0.1:1", store="memory://")


def test_records_are_the_changelog_codecs_bytes(app: faust.App) -> None:
    table = app.Table("requests", default=None, partitions=3)
    topic = table.changelog_topic
    writes = TableWrites(app)
    for i, value in enumerate(VALUES):
        writes.put(table, i % 3, f"req-{i}", value)
    writes.delete(table, 1, "req-1")
    writes.delete(table, 1, "absent")  # nothing: not in the table
    name = topic.get_topic_name()
    assert sorted(writes.records) == [(name, 0), (name, 1), (name, 2)]
    expected: dict[int, list] = {0: [], 1: [], 2: []}
    for i, value in enumerate(VALUES):
        key, _ = topic.prepare_key(f"req-{i}", table.key_serializer, None, {})
        raw, _ = topic.prepare_value(value, table.value_serializer, None, {})
        expected[i % 3].append((key, raw))
    expected[1].append((topic.prepare_key("req-1", table.key_serializer, None, {})[0], None))
    for partition, records in expected.items():
        assert writes.records[(name, partition)] == records
    assert len(writes) == 5
    assert dict(table.data) == {"req-0": VALUES[0], "req-2": VALUES[2], "req-3": VALUES[3]}


def test_partition_view_writes_to_its_partition(app: faust.App) -> None:
    table = app.Table("scope-ledger", default=None, partitions=3)
    writes = TableWrites(app)
    view = PartitionView(writes, table, 2)
    view["a"] = {"x": 1}
    assert view["a"] == {"x": 1} and len(view) == 1 and list(view) == ["a"]
    del view["a"]
    with pytest.raises(KeyError):
        del view["a"]
    name = table.changelog_topic.get_topic_name()
    assert writes.records == {(name, 2): [(b'"a"', b'{"x":1}'), (b'"a"', None)]}


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
    """The worker passes ``on_failure`` = stop the process (``streams.agents.stop_worker``)."""
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
