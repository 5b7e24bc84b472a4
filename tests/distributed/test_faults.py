"""Distributed mode under faults: a pod killed mid-stream, Kafka stopped under load.

Real processes as in ``test_cluster``: the session's Kafka broker (Maven jars),
a Redis per cluster, a Faust worker, 3 gateway pods and the simulator. Every
test ends on money facts counted from the events in Kafka (first occurrence
of each event id) and compared with the worker's Redis projection:

* ``test_killed_pod``: SIGKILL a pod with long streams open; the other pods
  keep serving; the worker charges the dead pod's holds in full when their TTL
  passes (``hold.expired``) and closes its leases (``lease.expired``); the pod
  comes back under the same id, replays its spool, and nothing is doubled.
* ``test_kafka_outage``: the broker stopped for ``FB_KAFKA_OUTAGE_S`` (30 s)
  under open-loop traffic: every request succeeds on the leases the pods hold,
  the spooled events arrive afterwards, none lost or doubled, replay equals live;
  one pod is SIGKILLed mid-outage (taken out of the traffic first) and its
  spool is replayed by its restart under the same id.

Short TTLs (``server.hold_ttl_s``, ``distributed.lease_ttl_s`` /
``lease_expiry_grace_s``) keep the waits to seconds; the outage test has its
own cluster whose leases outlive the outage.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from infra.redis.server import RedisServer
from ledger.codec import decode
from ledger.events import Event
from ledger.leases import ENTRIES_TYPE, ENTRY_TYPE, ScopeEntry, entries_of
from streams.dead_letters import READ_ERRORS
from streams.kafka.outbox import unpack
from streams.spool import scan
from tests.distributed.cluster import TEAMS, Cluster, running_cluster, wait_until
from tests.harness import ROOT
from tests.infra.kafka.support import read_records, session_broker

pytestmark = pytest.mark.e2e

OUTAGE_S = float(os.environ.get("FB_KAFKA_OUTAGE_S", "30"))
HOLD_TTL_S = 10
FAST_SIM = {"ttft_ms": 20, "tokens_per_s": 2000, "output_tokens": 24}
SLOW_STREAM = {"x-sim-tokens-per-s": "4", "x-sim-output-tokens": "200"}  # ~50 s: still open when the pod dies


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_ttl_cluster(tmp_path_factory):
    """Holds expire after 10 s, leases 8 s (+2 s grace): a dead pod's money comes back within seconds."""
    server = RedisServer().start()
    try:
        with running_cluster(tmp_path_factory.mktemp("faults"), session_broker().bootstrap, server.url,
                             limits={"alpha": "20.00", "beta": "100000.00", "gamma": "100000.00"},
                             lease={"lease_ttl_s": 8, "lease_expiry_grace_s": 2, "lease_last_pct": 5},
                             server={"hold_ttl_s": HOLD_TTL_S}, sim_defaults=FAST_SIM) as cluster:
            yield cluster
    finally:
        server.cleanup()


# --- helpers ------------------------------------------------------------------------------


