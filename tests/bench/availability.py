"""Alias availability vs its providers', in simulated time: ``python -m tests.bench.availability``.

Two providers behind one alias, each down in independent outages that cover
1% of minutes (episodes of random length, mean 5 minutes). Requests arrive at
a fixed rate; each is routed by the real router, breakers, health, 429 pauses
and retry budget (``proxy.routing``), with the failover loop's rules: at most
``max_attempts`` attempts, a retry only while the alias's budget allows, a
deployment that is down answers 503 at once. Pure: no network, no sleeping;
the clock is the simulated one.

Printed: each provider's availability (the share of requests that arrived
while it was up: what a caller calling it directly would get), the alias's,
the ceiling (both up), retry share and breaker openings.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field
from types import SimpleNamespace

from proxy.errors import GatewayError, UpstreamUnavailable
from proxy.outcomes import OK
from proxy.routing.attempts import verdict
from proxy.routing.router import Needs, route
from proxy.routing.state import RoutingState
from proxy.snapshot import Alias, BreakerPolicy, Deployment


def outages(rng: random.Random, minutes: int, down_fraction: float, mean_len_min: float) -> list[bool]:
    """Per minute, whether the provider is down: alternating up/down episodes with exponential lengths."""
    down = [False] * minutes
    mean_up = mean_len_min * (1 - down_fraction) / down_fraction
    t, is_down = rng.expovariate(1 / mean_up), True
    while t < minutes:
        length = rng.expovariate(1 / (mean_len_min if is_down else mean_up))
        if is_down:
            for m in range(int(t), min(int(t + max(length, 1)), minutes)):
                down[m] = True
        t += length
        is_down = not is_down
    return down


@dataclass
class Result:
    requests: int = 0
    ok: int = 0
    retries: int = 0
    both_down: int = 0
    up: dict[str, int] = field(default_factory=dict)
    breaker_opens: int = 0


def simulate(days: float, rps: float, seed: int, down_fraction: float = 0.01, mean_outage_min: float = 5.0,
             breaker: BreakerPolicy = BreakerPolicy()) -> Result:
    rng = random.Random(seed)
    minutes = int(days * 24 * 60)
    deps = [
        Deployment(id=f"provider-{n}", dialect="openai", base_url="http://x", provider=f"p{n}", account="a",
                   region="r", model="m", context_window=128_000, capabilities=frozenset({"streaming"}),
                   data_classes=("internal",), weight=50, breaker=breaker)
        for n in ("a", "b")
    ]
    alias = Alias(name="chat", kind="chat", deployments=tuple(d.id for d in deps))
    snap = SimpleNamespace(deployments={d.id: d for d in deps})
    down = {d.id: outages(rng, minutes, down_fraction, mean_outage_min) for d in deps}
    now = [0.0]
    state = RoutingState(clock=lambda: now[0])
    budget = state.budget(alias)
    needs = Needs((), "internal", 10)
    res = Result(up={d.id: 0 for d in deps})
    total = int(minutes * 60 * rps)
    for i in range(total):
        t = now[0] = i / rps
        minute = int(t // 60)
        res.requests += 1
        for d in deps:
            res.up[d.id] += not down[d.id][minute]
        res.both_down += all(down[d.id][minute] for d in deps)
        res.ok += _one_request(snap, alias, needs, state, budget, rng, t, down, minute, res)
    res.breaker_opens = sum(1 for _, _, s in state.transitions if s == "open")
    return res


def _one_request(snap, alias, needs, state, budget, rng, t, down, minute, res) -> bool:
    """The failover loop's rules, synchronously: True if some attempt succeeded."""
    try:
        chain = route(snap, alias, needs, state, t, rng)
    except GatewayError:
        return False
    budget.request(t)
    tried = 0
    for dep in chain:
        if tried >= alias.max_attempts:
            break
        if state.blocked(dep, t) is not None:
            continue
        if tried > 0 and not budget.allows(t):
            break
        if not state.start(dep, t):
            continue
        if tried > 0:
            budget.spend(t)
            res.retries += 1
        tried += 1
        if not down[dep.id][minute]:
            state.finish(dep, OK, t, ttft_s=0.3)
            return True
        v = verdict(UpstreamUnavailable("down", upstream_status=503))
        state.finish(dep, v.outcome, t)
        if not v.retry:
            break
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--rps", type=float, default=1.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--down", type=float, default=0.01, help="share of minutes each provider is down")
    args = ap.parse_args()
    print(f"{args.days:g} simulated days at {args.rps:g} req/s, each provider down {args.down:.1%} of minutes")
    print(f"{'seed':>4} {'provider-a':>11} {'provider-b':>11} {'alias':>9} {'ceiling':>9} {'retries':>8} {'opens':>6}")
    for seed in range(args.seeds):
        r = simulate(args.days, args.rps, seed, args.down)
        n = r.requests
        print(f"{seed:>4} {r.up['provider-a'] / n:>11.4%} {r.up['provider-b'] / n:>11.4%} {r.ok / n:>9.4%} "
              f"{1 - r.both_down / n:>9.4%} {r.retries / n:>8.2%} {r.breaker_opens:>6}")


if __name__ == "__main__":
    main()
