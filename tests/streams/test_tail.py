from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from stream_events import make_event

from ledger.events import ConfigPublished, LeaseReturned, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from streams.memory_log import MemoryEventLog
from streams.tail import follow, format_event

T = datetime(2026, 10, 3, 10, 15, 2, 123456, tzinfo=timezone.utc)
USAGE = TokenUsage(input=338, cached_input=1536, output=212)


def test_attempt_line_has_the_key_facts():
    event = RequestAttempted(
        time=T, request_id="req-1", team="payments", attempt=1, deployment="b-mid-mumbai",
        provider="openai", account="acct-retail", model="gpt-x", region="ap-south-1", outcome="ok",
        status=200, ttft_ms=412, latency_ms=3100, usage=USAGE, cost_micro=273_082, currency="INR",
        price_version=17, error_code=None,
    )
    line = format_event(42, event)
    assert line == (
        "      42  2026-10-03T10:15:02.123456Z  request.attempted  req-1  #1 b-mid-mumbai ok 200 "
        "in=338 cached=1536 out=212 ₹0.273082 v17 ttft=412ms latency=3100ms"
    )


def test_settled_line_shows_cost_release_and_overrun():
    event = RequestSettled(
        time=T, request_id="req-1", team="payments", final_status=200, attempts=2, deployment="b-mid-mumbai",
        usage=USAGE, cost_micro=273_082, currency="INR", cost_by_scope={"team:payments": 273_082},
        hold_released={"team:payments": 1_000}, overrun_micro=5, cache_hit=False, latency_ms=3100,
    )
    line = format_event(1, event)
    assert "₹0.273082" in line and "released[team:payments=₹0.001000]" in line
    assert "OVERRUN=₹0.000005" in line and "attempts=2" in line


def test_every_type_formats_on_one_line():
    events = [make_event(i) for i in range(3)] + [
        LeaseReturned(time=T, lease_id="L1", scope="team:payments", pod="p", amount_micro=5, expires_at=None),
        ConfigPublished(time=T, version=3, content_hash="sha256:abc"),
    ]
    for offset, event in enumerate(events, 1):
        line = format_event(offset, event)
        assert "\n" not in line and event.type in line
    assert "team:payments" in format_event(4, events[3])
    assert "version=3 hash=sha256:abc" in format_event(5, events[4])
    assert "hold[team:payments=₹0.000002]" in format_event(3, events[2])


async def test_follow_yields_in_order_and_picks_up_new_events():
    log = MemoryEventLog()
    for i in range(3):
        log.append(make_event(i))
    seen: list[int] = []

    async def consume() -> None:
        async for offset, _ in follow(log, after=1, poll_s=0.01):
            seen.append(offset)
            if offset == 5:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    log.append(make_event(3))
    log.append(make_event(4))
    await asyncio.wait_for(task, 2)
    assert seen == [2, 3, 4, 5]


async def test_follow_can_stop_when_drained():
    log = MemoryEventLog()
    for i in range(2500):
        log.append(make_event(i))
    offsets = [o async for o, _ in follow(log, stop=lambda: True)]
    assert offsets == list(range(1, 2501))
