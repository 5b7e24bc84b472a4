"""The budget bench's analysis: the event log folded per scope, percentiles, and the report's figures.

``fold`` replays one scope's holds, settlements and expiries in log order and
keeps the state after every event, so the unused budget at any instant (limit
- settled - held) and the peak of settled + held are known exactly. ``analyse``
turns a run (plan, client results, events, the admin API's view) into the
report dict that ``tests.bench.budget`` prints and checks.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ledger.events import HoldExpired, RequestAdmitted, RequestSettled
from streams.sqlite_log import SqliteEventLog
from tests.bench.budget_client import Result
from tests.bench.budget_plan import LEFT_RE, SCOPE, TEAM, Planned, Prices, parse_money

BUDGET_CODES = ("budget_exhausted", "budget_reserved")

# --------------------------------------------------------------------------- the event log


async def read_events(path: Path) -> list[tuple[int, Any]]:
    log = SqliteEventLog.open(path, readonly=True)
    try:
        out, after = [], 0
        while batch := await log.read(after=after, limit=5000):
            out += batch
            after = batch[-1][0]
        return out
    finally:
        await log.close()


async def wait_settled(path: Path, timeout: float = 30.0) -> list[tuple[int, Any]]:
    """Until every admitted request of the team has its settlement (or expiry) durable in the log."""
    deadline = time.monotonic() + timeout
    while True:
        events = await read_events(path)
        admitted = {e.request_id for _, e in events if isinstance(e, RequestAdmitted) and e.team == TEAM}
        closed = {e.request_id for _, e in events if isinstance(e, (RequestSettled, HoldExpired)) and e.team == TEAM}
        if admitted <= closed or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.2)


@dataclass
class Fold:
    """One scope folded in log order, with the state after every event."""

    settled: int = 0
    held: int = 0
    overrun: int = 0
    expired_charged: int = 0
    admitted: int = 0
    holds_total: int = 0
    est_input_total: int = 0
    settled_n: int = 0
    expired_n: int = 0
    peak_committed: int = 0
    peak_excess_beyond_overrun: int = 0   # max over prefixes of settled + held - limit - overrun so far
    trail: list[tuple[int, float, int]] = field(default_factory=list)  # (offset, event unix time, available)


def fold(events: list[tuple[int, Any]], limit: int, scope: str = SCOPE) -> Fold:
    """``scope`` folded in the events' order (offsets as given), with the state after each."""
    f = Fold(peak_excess_beyond_overrun=-limit)
    for offset, e in events:
        if isinstance(e, RequestAdmitted):
            h = e.holds.get(scope)
            if h is None:
                continue
            f.held += h
            f.admitted += 1
            f.holds_total += h
            f.est_input_total += e.est_input_tokens
        elif isinstance(e, RequestSettled):
            if scope not in e.hold_released and scope not in e.cost_by_scope:
                continue
            f.held -= e.hold_released.get(scope, 0)
            f.settled += e.cost_by_scope.get(scope, 0)
            f.overrun += e.overrun_micro
            f.settled_n += 1
        elif isinstance(e, HoldExpired):
            c = e.charged.get(scope)
            if c is None:
                continue
            f.held -= c
            f.settled += c
            f.expired_charged += c
            f.expired_n += 1
        else:
            continue
        committed = f.settled + f.held
        f.peak_committed = max(f.peak_committed, committed)
        f.peak_excess_beyond_overrun = max(f.peak_excess_beyond_overrun, committed - limit - f.overrun)
        f.trail.append((offset, e.time.timestamp(), limit - committed))
    return f


# --------------------------------------------------------------------------- stats


def pct(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    return sorted_values[max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))]


def dist(values: list[float | None]) -> dict:
    v = sorted(x for x in values if x is not None)
    return {"n": len(v), "p50": pct(v, 0.50), "p99": pct(v, 0.99), "max": v[-1] if v else None}


