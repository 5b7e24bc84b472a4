"""``serve --workers N``'s money path without HTTP: pod wallets over real sockets to the owner's hub.

Each test runs the owner's ``LocalHub`` over a real SQLite log and one or
more gateway-side ``LocalEventLog`` connections (Unix sockets), with the real
``Wallets`` spending the leases the owner's ``LocalProcessor`` grants:

* a hypothesis property over random holds, costs and pods: at every tick and
  at the end, settled + held + leased <= limit; at the end nothing is held or
  leased and settled is exactly what the funded requests were charged;
* a pod that dies with a hold open: the hold is charged in full at its TTL,
  its lease expires, and nothing is held or leased afterwards;
* the owner restarted over the same log folds the same balances;
* bad frames and bad events are refused without harming other appends.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.events import RequestAdmitted, RequestSettled
from ledger.leases import LeasePolicy
from ledger.local_processor import LocalProcessor
from ledger.periods import period_of
from ledger.usage import TokenUsage
from proxy.admission.wallet import WalletPolicy, Wallets
from proxy.errors import GatewayError
from streams.eventlog import EventLogFailed
from streams.local.hub import LocalHub
from streams.local.log import LocalEventLog
from streams.local.wire import frame
from streams.sqlite_log import SqliteEventLog

UTC = ZoneInfo("UTC")
SCOPE = "team:alpha"


def _hub(folder: Path, limit: int, policy: LeasePolicy | None = None) -> LocalHub:
    processor = LocalProcessor(UTC, lambda scope: limit if scope == SCOPE else None, lambda scope: 80,
                               lambda: "INR", policy or LeasePolicy(share=2, last_pct=5))
    return LocalHub(folder / "owner.sock", SqliteEventLog.open(folder / "events.sqlite"), processor,
                    sweep_interval_s=0.05)


def _admitted(rid: str, pod: str, hold: int, leases: dict[str, str], ttl_s: int = 600) -> RequestAdmitted:
    return RequestAdmitted(time=datetime.now(timezone.utc), request_id=rid, team="alpha", key_id="fb-k",
                           business_unit="retail", app="app", run_id=None, alias="chat-default",
                           data_class="internal", est_input_tokens=10, max_output_tokens=10, holds={SCOPE: hold},
                           currency="INR", price_version=1, pod=pod, hold_ttl_s=ttl_s, stream=False, leases=leases)


def _settled(rid: str, charge: int, hold: int) -> RequestSettled:
    return RequestSettled(time=datetime.now(timezone.utc), request_id=rid, team="alpha", final_status=200,
                          attempts=1, deployment="d", usage=TokenUsage(input=1, output=1), cost_micro=charge,
                          currency="INR", cost_by_scope={SCOPE: charge}, hold_released={SCOPE: hold - charge},
                          overrun_micro=0, cache_hit=False, latency_ms=1)


class Pod:
    """A gateway process's money path: its log connection and its wallets."""

    def __init__(self, folder: Path, name: str, **policy: float) -> None:
        self.log = LocalEventLog.open(folder / "owner.sock", name)
        self.wallets = Wallets(name, self.log.append, lambda: datetime.now(timezone.utc),
                               WalletPolicy(**{"lease_wait_s": 0.2, "retry_s": 0.02, **policy}))
        self.log.on_grant = self.wallets.on_grant
        self.name = name

    async def request(self, rid: str, hold: int, charge: int, wait_s: float) -> bool:
        try:
            leases = await self.wallets.admit(rid, [SCOPE], hold, period=period_of(datetime.now(timezone.utc), UTC),
                                              max_wait_s=wait_s)
        except GatewayError:
            return False
        self.log.append(_admitted(rid, self.name, hold, leases))
        await asyncio.sleep(0)
        self.log.append(_settled(rid, charge, hold))
        self.wallets.settle(rid, {SCOPE: charge})
        return True

    async def close(self) -> None:
        self.wallets.close()
        await self.log.close()


async def _folded(hub: LocalHub) -> None:
    """Until the processor has folded everything the log holds (and what that decided)."""
    for _ in range(400):
        await hub.events.flush()
        if hub.processor.offset == hub.events.last_offset:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"processor at {hub.processor.offset}, log at {hub.events.last_offset}")


def _totals(hub: LocalHub):  # type: ignore[no-untyped-def]
    return hub.processor.scope(SCOPE).totals(period_of(datetime.now(timezone.utc), UTC))


