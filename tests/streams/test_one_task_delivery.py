"""``streams.kafka.internals.one_task_delivery``: Faust's delivery loop hands a record over in one task.

The loop calls ``consumer.wait_first(callback(message), suspend_flow.wait())``.
With the patch the delivery runs in one task, awaited directly; a rebalance
(``stop_flow``) still interrupts one blocked on a full agent queue, and the
loop goes on; errors reach the loop; other waits are mode's.
"""

from __future__ import annotations

import asyncio

import pytest
from faust.transport.drivers import aiokafka as driver

from streams.kafka.internals import one_task_delivery


class Consumer:
    """What the patched methods and mode's ``wait_first`` underneath touch."""

    def __init__(self) -> None:
        self.suspend_flow = asyncio.Event()
        self.can_resume_flow = asyncio.Event()
        self.flow_active = True
        self._stopped = asyncio.Event()
        self._crashed = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.log = None


def wait_first(consumer: Consumer, *coros, timeout=None):  # type: ignore[no-untyped-def]
    one_task_delivery()
    return driver.Consumer.wait_first(consumer, *coros, timeout=timeout)


def stop_flow(consumer: Consumer) -> None:
    one_task_delivery()
    driver.Consumer.stop_flow(consumer)


async def test_a_delivery_runs_in_one_task_and_returns_its_result():
    consumer = Consumer()
    ran_in: list = []

    async def deliver() -> str:
        ran_in.append(asyncio.current_task())
        return "ok"

    result = await wait_first(consumer, deliver(), consumer.suspend_flow.wait())
    assert result.results == ["ok"] and not result.stopped
    assert len(ran_in) == 1 and ran_in[0] is not asyncio.current_task()  # its own task, as with mode's
    assert not consumer.__dict__["_farebox_deliveries"]  # forgotten once done


async def test_a_blocked_delivery_is_cancelled_by_stop_flow_and_the_loop_goes_on():
    consumer = Consumer()
    cancelled: list[bool] = []

    async def deliver() -> None:
        try:
            await asyncio.Event().wait()  # a full agent queue
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    waiting = asyncio.ensure_future(wait_first(consumer, deliver(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    stop_flow(consumer)  # partitions revoked
    result = await asyncio.wait_for(waiting, 1)  # returns, does not raise: the delivery loop goes on
    assert cancelled == [True] and result.results == [] and consumer.suspend_flow.is_set()
    assert not consumer.flow_active


async def test_cancelling_the_loop_itself_still_cancels_it():
    consumer = Consumer()

    async def deliver() -> None:
        await asyncio.Event().wait()

    waiting = asyncio.ensure_future(wait_first(consumer, deliver(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    waiting.cancel()  # the fetcher stopping
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_errors_of_a_delivery_reach_the_loop():
    consumer = Consumer()

    async def fails() -> None:
        raise ValueError("undecodable")

    with pytest.raises(ValueError, match="undecodable"):
        await wait_first(consumer, fails(), consumer.suspend_flow.wait())


async def test_other_waits_and_a_stopped_flow_are_mode_s():
    consumer = Consumer()
    other = asyncio.Event()

    async def quick() -> int:
        return 1

    await wait_first(consumer, quick(), other.wait())  # not suspend_flow
    await wait_first(consumer, quick(), consumer.suspend_flow.wait(), timeout=1.0)  # a timeout
    consumer.suspend_flow.set()
    await wait_first(consumer, quick(), consumer.suspend_flow.wait())  # the flow is stopped already
    assert "_farebox_deliveries" not in consumer.__dict__  # none of them went the one-task way
