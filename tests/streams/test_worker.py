"""The Faust worker process on the real Kafka broker and Redis: request-state retention and budget notices.

Request events are produced straight to the cluster's ``requests`` topic
(with a plain producer, so the test can also deliver duplicates), dated in
the past where a test needs an old request. What the worker's tables hold is
read from their changelog topics: the last value of each key, a tombstone
deleting it, which is exactly what the worker itself recovers at start.
Never skipped: the broker and Redis fixtures fail when they cannot start.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import orjson
import pytest
import redis

from farebox.settings import load_settings
from infra.kafka.topics import create_topics, farebox_topics
from infra.redis.server import RedisServer
from ledger.codec import decode, encode
from ledger.leases import ScopeLedger
from ledger.periods import period_of
from ledger.retention import horizon_key
from streams.kafka.clients import ID_HEADER, partitions_of, stop_consumer
from tests import harness
from tests.harness import spawn, stop
from tests.ledger.ledger_builders import admit, settle

pytestmark = pytest.mark.e2e

TEAMS = ("alpha", "beta", "gamma")
HOLD, COST = 10_000, 6_000  # micro-INR per request
RETENTION_S = 600


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer().start()
    yield server
    server.cleanup()


async def _produce(bootstrap: str, topic: str, events) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for event in events:
            await producer.send(topic, encode(event), key=event.key.encode(), headers=[(ID_HEADER, event.id.encode())])
        await producer.flush()
    finally:
        await producer.stop()


async def _read(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of every partition of ``topic``, in offset order per partition."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
        if not tps:  # not created yet (the worker declares its changelogs as it starts)
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: dict[int, list] = {tp.partition: [] for tp in tps}
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                out[tp.partition] += [(r.key, r.value) for r in records]
        return [kv for p in sorted(out) for kv in out[p]]
    finally:
        await stop_consumer(consumer)


def table_view(bootstrap: str, app_id: str, table: str) -> dict[str, dict]:
    """What a worker recovers of ``table``: the last value per key of its changelog, tombstones deleting."""
    view: dict[str, dict] = {}
    for key, value in asyncio.run(_read(bootstrap, f"{app_id}-{table}-changelog")):
        name = orjson.loads(key)
        if value is None:
            view.pop(name, None)
        else:
            view[name] = orjson.loads(value)
    return view


def requests_of(team: str, n: int, at: datetime, tag: str) -> list:
    events = []
    for i in range(n):
        rid = f"{tag}-{team}-{i}"
        events += [admit(rid, {f"team:{team}": HOLD}, at=at, team=team, ttl_s=86_400),
                   settle(rid, {f"team:{team}": COST}, {f"team:{team}": HOLD}, at=at, team=team)]
    return events


def wait_for(check, timeout: float, what: str, worker, log):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what} not reached in {timeout}s (worker exit code {worker.poll()}; last: {last!r})\n"
                         f"worker log:\n{log.read_text(errors='replace')[-6000:]}")


def request_ids(view: dict[str, dict]) -> set[str]:
    return {k for k in view if not k.startswith("\x00")}


def test_worker_forgets_old_request_states_and_sends_each_notice_once_across_a_restart(
        tmp_path, kafka_broker, redis_server):
    bootstrap = kafka_broker.bootstrap
    prefix = f"w{uuid.uuid4().hex[:8]}."
    app_id = f"{prefix}worker"
    asyncio.run(create_topics(bootstrap, farebox_topics(3, prefix=prefix)))

    def mutate(tree: dict) -> None:
        tree["mode"] = "distributed"
        tree["distributed"] = {
            "bootstrap": bootstrap, "redis_url": redis_server.url, "requests_topic": f"{prefix}requests",
            "scope_topic": f"{prefix}scope-entries", "rollups_topic": f"{prefix}rollups",
            "config_topic": f"{prefix}config", "partitions": 3, "worker_id": app_id,
            "worker_data_dir": str(tmp_path / "worker"), "request_retention_s": RETENTION_S,
        }
        tree["teams"] += [{"name": t, "business_unit": "retail"} for t in TEAMS]
        # alpha's soft threshold (80% of 0.15 INR) is crossed by its 20th request; beta's and gamma's never
        tree["budgets"]["scopes"] = [{"scope": "team:alpha", "monthly_limit": "0.15", "soft_pct": 80}] + [
            {"scope": f"team:{t}", "monthly_limit": "1000.00", "soft_pct": 80} for t in TEAMS[1:]]

    config = harness.test_config(tmp_path, 1, 2, mutate)
    tz = ZoneInfo(load_settings(config).snapshot.budgets.timezone)
    wall = datetime.now(timezone.utc).replace(microsecond=0)
    now = wall if period_of(wall - timedelta(hours=2), tz) == period_of(wall, tz) else wall - timedelta(hours=2)
    period = period_of(now, tz)  # every request in one month (the worker's clock never runs ahead of the wall)
    old, older, recent = now - timedelta(hours=2), now - timedelta(minutes=65), now - timedelta(minutes=60)
    # in time order: the clock is per partition, and teams share partitions
    phase1 = [e for at, tag, n in ((old, "old", 10), (older, "older", 5), (recent, "recent", 10))
              for t in TEAMS for e in requests_of(t, n, at, tag)]
    expected = Counter({t: 25 for t in TEAMS})

    def scopes_reach(counts: Counter):  # type: ignore[no-untyped-def]
        def check():  # type: ignore[no-untyped-def]
            view = table_view(bootstrap, app_id, "scope-ledger")
            ledgers = {t: ScopeLedger.from_dict(view[f"team:{t}"]) for t in TEAMS if f"team:{t}" in view}
            got = {t: sum(p.requests for p in ledgers[t].periods.values()) for t in ledgers}
            quiet = all(sum(p.held for p in s.periods.values()) == 0 for s in ledgers.values())
            return ledgers if got == dict(counts) and quiet else False
        return check

    def forgotten(*tags: str):  # type: ignore[no-untyped-def]
        def check():  # type: ignore[no-untyped-def]
            view = table_view(bootstrap, app_id, "requests")
            return view if view and not any(k.startswith(tags) for k in view) else False
        return check

    log = tmp_path / "worker.log"
    worker = spawn(["farebox", "worker", "--config", str(config)], log)
    try:
        asyncio.run(_produce(bootstrap, f"{prefix}requests", phase1))
        wait_for(scopes_reach(expected), 180, "phase 1 folded", worker, log)
        requests = wait_for(forgotten("old-"), 60, "old request states forgotten", worker, log)
        assert {k.split("-")[0] for k in request_ids(requests)} == {"older", "recent"}
        assert all(requests[k]["s"] == "closed" and "src" in requests[k] for k in request_ids(requests))
        assert any(k.startswith(horizon_key("")) for k in requests)

        stopped = stop(worker, timeout=30)  # the restarted worker recovers its tables from the changelogs
        worker = spawn(["farebox", "worker", "--config", str(config)], log)
        phase2 = [admit("old-alpha-3", {"team:alpha": HOLD}, at=old, team="alpha", ttl_s=86_400),  # forgotten
                  admit("older-beta-1", {"team:beta": HOLD}, at=older, team="beta", ttl_s=86_400),  # remembered
                  *requests_of("gamma", 1, recent, "recent"),  # a whole request again
                  *[e for t in TEAMS for e in requests_of(t, 2, now, "now")]]
        asyncio.run(_produce(bootstrap, f"{prefix}requests", phase2))
        expected += Counter({t: 2 for t in TEAMS})
        ledgers = wait_for(scopes_reach(expected), 180, f"phase 2 folded (first worker exit code {stopped})",
                           worker, log)
        for team in TEAMS:  # no duplicate counted, nothing lost
            assert sum(p.settled for p in ledgers[team].periods.values()) == expected[team] * COST, team
        requests = wait_for(forgotten("older-", "recent-"), 60, "older and recent states forgotten", worker, log)
        assert {k.split("-")[0] for k in request_ids(requests)} == {"now"}
        assert "admission of old-alpha-3" in log.read_text()  # refused as stale by the restarted worker

        scope_records = [orjson.loads(v) for _, v in asyncio.run(_read(bootstrap, f"{prefix}scope-entries"))]
        notices = [decode(orjson.dumps(r)) for r in scope_records if r["type"] == "budget.threshold_crossed"]
        assert [(n.id, n.request_id, n.spent_micro) for n in notices] == [
            (f"team:alpha/{period}/soft", "recent-alpha-4", 19 * COST + HOLD)]  # once, across the restart
        assert ledgers["alpha"].soft_crossed == {period}
        rc = redis.Redis.from_url(redis_server.url)
        rows = {t: {k.decode(): v.decode() for k, v in rc.hgetall(f"fb:scope:team:{t}").items()} for t in TEAMS}
        rc.close()
        if period == period_of(wall, tz):  # the projection shows the current month
            assert [rows[t]["state"] for t in TEAMS] == ["hard", "ok", "ok"]  # alpha: 27 x 0.006 > 0.15
    finally:
        stop(worker, timeout=30)