request = st.tuples(st.integers(0, 2), st.integers(1_000, 40_000), st.integers(0, 100), st.integers(0, 30))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(20_000, 300_000), requests=st.lists(request, min_size=1, max_size=40))
def test_pods_never_commit_more_than_the_limit_and_settle_exactly(tmp_path_factory, limit, requests):
    folder = tmp_path_factory.mktemp("hub")

    async def scenario() -> None:
        hub = _hub(folder, limit)
        await hub.start()
        pods = [Pod(folder, f"pod-{i}") for i in range(3)]
        broken: list[str] = []

        async def ticker() -> None:
            while True:
                await asyncio.sleep(0.005)
                if (spent := _totals(hub).spent) > limit:
                    broken.append(f"spent {spent} > limit {limit}")

        async def one(i: int, pod: int, hold: int, pct: int, arrive_ms: int) -> tuple[bool, int]:
            await asyncio.sleep(arrive_ms / 1000)
            charge = hold * pct // 100
            return await pods[pod].request(f"r{i}", hold, charge, 0.3), charge

        tick = asyncio.create_task(ticker())
        try:
            results = await asyncio.gather(*(one(i, *r) for i, r in enumerate(requests)))
            for pod in pods:
                await pod.close()
            await _folded(hub)
        finally:
            tick.cancel()
            await hub.close()
        totals = _totals(hub)
        await hub.events.close()
        assert not broken, broken[:3]
        assert (totals.held, totals.leased) == (0, 0)
        assert totals.settled == sum(charge for ok, charge in results if ok) <= limit
        assert totals.requests == sum(ok for ok, _ in results)

    asyncio.run(scenario())


async def test_a_dead_pods_hold_is_charged_at_its_ttl_and_its_lease_expires(tmp_path):
    hub = _hub(tmp_path, 1_000_000, LeasePolicy(share=2, last_pct=5, ttl_s=1, expiry_grace_s=0))
    await hub.start()
    try:
        dead = Pod(tmp_path, "pod-dead", expiry_margin_s=0.1)  # leases of 1 s fund requests
        leases = await dead.wallets.admit("r-dead", [SCOPE], 5_000, period=period_of(datetime.now(timezone.utc), UTC))
        await dead.log.append(_admitted("r-dead", "pod-dead", 5_000, leases, ttl_s=1))
        assert dead.log._connection is not None
        dead.log._connection.abort(ConnectionResetError("killed"))  # killed: no settlement, no lease returned
        for _ in range(200):
            types = [e.type for _, e in await hub.events.read(limit=100)]
            if "hold.expired" in types and "lease.expired" in types:
                break
            await asyncio.sleep(0.05)
        await _folded(hub)
        totals = _totals(hub)
        assert "hold.expired" in types and "lease.expired" in types, types
        assert (totals.settled, totals.held, totals.leased) == (5_000, 0, 0)
    finally:
        await hub.close()
        await hub.events.close()


async def test_the_owner_restarted_folds_the_same_balances(tmp_path):
    hub = _hub(tmp_path, 500_000)
    await hub.start()
    pod = Pod(tmp_path, "pod-a")
    assert all([await pod.request(f"r{i}", 10_000, 7_000, 0.3) for i in range(20)])
    await pod.close()
    await _folded(hub)
    before = _totals(hub)
    await hub.close()
    await hub.events.close()
    again = _hub(tmp_path, 500_000)
    assert await again.rebuild() > 0
    assert _totals(again) == before and before.settled == 20 * 7_000
    await again.events.close()


async def test_bad_frames_and_events_are_refused_and_the_rest_recorded(tmp_path):
    hub = _hub(tmp_path, 500_000)
    await hub.start()
    try:
        _, garbage = await asyncio.open_unix_connection(str(tmp_path / "owner.sock"))
        garbage.write(b"\x00\x00\x00\x05notjs")  # a hello that is not JSON: that connection is closed
        await garbage.drain()
        _, bad = await asyncio.open_unix_connection(str(tmp_path / "owner.sock"))
        bad.write(frame({"t": "hello", "pod": "pod-b"}) + frame({"t": "ev", "n": 1, "e": {"type": "nonsense"}}))
        await bad.drain()
        pod = Pod(tmp_path, "pod-a")
        refused = pod.log._request({"t": "ev", "e": {"type": "request.admitted", "schema": 1}})
        with pytest.raises(EventLogFailed, match="refused"):
            await refused
        assert await pod.request("r1", 10_000, 4_000, 0.3)
        await pod.close()
        await _folded(hub)
        assert [e.type for _, e in await hub.events.read()] == ["lease.requested", "lease.granted",
                                                                 "request.admitted", "request.settled",
                                                                 "lease.returned"]
        garbage.close()
        bad.close()
    finally:
        await hub.close()
        await hub.events.close()