def _body(i: int, stream: bool = True, max_tokens: int = 40) -> dict:
    body = {"model": "chat-default", "messages": [{"role": "user", "content": f"hello {i}"}],
            "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def _one(client: httpx.AsyncClient, cluster: Cluster, pod: int, team: str, i: int) -> tuple[int, str]:
    """One streamed request read to the end: (status, request id)."""
    async with client.stream("POST", cluster.pod_urls[pod] + "/v1/chat/completions", json=_body(i),
                             headers={"Authorization": f"Bearer {cluster.keys[team]}"}) as resp:
        async for _ in resp.aiter_bytes():
            pass
        return resp.status_code, resp.headers.get("x-request-id", "")


async def _burst(cluster: Cluster, pods: list[int], n: int) -> list[tuple[int, str, str]]:
    """``n`` concurrent requests spread over ``pods`` and the three teams: [(team, status, request id)]."""
    async with httpx.AsyncClient(timeout=60) as client:
        async def one(i: int) -> tuple[str, int, str]:
            team = TEAMS[(i // len(pods)) % 3]
            status, rid = await _one(client, cluster, pods[i % len(pods)], team, i)
            return team, status, rid
        return list(await asyncio.gather(*(one(i) for i in range(n))))


def _fire(cluster: Cluster, n: int, pods: list[int] | None = None) -> list[tuple[str, int, str]]:
    out = asyncio.run(_burst(cluster, pods or list(range(len(cluster.pods))), n))
    assert all(status == 200 for _, status, _ in out), Counter((t, s) for t, s, _ in out)
    return out


async def _values(bootstrap: str, topic: str) -> list[bytes]:
    """Every record value of ``topic``, by partition and offset."""
    return [value for *_, value in await read_records(bootstrap, topic)]


def _request_events(cluster: Cluster) -> list[Event]:
    """The request events in Kafka, by partition and offset; records that are not events are left out, as the
    worker leaves them (it sends them to its dead-letter topic: tests/distributed/test_dead_letters.py)."""
    events = []
    for value in asyncio.run(_values(cluster.bootstrap, cluster.requests_topic)):
        try:
            events.append(decode(value))
        except READ_ERRORS:
            continue
    return events


def _lease_events(cluster: Cluster) -> list[dict]:
    """The lease traffic on the scope topic (it also carries the splitter's scope entries)."""
    values = asyncio.run(_values(cluster.bootstrap, f"{cluster.prefix}scope-entries"))
    return [record for value in values if (record := orjson.loads(value))["type"].startswith("lease.")]


def _first(events: list[Event]) -> dict[str, Event]:
    first: dict[str, Event] = {}
    for e in events:
        first.setdefault(e.id, e)
    return first


def _closes(events: list[Event]) -> dict[str, Event]:
    """Each request's first close (settled or expired) in partition order: the one the ledger applies.

    A later close of the same request changes nothing (``ledger.splitting``). The worker can write one: its
    sweeper may expire a request (TTL passed, pod presumed dead) whose pod settles it afterwards. It no longer
    does so for a settlement already in Kafka but not yet read (``test_worker_restart`` asserts that).
    """
    closes: dict[str, Event] = {}
    for e in events:
        if e.type in ("request.settled", "hold.expired"):
            closes.setdefault(e.request_id, e)
    return closes


def _expected(events: list[Event], team: str) -> dict[str, int]:
    """What the ledger must say for a team, from the events (each event id once, each request closed once)."""
    scope = f"team:{team}"
    settled = sum(e.cost_by_scope.get(scope, 0) if e.type == "request.settled" else e.charged.get(scope, 0)
                  for e in _closes(events).values())
    requests = sum(1 for e in _first(events).values() if e.type == "request.admitted" and scope in e.holds)
    return {"settled": settled, "requests": requests}


def _rows(rc: redis.Redis) -> dict[str, dict[str, str]]:
    return {t: {k.decode(): v.decode() for k, v in rc.hgetall(f"fb:scope:team:{t}").items()} for t in TEAMS}


def _wait_quiet(rc: redis.Redis, timeout: float = 60, leased: bool = True) -> dict[str, dict[str, str]]:
    """Projection rows once every hold is closed (and, with ``leased``, every lease returned or expired)."""
    def quiet():
        rows = _rows(rc)
        ok = all(r and r["held"] == "0" and (not leased or r["leased"] == "0") for r in rows.values())
        return rows if ok else False
    return wait_until(quiet, timeout, what="every hold closed" + (" and every lease back" if leased else ""))


def _wait_ledger_matches(cluster: Cluster, rc: redis.Redis, timeout: float = 60) -> tuple[list[Event], dict]:
    """Wait until the projection equals the sums over the events in Kafka; returns both (or fails showing both)."""
    def matches():
        events = _request_events(cluster)
        rows = _rows(rc)
        want = {t: _expected(events, t) for t in TEAMS}
        got = {t: {"settled": int(rows[t].get("settled", -1)), "requests": int(rows[t].get("requests", -1))}
               for t in TEAMS}
        held = all(rows[t].get("held") == "0" for t in TEAMS)
        return (events, rows) if held and got == want else False
    try:
        return wait_until(matches, timeout, interval=0.5, what="projection equal to the events")
    except AssertionError:
        events, rows = _request_events(cluster), _rows(rc)
        raise AssertionError(f"projection {rows} != events {({t: _expected(events, t) for t in TEAMS})}; "
                             f"{_unsplit(cluster, events)}") from None


def _unsplit(cluster: Cluster, events: list[Event]) -> str:
    """For a failure message: request events that have no scope entry on the scope topic."""
    values = asyncio.run(_values(cluster.bootstrap, f"{cluster.prefix}scope-entries"))
    entries: Counter = Counter()
    unreadable = 0
    for value in values:  # single entries and the splitter's batches (``scope.entries``)
        try:
            record = orjson.loads(value)
            batch = entries_of(record) if record["type"] == ENTRIES_TYPE else \
                [ScopeEntry.from_wire(record)] if record["type"] == ENTRY_TYPE else []
        except (ValueError, KeyError, TypeError):  # a poison record a test planted: counted, not fatal here
            unreadable += 1
            continue
        entries.update((e.event_id, e.scope) for e in batch)
    missing = [(e.id, e.time.isoformat()) for e in _first(events).values()
               if e.type in ("request.admitted", "request.settled", "hold.expired")
               and not entries[(e.id, f"team:{e.team}")]]
    doubled = {k: n for k, n in entries.items() if n > 1}
    return (f"request events without a scope entry: {missing}; entries on the topic more than once: {doubled}; "
            f"unreadable records on the topic: {unreadable}")


def _closed_exactly_once(events: list[Event]) -> tuple[set[str], set[str]]:
    """Every admitted request is closed, by a settlement or an expiry: (settled ids, expired ids)."""
    admitted = {e.request_id for e in _first(events).values() if e.type == "request.admitted"}
    closes = _closes(events)
    assert admitted == set(closes), (admitted - set(closes), set(closes) - admitted)
    settled = {rid for rid, e in closes.items() if e.type == "request.settled"}
    return settled, set(closes) - settled


def _spooled_ids(path: Path) -> list[str]:
    if not path.exists():
        return []
    records, _ = scan(path.read_bytes())
    return [unpack(record)[0] for _, record in records]


def _replay(cluster: Cluster) -> str:
    today = date.today()
    done = subprocess.run([sys.executable, "-m", "farebox", "replay", "--config", str(cluster.config),
                           "--from", str(today - timedelta(days=1)), "--to", str(today + timedelta(days=1)),
                           "--source", "kafka"], cwd=ROOT, capture_output=True, text=True, check=False)
    report = done.stdout + done.stderr
    assert done.returncode == 0 and "0 difference(s)" in report, report
    return report.strip()


# --- kill -9 a pod mid-stream -------------------------------------------------------------


async def _open_streams(cluster: Cluster, pod: int, team: str, n: int, client: httpx.AsyncClient):
    """``n`` slow streams on ``pod``, each past its first chunk: [(request id, response, its context)]."""
    opened = []
    for i in range(n):
        ctx = client.stream("POST", cluster.pod_urls[pod] + "/v1/chat/completions",
                            json=_body(i, max_tokens=300), headers={"Authorization": f"Bearer {cluster.keys[team]}",
                                                                    **SLOW_STREAM})
        resp = await ctx.__aenter__()
        assert resp.status_code == 200, await resp.aread()
        chunks = resp.aiter_bytes()
        await chunks.__anext__()  # admitted, routed, streaming
        opened.append((resp.headers["x-request-id"], ctx, chunks))
    return opened


def test_killed_pod_holds_expire_charged_leases_expire_and_spool_replays(short_ttl_cluster):
    cluster = short_ttl_cluster
    cluster.ensure_pods()
    rc = redis.Redis.from_url(cluster.redis_url)
    _fire(cluster, 18)  # every pod holds a lease for every team

    async def scenario() -> tuple[list[str], list[str], list[tuple[str, int, str]]]:
        async with httpx.AsyncClient(timeout=120) as client:
            streams = await _open_streams(cluster, 0, "alpha", 6, client)
            rids = [rid for rid, _, _ in streams]
            # the admissions reached Kafka: the dead pod's holds are on record
            await asyncio.to_thread(wait_until, lambda: {e.request_id for e in _request_events(cluster)
                                                         if e.type == "request.admitted"} >= set(rids),
                                    30, 0.25, "the streams' admissions in Kafka")
            others = asyncio.create_task(_during(cluster, client))
            await asyncio.sleep(0.5)
            cluster.kill_pod(0)
            spooled = _spooled_ids(cluster.spool_path(0))
            cut = 0
            for _, ctx, chunks in streams:  # the dead pod's streams end early, without their usage chunk
                try:
                    async for _ in chunks:
                        pass
                except httpx.HTTPError:
                    cut += 1
                finally:
                    await ctx.__aexit__(None, None, None)
            assert cut == len(streams)
            return rids, spooled, await others

    rids, spooled, served = asyncio.run(scenario())
    assert served and all(status == 200 for _, status, _ in served)  # the other pods kept serving

    # the worker charges each dead hold in full once its TTL has passed ...
    def expired():
        events = _request_events(cluster)
        done = {e.request_id: e for e in events if e.type == "hold.expired"}
        return events if set(rids) <= set(done) else False

    try:
        events = wait_until(expired, HOLD_TTL_S + 40, interval=0.5, what="hold.expired for the dead pod's streams")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_expiry_story(cluster, rids)}") from None
    first = _first(events)
    for rid in rids:
        admitted, gone = first[f"{rid}/admitted"], first[f"{rid}/expired"]
        assert gone.charged == admitted.holds and admitted.holds["team:alpha"] > 0, rid  # charged == hold
        assert f"{rid}/settled" not in first, rid

    # ... and closes the leases that funded them: lease.expired, unless the pod had returned one before it
    # died (a lease superseded by a newer grant goes back at once, its open holds staying with the ledger)
    dead_leases = {first[f"{rid}/admitted"].leases["team:alpha"] for rid in rids}

    def leases_closed():
        records = _lease_events(cluster)
        verbs = Counter((r["lease_id"], r["type"]) for r in records)
        granted = {r["lease_id"] for r in records
                   if r["type"] == "lease.granted" and r["pod"] == cluster.pod_id(0) and r["amount_micro"]}
        held_at_death = {lid for lid in granted if not verbs[(lid, "lease.returned")]}
        closed = all(verbs[(lid, "lease.expired")] + verbs[(lid, "lease.returned")] == 1
                     for lid in dead_leases | granted)
        return held_at_death if closed and held_at_death <= {lid for lid, v in verbs if v == "lease.expired"} \
            else False

    held_at_death = wait_until(leases_closed, 60, interval=0.5, what="each of the dead pod's leases closed once")
    assert held_at_death  # what the pod held when it died was closed by expiry, never returned

    # the pod comes back under the same id: what it had spooled is replayed once, then it serves again
    cluster.start_pod(0)
    wait_until(lambda: cluster.spool_path(0).stat().st_size == 0, 30, what="pod-0's spool replayed")
    again = _fire(cluster, 9, pods=[0])
    ids = Counter(e.id for e in _request_events(cluster))
    assert all(ids[event_id] == 1 for event_id in spooled), {i: ids[i] for i in spooled}

    # money: nothing held or leased any more, settled = settled costs + expired charges, each event once
    _wait_quiet(rc)
    events, rows = _wait_ledger_matches(cluster, rc)
    settled, expired_ids = _closed_exactly_once(events)
    assert set(rids) <= expired_ids
    assert {rid for _, _, rid in served + again} <= settled
    assert all(int(rows[t]["settled"]) <= int(rows[t]["limit"]) + int(rows[t]["overrun"]) for t in ("alpha",))
    print(f"\nkilled pod: {len(rids)} holds expired ({sum(first[f'{r}/expired'].charged['team:alpha'] for r in rids)}"
          f" micro charged), leases expired {sorted(dead_leases)}, spooled at kill: {len(spooled)}; "
          f"others served {len(served)}")


def _expiry_story(cluster: Cluster, rids: list[str]) -> str:
    """For a failure message: each dead stream's events in Kafka, whether the worker runs, its log's tail."""
    found: dict[str, list[str]] = {rid: [] for rid in rids}
    for e in _request_events(cluster):
        if e.request_id in found:
            found[e.request_id].append(e.type)
    code = cluster.worker.poll() if cluster.worker is not None else "not started"
    log = cluster.folder / "worker.log"
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else ["(no worker.log)"]
    return (f"events per dead stream: {found}\nworker exit code: {code} (None: running)\n"
            "worker.log, last lines:\n" + "\n".join(tail))


async def _during(cluster: Cluster, client: httpx.AsyncClient) -> list[tuple[str, int, str]]:
    """Requests to the surviving pods while pod 0 is killed: ~3 s, every team."""
    out = []
    for i in range(24):
        team, pod = TEAMS[i % 3], 1 + (i // 3) % 2
        status, rid = await _one(client, cluster, pod, team, 1000 + i)
        out.append((team, status, rid))
        await asyncio.sleep(0.1)
    return out


# --- stop Kafka for 30 s under load --------------------------------------------------------


async def _open_loop(cluster: Cluster, rate: float, stop: asyncio.Event, pods: list[int]) -> list[tuple[str, int, str]]:
    """Requests at ``rate``/s (not waiting for answers) over ``pods`` (changed by the caller) × 3 teams until ``stop``."""
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=200)) as client:
        tasks = []
        i = 0
        started = time.monotonic()
        while not stop.is_set():
            team, pod = TEAMS[(i // 3) % 3], pods[i % len(pods)]

            async def one(pod=pod, team=team, i=i) -> tuple[str, int, str]:
                try:
                    status, rid = await _one(client, cluster, pod, team, i)
                except httpx.HTTPError as exc:
                    return team, -1, repr(exc)
                return team, status, rid
            tasks.append(asyncio.create_task(one()))
            i += 1
            await asyncio.sleep(max(started + i / rate - time.monotonic(), 0))
        return list(await asyncio.gather(*tasks))


def test_kafka_outage_under_load_no_request_fails_nothing_lost_or_doubled(tmp_path):
    broker = session_broker()
    server = RedisServer().start()
    try:
        with running_cluster(tmp_path, broker.bootstrap, server.url,
                             lease={"lease_ttl_s": int(OUTAGE_S) + 90, "lease_expiry_grace_s": 10},
                             sim_defaults=FAST_SIM) as cluster:
            warm = _fire(cluster, 9)  # every pod holds a lease for every team before Kafka goes
            rc = redis.Redis.from_url(server.url)

            async def load() -> tuple[list[tuple[str, int, str]], float, list[str]]:
                stop = asyncio.Event()
                pods = [0, 1, 2]
                traffic = asyncio.create_task(_open_loop(cluster, 12.0, stop, pods))
                try:
                    await asyncio.sleep(2)
                    await asyncio.to_thread(broker.stop)
                    stopped = time.monotonic()
                    # mid-outage, pod 2 crashes with a spool full of events (its requests all answered first)
                    await asyncio.sleep(OUTAGE_S / 2)
                    pods.remove(2)
                    await asyncio.sleep(2)
                    cluster.kill_pod(2)
                    crashed = _spooled_ids(cluster.spool_path(2))
                    await asyncio.sleep(max(stopped + OUTAGE_S - time.monotonic(), 0))
                    spooling = [cluster.spool_path(i).stat().st_size for i in range(3)]
                    assert all(spooling), spooling  # every pod was writing to its spool
                    await asyncio.to_thread(broker.start)
                    away = time.monotonic() - stopped
                    timings.update(outage=away, back=broker.ready_after_s or 0.0)
                    await asyncio.to_thread(cluster.start_pod, 2)  # same pod id: replays the dead pod's spool
                    await asyncio.sleep(2)
                finally:
                    stop.set()
                    if not broker.running:  # leave the session's broker up for later tests
                        await asyncio.to_thread(broker.start)
                return await traffic, away, crashed

            timings: dict[str, float] = {}
            t0 = time.monotonic()
            results, away, crashed = asyncio.run(load())
            timings["load"] = time.monotonic() - t0
            failed = Counter((team, status) for team, status, _ in results if status != 200)
            assert not failed, failed  # no request failed while the leases lasted

            for i in range(3):  # each pod replays its spool once Kafka is back
                wait_until(lambda i=i: cluster.spool_path(i).stat().st_size == 0, 60, what=f"pod-{i} spool replayed")
            again = _fire(cluster, 9, pods=[2])  # the restarted pod serves (on new leases)
            ok = {rid for _, _, rid in warm + results + again}
            events, rows = _wait_ledger_matches(cluster, rc, timeout=90)
            timings["caught_up"] = time.monotonic() - t0
            ids = Counter(e.id for e in events)
            first = _first(events)
            for rid in ok:  # exactly one admitted and one settled event each, by id: none lost, none doubled
                assert ids[f"{rid}/admitted"] == 1 and ids[f"{rid}/settled"] == 1, (rid, ids[f"{rid}/admitted"],
                                                                                  ids[f"{rid}/settled"])
                assert first[f"{rid}/settled"].final_status == 200
            # what pod 2 had spooled when it died came from its spool, after its restart, once each
            assert crashed and all(ids[event_id] == 1 for event_id in crashed), {i: ids[i] for i in crashed}
            settled, _ = _closed_exactly_once(events)
            assert settled == ok and not [e for e in events if e.type == "hold.expired"]
            report = _replay(cluster)
            print(f"\nKafka outage {away:.1f}s: {len(results)} requests all 200; pod-2 died with {len(crashed)} "
                  f"events spooled; duplicates in Kafka {sum(v - 1 for v in ids.values())}; "
                  f"settled {({t: rows[t]['settled'] for t in TEAMS})}; timings {timings}; {report}")
    finally:
        if not broker.running:
            broker.start()
        server.cleanup()
