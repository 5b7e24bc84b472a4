"""Part 4: how early a team is stopped with 3 pods spending leases, and that it never overshoots.

``tests.distributed.cluster.running_cluster`` with 3 pods (lease policy as
the cluster test runs it) and team ``alpha``'s monthly limit set to 60% of
the predicted cost of a burst of N streaming requests (the embedded budget
bench's plan: ``tests.bench.budget_plan``, alias ``chat-openai``, exact
predicted costs), fired all at once from alpha's key, round-robin over the
pods, every stream read to the end. Then the pods stop gracefully (leases
returned) and the worker settles everything.

Reported, with the embedded bench's definitions (``tests.bench.budget``):
  * admitted, refused 429 ``budget_exhausted``, refused 429
    ``budget_reserved`` (money in flight, after the wait), refused 503
    ``budget_unavailable`` (a lease did not come in time), other errors;
  * unused budget at the first refusal: the requests topic (deduped by event
    id, ordered by event time) folded up to the instant the client received
    that refusal: limit - settled - held; also at the first 429;
  * overshoot = max(0, settled - limit) next to the recorded overrun, and the
    peak of settled + held beyond the limit and the overrun (both must be 0);
  * the Redis projection agrees with the events (settled, held 0), and
    every settled request's cost equals its prediction; ``leased`` left at the
    end (every lease should be back once the pods stopped) is reported.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

import aiohttp
import redis

from ledger.codec import decode
from ledger.events import RequestSettled
from tests.bench.budget_analysis import fold
from tests.bench.budget_client import Result, one
from tests.bench.budget_plan import BUDGET_SHARE, REQUEST_TIMEOUT_S, TTFT_MS, Planned, Prices, money, plan_requests
from tests.distributed.cluster import TEAMS, running_cluster, wait_until
from tests.harness import stop
from tests.infra.kafka.support import read_records

TEAM = TEAMS[0]
SCOPE = f"team:{TEAM}"
LEASE = {"lease_share": 4, "lease_last_pct": 5}  # as tests/distributed/test_cluster.py runs it


async def _burst(urls: list[str], key: str, plan: list[Planned]) -> list[Result]:
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=120)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
                                     auto_decompress=False, skip_auto_headers=("User-Agent",)) as session:
        go = asyncio.Event()
        tasks = [asyncio.create_task(one(session, urls[p.index % len(urls)] + "/v1/chat/completions", key, p, go))
                 for p in plan]
        await asyncio.sleep(0)
        go.set()
        return await asyncio.gather(*tasks)


def _unused_at(trail: list[tuple[int, float, int]], instant: float, limit: int) -> int:
    upto = [a for (_, t, a) in trail if t <= instant]
    return upto[-1] if upto else limit


def run(folder: Path, bootstrap: str, redis_url: str, prices: Prices, n: int, seed: int = 20261001) -> dict:
    plan = plan_requests(n, 1, prices, seed)
    total = sum(p.expected_cost_micro for p in plan)
    limit = int((Decimal(total) * BUDGET_SHARE).to_integral_value(rounding=ROUND_FLOOR))
    limits = {t: "100000.00" for t in TEAMS} | {TEAM: str(Decimal(limit) / Decimal(1_000_000))}
    with running_cluster(folder, bootstrap, redis_url, limits=limits, lease=LEASE,
                         sim_defaults={"ttft_ms": TTFT_MS, "tokens_per_s": 150}) as cluster:
        results = asyncio.run(_burst(cluster.pod_urls, cluster.keys[TEAM], plan))
        pod_codes = [stop(proc, timeout=40) for proc in cluster.pods]  # graceful: leases back, events flushed
        cluster.pods = [None] * len(cluster.pods)  # type: ignore[list-item]
        rc = redis.Redis.from_url(redis_url)

        def row_now() -> dict[str, str]:
            return {k.decode(): v.decode() for k, v in rc.hgetall(f"fb:scope:{SCOPE}").items()}

        # money first: every hold settled; then every lease back. A lease granted to a pod after it
        # stopped is never returned (it expires, ttl + grace later): reported, not waited for.
        row = wait_until(lambda: (r := row_now()) and r["held"] == "0" and r, 90,
                         what=f"{SCOPE}: every hold settled")
        try:
            row = wait_until(lambda: (r := row_now()) and r["held"] == "0" and r["leased"] == "0" and r, 30,
                             what=f"{SCOPE}: every lease returned")
        except AssertionError:
            row = row_now()
        rc.close()
        records = asyncio.run(read_records(bootstrap, cluster.requests_topic))
    first: dict = {}
    for *_, value in records:
        event = decode(value)
        first.setdefault(event.id, event)
    duplicates = len(records) - len(first)
    mine = sorted((e for e in first.values() if e.team == TEAM), key=lambda e: (e.time, e.id))
    f = fold(list(enumerate(mine)), limit, SCOPE)

    ok = [r for r in results if r.status == 200 and r.error is None]
    r429 = [r for r in results if r.status == 429 and r.code == "budget_exhausted"]
    reserved = [r for r in results if r.status == 429 and r.code == "budget_reserved"]
    r503 = [r for r in results if r.status == 503 and r.code == "budget_unavailable"]
    other = [r for r in results if r not in ok and r not in r429 and r not in reserved and r not in r503]
    refusals = r429 + reserved + r503
    first_refusal = min(refusals, key=lambda r: r.recv_wall, default=None)
    first_429 = min(r429, key=lambda r: r.recv_wall, default=None)
    by_index = {p.index: p for p in plan}
    settled = {e.request_id: e for e in mine if isinstance(e, RequestSettled)}
    mismatches = [r.index for r in ok if (e := settled.get(r.request_id or "")) is None
                  or e.cost_by_scope.get(SCOPE) != by_index[r.index].expected_cost_micro]
    t_start = min(r.sent_wall for r in results)

    def at(r: Result | None) -> dict | None:
        if r is None:
            return None
        unused = _unused_at(f.trail, r.recv_wall, limit)
        return {"status": r.status, "code": r.code, "ms_after_start": round((r.recv_wall - t_start) * 1000, 1),
                "unused_micro": unused, "unused_pct": float(Decimal(unused) * 100 / Decimal(limit)),
                "admitted_before": sum(1 for x in ok if x.recv_wall <= r.recv_wall)}

    overshoot = max(0, f.settled - limit)
    return {
        "requests": n, "pods": len(pod_codes), "pod_exit_codes": pod_codes, "limit_micro": limit,
        "predicted_total_micro": total, "admitted": len(ok), "refused_429": len(r429),
        "refused_reserved": len(reserved), "refused_503": len(r503),
        "other_errors": len(other),
        "other_samples": [f"#{r.index} HTTP {r.status} {r.code}: {r.error or r.message}" for r in other[:5]],
        "exhausted_messages": dict(Counter((r.message or "")[:80] for r in r429)),
        "unavailable_messages": dict(Counter((r.message or "")[:80] for r in r503)),
        "first_refusal": at(first_refusal), "first_429": at(first_429),
        "eventlog": {"admitted": f.admitted, "settled": f.settled_n, "expired": f.expired_n,
                     "settled_micro": f.settled, "held_micro_at_end": f.held, "overrun_micro": f.overrun,
                     "peak_committed_micro": f.peak_committed,
                     "peak_excess_beyond_overrun_micro": max(0, f.peak_excess_beyond_overrun)},
        "duplicates_in_kafka": duplicates,
        "overshoot_micro": overshoot, "overshoot_beyond_overrun_micro": max(0, overshoot - f.overrun),
        "unused_at_end_micro": limit - f.settled,
        "unused_at_end_pct": float(Decimal(limit - f.settled) * 100 / Decimal(limit)),
        "projection": {k: row[k] for k in ("settled", "held", "leased", "overrun", "requests")},
        "projection_settled_equals_events": int(row["settled"]) == f.settled,
        "cost_mismatches": len(mismatches),
    }


def lines(rep: dict) -> list[str]:
    lim = rep["limit_micro"]

    def refusal(name: str, x: dict | None) -> str:
        if x is None:
            return f"  {name:<40} none"
        return (f"  {name:<40} {money(x['unused_micro']):>16}  ({x['unused_pct']:.2f}% of the limit unused; "
                f"HTTP {x['status']} {x['code']} {x['ms_after_start']} ms in, {x['admitted_before']} admitted by then)")

    el = rep["eventlog"]
    return [
        "",
        f"== 4. early stop with {rep['pods']} pods: {rep['requests']} streaming requests of team {TEAM} at once, "
        f"round-robin over the pods; limit {money(lim)} = 60% of the predicted {money(rep['predicted_total_micro'])}",
        f"  admitted {rep['admitted']}, refused 429 budget_exhausted {rep['refused_429']}, "
        f"refused 429 budget_reserved {rep.get('refused_reserved', 0)}, "
        f"refused 503 budget_unavailable {rep['refused_503']}, other errors {rep['other_errors']}",
        refusal("unused at the first refusal", rep["first_refusal"]),
        refusal("unused at the first budget_exhausted", rep["first_429"]),
        *(f"    budget_exhausted {n}x: {text}" for text, n in rep.get("exhausted_messages", {}).items()),
        *(f"    budget_unavailable {n}x: {text}" for text, n in rep.get("unavailable_messages", {}).items()),
        f"  {'unused at the end (limit - settled)':<40} {money(rep['unused_at_end_micro']):>16}  "
        f"({rep['unused_at_end_pct']:.2f}% of the limit)",
        f"  {'settled (events, deduped by id)':<40} {money(el['settled_micro']):>16}  ({el['settled']} settled, "
        f"{el['expired']} expired; {rep['duplicates_in_kafka']} duplicate records in Kafka)",
        f"  {'overshoot = max(0, settled - limit)':<40} {money(rep['overshoot_micro']):>16}  (recorded overrun "
        f"{money(el['overrun_micro'])}; beyond overrun {money(rep['overshoot_beyond_overrun_micro'])}, must be 0)",
        f"  {'peak settled + held beyond limit+overrun':<40} {money(el['peak_excess_beyond_overrun_micro']):>16}",
        f"  leased at the end (pods stopped, leases should all be back): {money(int(rep['projection']['leased']))}",
        f"  projection {rep['projection']}: settled == events: {rep['projection_settled_equals_events']}; "
        f"settled cost == predicted for every admitted request: {rep['cost_mismatches'] == 0}",
        *[f"  sample: {s}" for s in rep["other_samples"]],
    ]
