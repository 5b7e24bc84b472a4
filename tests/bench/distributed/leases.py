"""Part 3: lease round trip, as a pod sees it: ``lease.requested`` out, the grant back on Redis.

The bench acts as pods: it appends ``LeaseRequested`` through the pods'
producer (routed to the scope-entries topic, keyed by scope, as
``streams.kafka.log`` routes lease events) and waits for the grant the worker
publishes on ``fb:grants:<pod>`` (``streams.projections``; one pattern
subscription covers every bench pod). Round trip = from the append to the
grant's arrival. Each grant is then returned unspent (``LeaseReturned``, as
a pod does with a lease it no longer needs), so the scope's free budget and
slice sizes stay steady; returns are not timed.

Runs sequentially (one request at a time, one pod) and then with
``concurrency`` pods each asking in a loop, on the three teams' scopes.
Checked: every request answered exactly once, by a grant of at least what was
asked, and every lease back (``leased`` 0 in the projection) at the end.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timezone

import orjson

from ledger.codec import from_dict
from ledger.events import LeaseGranted, LeaseRequested, LeaseReturned
from tests.bench.budget_analysis import dist
from tests.bench.distributed.env import WorkerEnv
from tests.distributed.cluster import TEAMS

NEED_MICRO = 200_000  # one request's hold, about ₹0.20


class Pods:
    """The bench's pods: asks for leases and matches the grants published for them."""

    def __init__(self, env: WorkerEnv) -> None:
        self.env = env
        self.tag = uuid.uuid4().hex[:6]
        self.waiting: dict[str, asyncio.Future[tuple[float, LeaseGranted]]] = {}
        self.answers: dict[str, int] = {}
        self.strays = 0
        self.n = 0

    async def listen(self, ready: asyncio.Event) -> None:
        assert self.env.redis is not None
        async with self.env.redis.pubsub() as pubsub:
            await pubsub.psubscribe(f"fb:grants:bench-{self.tag}-*")
            ready.set()
            async for message in pubsub.listen():
                if message.get("type") != "pmessage":
                    continue
                arrived = time.monotonic()
                granted = from_dict(orjson.loads(message["data"]))
                if not isinstance(granted, LeaseGranted):
                    continue
                self.answers[granted.lease_id] = self.answers.get(granted.lease_id, 0) + 1
                fut = self.waiting.pop(granted.lease_id, None)
                if fut is None:
                    self.strays += 1
                elif not fut.done():
                    fut.set_result((arrived, granted))

    async def round_trip(self, pod: int, scope: str, timeout: float = 30.0) -> tuple[float, LeaseGranted]:
        assert self.env.log is not None
        self.n += 1
        lease_id = f"bench-{self.tag}-{self.n}"
        pod_id = f"bench-{self.tag}-{pod}"
        fut: asyncio.Future[tuple[float, LeaseGranted]] = asyncio.get_running_loop().create_future()
        self.waiting[lease_id] = fut
        now = datetime.now(timezone.utc)
        t0 = time.monotonic()
        self.env.log.append(LeaseRequested(time=now, lease_id=lease_id, scope=scope, pod=pod_id,
                                           amount_micro=NEED_MICRO, expires_at=None))
        arrived, granted = await asyncio.wait_for(fut, timeout)
        self.env.log.append(LeaseReturned(time=datetime.now(timezone.utc), lease_id=lease_id, scope=scope,
                                          pod=pod_id, amount_micro=granted.amount_micro,
                                          expires_at=granted.expires_at, funded_micro=0))
        return arrived - t0, granted


async def run(env: WorkerEnv, sequential: int, concurrent: int, concurrency: int) -> dict:
    if env.worker is None:
        raise RuntimeError("part 3 needs a running worker")
    await env.wait_caught_up(timeout=120)
    pods = Pods(env)
    ready = asyncio.Event()
    listener = asyncio.create_task(pods.listen(ready))
    await asyncio.wait_for(ready.wait(), 10)
    try:
        seq = [await pods.round_trip(0, f"team:{TEAMS[0]}") for _ in range(sequential)]

        async def loop(p: int, n: int) -> list[tuple[float, LeaseGranted]]:
            return [await pods.round_trip(p, f"team:{TEAMS[p % len(TEAMS)]}") for _ in range(n)]

        per = [concurrent // concurrency + (1 if p < concurrent % concurrency else 0) for p in range(concurrency)]
        t0 = time.monotonic()
        conc = [x for chunk in await asyncio.gather(*(loop(p, n) for p, n in enumerate(per))) for x in chunk]
        conc_wall = time.monotonic() - t0
        assert env.log is not None
        await env.log.flush()
        deadline = time.monotonic() + 60
        while True:  # every lease back: nothing leased on any team
            rows = await env.projected()
            if all(rows[t].get("leased", 0) == 0 for t in TEAMS) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    grants = [g for _, g in seq + conc]
    return {
        "sequential": {"n": len(seq), "ms": dist([s * 1000 for s, _ in seq])},
        "concurrent": {"n": len(conc), "concurrency": concurrency, "ms": dist([s * 1000 for s, _ in conc]),
                       "grants_per_s": round(len(conc) / conc_wall, 1) if conc_wall else None},
        "need_micro": NEED_MICRO,
        "all_answered_once": len(pods.answers) == sequential + concurrent and set(pods.answers.values()) == {1},
        "stray_grants": pods.strays,
        "grants_cover_need": all(g.amount_micro >= NEED_MICRO for g in grants),
        "grant_micro": dist([g.amount_micro for g in grants]),
        "leased_at_end": {t: rows[t].get("leased") for t in TEAMS},
    }


def lines(rep: dict) -> list[str]:
    def ms(d: dict) -> str:
        return f"{d['p50']:.1f} / {d['p99']:.1f} / {d['max']:.1f}" if d["p50"] is not None else "-"

    s, c = rep["sequential"], rep["concurrent"]
    return [
        "",
        "== 3. lease round trip (lease.requested appended -> grant received on fb:grants:<pod>), ms p50 / p99 / max",
        f"  sequential, 1 pod, {s['n']} requests          {ms(s['ms']):>24}",
        f"  {c['concurrency']} pods at once, {c['n']} requests        {ms(c['ms']):>24}   "
        f"({c['grants_per_s']} grants/s)",
        f"  every request answered exactly once: {rep['all_answered_once']} (stray grants {rep['stray_grants']}); "
        f"every grant >= the {rep['need_micro']:,} micro asked: {rep['grants_cover_need']}; "
        f"leased at the end (all returned): {rep['leased_at_end']}",
    ]