def analyse(plan: list[Planned], results: list[Result], events: list[tuple[int, Any]], admin: dict, limit: int,
            prices: Prices, wall: float, overflows: int | None) -> dict:
    ok = [r for r in results if r.status == 200 and r.error is None]
    refused = [r for r in results if r.status == 429 and r.code in BUDGET_CODES]
    budget_429 = [r for r in refused if r.code == "budget_exhausted"]
    # final refusals say so; budget_reserved says when to come back
    bad_refusals = [r for r in refused if (r.retry_after is not None or r.should_retry != "false")
                    if r.code == "budget_exhausted"]
    bad_refusals += [r for r in refused if r.code == "budget_reserved"
                     and (r.retry_after is None or r.should_retry != "true")]
    errors = [r for r in results if r not in ok and r not in refused]
    by_index = {p.index: p for p in plan}

    f = fold(events, limit)
    overshoot = max(0, f.settled - limit)

    # every settled request: usage and cost as predicted, and as the client saw it
    settled = {e.request_id: e for _, e in events if isinstance(e, RequestSettled) and SCOPE in e.cost_by_scope}
    mismatches: list[str] = []
    for r in ok:
        p = by_index[r.index]
        e = settled.get(r.request_id or "")
        if e is None:
            mismatches.append(f"#{r.index} {r.request_id}: no request.settled")
            continue
        got = (e.usage.input, e.usage.output, e.cost_by_scope[SCOPE])
        want = (p.input_tokens, p.output_tokens, p.expected_cost_micro)
        client = (r.usage or {}).get("prompt_tokens"), (r.usage or {}).get("completion_tokens")
        if got != want or client != want[:2]:
            mismatches.append(f"#{r.index}: event (in, out, cost) {got}, client usage {client}, predicted {want}")
    expected_admitted_cost = sum(by_index[r.index].expected_cost_micro for r in ok)

    # first refusal: by when the client got it
    first = min(budget_429, key=lambda r: r.recv_wall, default=None)
    first_info: dict[str, Any] | None = None
    if first is not None:
        m = LEFT_RE.search(first.message or "")
        msg_left = parse_money(m.group(1)) if m else None
        msg_limit = parse_money(m.group(2)) if m else None
        # the event log folded up to the instant the client received the 429 (same machine clock)
        upto = [a for (_, t, a) in f.trail if t <= first.recv_wall]
        at_recv = upto[-1] if upto else limit
        # some prefix of the log must show exactly the message's figure (decision and hold are one loop turn)
        # state i holds from its event's time until the next event's; it must overlap [sent, received]
        states = [(0, 0.0, limit)] + f.trail
        exact = [(o, t) for i, (o, t, a) in enumerate(states)
                 if a == msg_left and t <= first.recv_wall
                 and (i + 1 == len(states) or states[i + 1][1] >= first.sent_wall)]
        settled_at = sum(1 for _, e in events if isinstance(e, RequestSettled) and e.time.timestamp() <= first.recv_wall)
        settled_micro_at = sum(e.cost_by_scope.get(SCOPE, 0) for _, e in events
                               if isinstance(e, RequestSettled) and e.time.timestamp() <= first.recv_wall)
        first_info = {
            "request_index": first.index, "request_id": first.request_id,
            "message": first.message, "message_left_micro": msg_left, "message_limit_micro": msg_limit,
            "eventlog_left_at_receipt_micro": at_recv,
            "eventlog_prefix_with_message_figure": bool(exact),
            "eventlog_prefix_offsets": [o for o, _ in exact][:5],
            "settled_before_first_refusal": settled_at,
            "limit_minus_settled_at_receipt_micro": limit - settled_micro_at,
            "client_ms_after_start": round((first.recv_wall - min(r.sent_wall for r in results)) * 1000, 1),
        }

    admit_all = dist([r.admit_ms for r in results])
    admit_ok = dist([r.admit_ms for r in ok])
    admit_ref = dist([r.admit_ms for r in refused])
    stream_total = dist([r.total_s * 1000 for r in ok])

    admin_check = {
        "settled_micro": admin.get("settled_micro"), "held_micro": admin.get("held_micro"),
        "overrun_micro": admin.get("overrun_micro"), "limit_micro": admin.get("limit_micro"),
        "remaining_micro": admin.get("remaining_micro"), "state": admin.get("state"),
        "settled_equals_eventlog": admin.get("settled_micro") == f.settled,
        "held_is_zero": admin.get("held_micro") == 0,
        "overrun_equals_eventlog": admin.get("overrun_micro") == f.overrun,
    }
    return {
        "requests": len(results), "admitted": len(ok), "refused_budget_exhausted": len(budget_429),
        "refused_by_code": dict(Counter(r.code for r in refused)), "refused": len(refused),
        "retried": sum(r.tries - 1 for r in results),
        "refused_with_wrong_retry_headers": len(bad_refusals), "errors": len(errors),
        "error_samples": [f"#{r.index} HTTP {r.status} {r.code}: {r.error or r.message}" for r in errors[:5]],
        "error_kinds": dict(Counter(f"{r.status} {r.code or r.error}" for r in errors).most_common(10)),
        "eventlog": {
            "admitted": f.admitted, "settled": f.settled_n, "expired": f.expired_n,
            "settled_micro": f.settled, "held_micro_at_end": f.held, "expired_charged_micro": f.expired_charged,
            "overrun_micro": f.overrun,
            "hold_mean_micro": f.holds_total // f.admitted if f.admitted else None,
            "est_input_tokens_mean": round(f.est_input_total / f.admitted, 1) if f.admitted else None,
            "peak_committed_micro": f.peak_committed,
            "peak_excess_beyond_overrun_micro": f.peak_excess_beyond_overrun,
        },
        "limit_micro": limit,
        "overshoot_micro": overshoot,
        "overshoot_pct_of_limit": float(Decimal(overshoot) * 100 / Decimal(limit)),
        "overshoot_beyond_overrun_micro": max(0, overshoot - f.overrun),
        "unused_at_first_refusal": first_info,
        "unused_at_end_micro": limit - f.settled,
        "unused_at_end_pct": float(Decimal(limit - f.settled) * 100 / Decimal(limit)),
        "predicted_cost_of_admitted_micro": expected_admitted_cost,
        "usage_mismatches": len(mismatches), "usage_mismatch_samples": mismatches[:5],
        "admission_ms": {"all": admit_all, "admitted": admit_ok, "refused": admit_ref},
        "stream_total_ms": stream_total,
        "wall_s": round(wall, 3), "requests_per_s": round(len(results) / wall, 1) if wall else None,
        "listen_overflows": overflows,
        "admin": admin_check,
    }
