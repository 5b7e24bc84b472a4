"""Budgets under a burst: ``python -m tests.bench.budget`` (``make bench-budget``).

One stack (provider simulator with ttft 20 ms and 100-200 tokens/s per
request, so streams overlap, plus a real ``farebox serve``) with alias
``chat-openai`` (one OpenAI-dialect deployment, $2 in / $10 out per 1M tokens,
converted at the config's USD->INR rate). N keys of team ``platform`` (minted
in-process into ``keys.jsonl``) fire R streaming requests all at once, keys
round-robin, each with ``max_completion_tokens`` 512 (so holds are pessimistic
as in production) and its own output length (``x-sim-output-tokens``, uniform
16-400) and prompt length. Every stream is read to the end.

Before the run the expected cost of every request is computed exactly
(simulator input-token rule x price x FX in Decimal, rounded up to micro-INR
once per request, as the gateway does) and the team budget is set to 60% of
the total, so about 60% of the work could be paid for.

Reported (and written to var/bench/budget.json):
  * admitted vs refused; refusals must be 429 ``budget_exhausted`` without
    Retry-After (anything else is listed as an error);
  * overshoot = max(0, settled - limit) from the event log (``request.settled``
    cost on team:platform plus ``hold.expired`` charges), next to the recorded
    overrun (sum of ``overrun_micro``) and as % of the limit; plus the peak of
    settled + held over every prefix of the log;
  * unused budget at the first refusal: from the 429's message ("has ₹X left
    of ₹Y") and from the event log (limit - settled - held folded up to the
    instant the client received that 429; and whether some prefix of the log
    has exactly the message's figure available); unused at the end;
  * admission latency p50/p99 from ``server-timing: admit;dur=<ms>`` (admitted
    and refused); wall time and requests/s;
  * cross-check with the admin API (finance token): settled_micro equals the
    event-log sum, held_micro is 0 at the end; and every settled request's
    usage and cost equal what was predicted for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any, Callable

import aiohttp
import orjson

from infra.simulator.generation import VOCAB
from ledger.events import HoldExpired, RequestAdmitted, RequestSettled
from proxy.control.keys import mint_key
from proxy.control.statefile import KEYS, append_jsonl
from streams.sqlite_log import SqliteEventLog
from tests.harness import EXAMPLES, ROOT, Stack, running_stack, wait_key_live

OUT_JSON = ROOT / "var" / "bench" / "budget.json"
ALIAS = "chat-openai"
DEPLOYMENT = "sim-openai-mumbai"
TEAM = "platform"
SCOPE = f"team:{TEAM}"
MAX_COMPLETION_TOKENS = 512
OUTPUT_RANGE = (16, 400)
PROMPT_WORDS = (20, 160)
TOKENS_PER_S = (100, 200)
TTFT_MS = 20
BUDGET_SHARE = Decimal("0.60")
REQUEST_TIMEOUT_S = 180.0
SIM_TOKEN_RE = re.compile(r"\w+|[^\w\s]")   # infra/simulator/generation.py: the documented input rule
LEFT_RE = re.compile(r"has ₹([0-9]+\.[0-9]{6}) left of ₹([0-9]+\.[0-9]{6})")
MICRO = Decimal(1_000_000)
# high enough not to interfere, low enough for the buckets (capacity x 60 s must stay < 2^53 / 1000)
HIGH_LIMITS = {"rpm": 100_000, "input_tpm": 100_000_000, "output_tpm": 100_000_000}


# --------------------------------------------------------------------------- money (exact)


@dataclass(frozen=True)
class Prices:
    """Per 1M tokens in the deployment's currency, and the FX rate to the budget currency."""

    currency: str
    input: Decimal
    output: Decimal
    fx: Decimal
    budget_currency: str

    def cost_micro(self, input_tokens: int, output_tokens: int) -> int:
        """Exact cost in budget micro-units, rounded up once (the gateway's rule)."""
        exact = (Decimal(input_tokens) * self.input + Decimal(output_tokens) * self.output) * self.fx
        # exact is in currency units x 1M tokens; / 1M tokens, x 1M micro: the two cancel
        return int(exact.to_integral_value(rounding=ROUND_CEILING))


def prices_from_config(tree: dict, at: datetime) -> Prices:
    dep = next(d for d in tree["deployments"] if d["id"] == DEPLOYMENT)
    ppm = dep["price_per_1m"]
    month = at.strftime("%Y-%m")
    ccy = tree.get("currency", "INR")
    rates = [f for f in tree.get("fx", []) if f["from"] == ppm["currency"] and f["month"] == month]
    fx = Decimal(str(rates[0]["rate"])) if ppm["currency"] != ccy else Decimal(1)
    if ppm["currency"] != ccy and not rates:
        raise SystemExit(f"examples/farebox.yaml has no {ppm['currency']}->{ccy} rate for {month}")
    return Prices(ppm["currency"], Decimal(str(ppm["input"])), Decimal(str(ppm["output"])), fx, ccy)


def money(micro: int | None) -> str:
    if micro is None:
        return "-"
    sign = "-" if micro < 0 else ""
    units, frac = divmod(abs(micro), 1_000_000)
    return f"{sign}₹{units:,}.{frac:06d}"


def parse_money(text: str) -> int:
    return int(Decimal(text) * MICRO)


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Planned:
    index: int
    key_index: int
    prompt: str
    input_tokens: int          # the simulator's count of this prompt (one user message)
    output_tokens: int         # x-sim-output-tokens
    tokens_per_s: int          # x-sim-tokens-per-s
    expected_cost_micro: int
    body: bytes


def plan_requests(n: int, keys: int, prices: Prices, seed: int) -> list[Planned]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [VOCAB[rng.randrange(len(VOCAB))] for _ in range(rng.randint(*PROMPT_WORDS))]
        prompt = f"Request {i}: " + " ".join(words) + "."
        in_tokens = len(SIM_TOKEN_RE.findall(prompt)) + 3   # + 3 per framed message (one user message)
        out_tokens = rng.randint(*OUTPUT_RANGE)
        body = orjson.dumps({
            "model": ALIAS, "messages": [{"role": "user", "content": prompt}],
            "max_completion_tokens": MAX_COMPLETION_TOKENS, "stream": True,
            "stream_options": {"include_usage": True},
        })
        out.append(Planned(i, i % keys, prompt, in_tokens, out_tokens, rng.randint(*TOKENS_PER_S),
                           prices.cost_micro(in_tokens, out_tokens), body))
    return out


def budget_mutator(limit_micro: int) -> Callable[[dict], None]:
    limit = str(Decimal(limit_micro) / MICRO)

    def mutate(tree: dict) -> None:
        b = tree.setdefault("budgets", {})
        b.pop("per_request_cap", None)  # no per-request cap: only the team budget decides
        b["scopes"] = [{"scope": SCOPE, "monthly_limit": limit, "soft_pct": 80}]
        rl = tree.setdefault("rate_limits", {})
        rl["key_defaults"] = HIGH_LIMITS
        rl["team_tpm"] = {TEAM: HIGH_LIMITS["input_tpm"]}
        for dep in tree["deployments"]:   # the per-deployment mirrors must not interfere either
            if dep["id"] == DEPLOYMENT:
                dep["limits"] = HIGH_LIMITS
    return mutate


# --------------------------------------------------------------------------- keys, admin token


def mint_keys(stack: Stack, n: int) -> list[str]:
    """Append n key records to the stack's keys.jsonl in-process (the CLI costs ~1 s a key)."""
    now = datetime.now(timezone.utc).isoformat()
    keys = []
    for _ in range(n):
        minted = mint_key(team=TEAM, app="playground", aliases=[ALIAS], now_iso=now)
        append_jsonl(stack.folder / KEYS, minted.record)
        keys.append(minted.plaintext)
    return keys


def admin_token(stack: Stack) -> str:
    out = subprocess.run([sys.executable, "-m", "farebox", "admin", "token", "create", "--config", str(stack.config),
                          "--name", "bench-finance", "--role", "finance", "--json"],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["token"]


async def wait_admin_live(session: aiohttp.ClientSession, url: str, token: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
            if resp.status == 200:
                return await resp.json()
            if time.monotonic() > deadline:
                raise RuntimeError(f"admin token not live: HTTP {resp.status} {await resp.text()}")
        await asyncio.sleep(0.1)


# --------------------------------------------------------------------------- one request


@dataclass
class Result:
    index: int
    status: int = 0
    sent_wall: float = 0.0
    recv_wall: float = 0.0       # headers received (wall clock, comparable with event times)
    latency_s: float = 0.0       # send -> headers
    total_s: float = 0.0         # send -> end of stream / body
    admit_ms: float | None = None
    request_id: str | None = None
    code: str | None = None
    message: str | None = None
    retry_after: str | None = None
    usage: dict | None = None
    done: bool = False
    error: str | None = None


_TIMING_RE = re.compile(r"admit;dur=([0-9.]+)")


async def one(session: aiohttp.ClientSession, url: str, key: str, p: Planned, go: asyncio.Event,
              delay_s: float = 0.0) -> Result:
    r = Result(p.index)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
               "x-sim-output-tokens": str(p.output_tokens), "x-sim-tokens-per-s": str(p.tokens_per_s)}
    await go.wait()
    if delay_s:
        await asyncio.sleep(delay_s)
    t0 = time.perf_counter()
    r.sent_wall = time.time()
    try:
        async with session.post(url, data=p.body, headers=headers) as resp:
            r.recv_wall = time.time()
            r.latency_s = time.perf_counter() - t0
            r.status = resp.status
            r.request_id = resp.headers.get("x-fb-request-id")
            r.retry_after = resp.headers.get("retry-after")
            m = _TIMING_RE.search(resp.headers.get("server-timing", ""))
            r.admit_ms = float(m.group(1)) if m else None
            if resp.status != 200:
                body = await resp.read()
                try:
                    err = orjson.loads(body).get("error") or {}
                    r.code, r.message = err.get("code"), err.get("message")
                except orjson.JSONDecodeError:
                    r.error = f"HTTP {resp.status}: {body[:200]!r}"
                r.total_s = time.perf_counter() - t0
                return r
            async for raw in resp.content:   # one SSE line at a time, to the end
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    r.done = True
                    continue
                chunk = orjson.loads(line[6:])
                if chunk.get("error"):
                    r.error = f"stream error: {chunk['error']}"
                if chunk.get("usage"):
                    r.usage = chunk["usage"]
            r.total_s = time.perf_counter() - t0
            if not r.done and r.error is None:
                r.error = "stream ended without [DONE]"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        r.error = f"{type(exc).__name__}: {exc}"
        r.total_s = time.perf_counter() - t0
    return r


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
    """team:platform folded in log order, with the state after every event."""

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


def fold(events: list[tuple[int, Any]], limit: int) -> Fold:
    f = Fold(peak_excess_beyond_overrun=-limit)
    for offset, e in events:
        if isinstance(e, RequestAdmitted):
            h = e.holds.get(SCOPE)
            if h is None:
                continue
            f.held += h
            f.admitted += 1
            f.holds_total += h
            f.est_input_total += e.est_input_tokens
        elif isinstance(e, RequestSettled):
            if SCOPE not in e.hold_released and SCOPE not in e.cost_by_scope:
                continue
            f.held -= e.hold_released.get(SCOPE, 0)
            f.settled += e.cost_by_scope.get(SCOPE, 0)
            f.overrun += e.overrun_micro
            f.settled_n += 1
        elif isinstance(e, HoldExpired):
            c = e.charged.get(SCOPE)
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


def listen_overflows() -> int | None:
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for head, vals in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            d = dict(zip(head.split()[1:], vals.split()[1:]))
            return int(d.get("ListenOverflows", 0))
    return None


# --------------------------------------------------------------------------- the run


async def run(stack: Stack, plan: list[Planned], n_keys: int, limit: int, prices: Prices,
              out: Callable[[str], None] = print, spread_s: float = 0.0) -> dict:
    keys = mint_keys(stack, n_keys)
    token = admin_token(stack)
    for k in (keys[0], keys[-1]):
        await asyncio.to_thread(wait_key_live, stack.gateway_url, k, 10.0)
    url = stack.gateway_url + "/v1/chat/completions"
    admin_url = f"{stack.gateway_url}/admin/v1/budgets/{SCOPE}"
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=120)
    session = aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
                                    auto_decompress=False, skip_auto_headers=("User-Agent",))
    try:
        before = await wait_admin_live(session, admin_url, token)
        if before["limit_micro"] != limit or before["settled_micro"] or before["held_micro"]:
            raise RuntimeError(f"unexpected budget before the run: {before}")
        how = "all at once" if not spread_s else f"evenly over {spread_s:g} s"
        out(f"{len(plan)} streaming requests from {n_keys} keys, {how} ...")
        go = asyncio.Event()
        step = spread_s / len(plan)
        tasks = [asyncio.create_task(one(session, url, keys[p.key_index], p, go, p.index * step)) for p in plan]
        await asyncio.sleep(0)          # every task is parked on `go`
        overflows0 = listen_overflows()
        t0 = time.perf_counter()
        go.set()
        results: list[Result] = await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
        overflows = None if overflows0 is None else listen_overflows() - overflows0
        events = await wait_settled(stack.events_path)
        admin = await wait_admin_live(session, admin_url, token)
    finally:
        await session.close()
    return analyse(plan, results, events, admin, limit, prices, wall, overflows)


def analyse(plan: list[Planned], results: list[Result], events: list[tuple[int, Any]], admin: dict, limit: int,
            prices: Prices, wall: float, overflows: int | None) -> dict:
    ok = [r for r in results if r.status == 200 and r.error is None]
    budget_429 = [r for r in results if r.status == 429 and r.code == "budget_exhausted"]
    bad_refusals = [r for r in budget_429 if r.retry_after is not None]
    errors = [r for r in results if r not in ok and r not in budget_429]
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
        first_info = {
            "request_index": first.index, "request_id": first.request_id,
            "message": first.message, "message_left_micro": msg_left, "message_limit_micro": msg_limit,
            "eventlog_left_at_receipt_micro": at_recv,
            "eventlog_prefix_with_message_figure": bool(exact),
            "eventlog_prefix_offsets": [o for o, _ in exact][:5],
            "settled_before_first_refusal": settled_at,
            "client_ms_after_start": round((first.recv_wall - min(r.sent_wall for r in results)) * 1000, 1),
        }

    admit_all = dist([r.admit_ms for r in results])
    admit_ok = dist([r.admit_ms for r in ok])
    admit_ref = dist([r.admit_ms for r in budget_429])
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
        "refused_with_retry_after": len(bad_refusals), "errors": len(errors),
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


# --------------------------------------------------------------------------- printing


def table(rep: dict, setup: dict) -> list[str]:
    lim = rep["limit_micro"]
    el = rep["eventlog"]
    a = rep["admission_ms"]
    fr = rep["unused_at_first_refusal"]

    def row(name: str, value: str, note: str = "") -> str:
        return f"  {name:<38} {value:>20}  {note}"

    def ms(d: dict) -> str:
        return "-" if d["p50"] is None else f"{d['p50']:.3f} / {d['p99']:.3f}"

    def pct_of_limit(micro: int) -> str:
        return f"{Decimal(micro) * 100 / Decimal(lim):.2f}% of limit"

    lines = [
        "",
        f"== budget bench: {rep['requests']} streaming requests, {setup['keys']} keys of team {TEAM}, alias {ALIAS}",
        row("predicted cost of all requests", money(setup["expected_total_micro"]),
            f"(mean {money(setup['expected_total_micro'] // rep['requests'])}; mean hold of admitted "
            f"{money(el['hold_mean_micro'])}: est. input {el['est_input_tokens_mean']} vs actual "
            f"{setup['expected_input_tokens'] / rep['requests']:.1f} tokens, + {MAX_COMPLETION_TOKENS} output)"),
        row("team:platform monthly limit", money(lim), f"({setup['budget_share_pct']}% of predicted)"),
        row("admitted (200, stream read to [DONE])", f"{rep['admitted']:,}",
            f"({rep['admitted'] * 100 / rep['requests']:.1f}%)"),
        row("refused 429 budget_exhausted", f"{rep['refused_budget_exhausted']:,}",
            f"(with Retry-After: {rep['refused_with_retry_after']})"),
        row("other errors", f"{rep['errors']:,}", ", ".join(f"{k}: {v}" for k, v in rep["error_kinds"].items())),
        row("settled (event log)", money(el["settled_micro"]),
            f"({el['settled']} settled, {el['expired']} expired = {money(el['expired_charged_micro'])})"),
        row("overshoot = max(0, settled - limit)", money(rep["overshoot_micro"]),
            f"({rep['overshoot_pct_of_limit']:.4f}% of limit; goal <= recorded overrun, never > 1%)"),
        row("recorded overrun (sum overrun_micro)", money(el["overrun_micro"]), ""),
        row("peak settled + held (any log prefix)", money(el["peak_committed_micro"]),
            f"({pct_of_limit(el['peak_committed_micro'])}; excess beyond overrun "
            f"{money(max(0, el['peak_excess_beyond_overrun_micro']))})"),
    ]
    if fr:
        lines += [
            row("unused at first refusal (429 message)", money(fr["message_left_micro"]),
                f"({pct_of_limit(fr['message_left_micro'] or 0)}; {fr['client_ms_after_start']} ms in,"
                f" {fr['settled_before_first_refusal']} settled by then)"),
            row("  same, event log at receipt", money(fr["eventlog_left_at_receipt_micro"]),
                f"(limit - settled - held; a log prefix shows the message's figure exactly: "
                f"{'yes' if fr['eventlog_prefix_with_message_figure'] else 'NO'})"),
        ]
    lines += [
        row("unused at the end (limit - settled)", money(rep["unused_at_end_micro"]),
            f"({rep['unused_at_end_pct']:.2f}% of limit)"),
        row("admission p50 / p99, all (ms)", ms(a["all"]), f"(server-timing admit; n={a['all']['n']}, max {a['all']['max']})"),
        row("  admitted / refused p50/p99 (ms)", f"{ms(a['admitted'])} | {ms(a['refused'])}", ""),
        row("stream total p50 / p99 (ms, client)", ms(rep["stream_total_ms"]), ""),
        row("wall time / requests per second", f"{rep['wall_s']:.2f} s / {rep['requests_per_s']:.0f}",
            f"(listen-queue overflows during the run: {rep['listen_overflows']})"),
        row("usage & cost == predicted, per request", "yes" if not rep["usage_mismatches"] else
            f"NO ({rep['usage_mismatches']})", ""),
        row("admin API settled == event log", str(rep["admin"]["settled_equals_eventlog"]),
            f"(settled {money(rep['admin']['settled_micro'])}, held {money(rep['admin']['held_micro'])}, "
            f"overrun {money(rep['admin']['overrun_micro'])}, state {rep['admin']['state']})"),
        row("admin API held == 0 at the end", str(rep["admin"]["held_is_zero"]), ""),
    ]
    for s in rep["error_samples"] + rep["usage_mismatch_samples"]:
        lines.append(f"  sample: {s}")
    return lines


def verdict(rep: dict) -> list[str]:
    """Problems worth a non-zero exit: money or contract violations (not performance)."""
    bad = []
    el = rep["eventlog"]
    if rep["overshoot_beyond_overrun_micro"] > 0:
        bad.append(f"overshoot {money(rep['overshoot_micro'])} exceeds recorded overrun {money(el['overrun_micro'])}")
    if rep["overshoot_pct_of_limit"] > 1:
        bad.append(f"overshoot is {rep['overshoot_pct_of_limit']:.3f}% of the limit (> 1%)")
    if el["peak_excess_beyond_overrun_micro"] > 0:
        bad.append(f"settled + held exceeded the limit by {money(el['peak_excess_beyond_overrun_micro'])} beyond overrun")
    if rep["refused_with_retry_after"]:
        bad.append(f"{rep['refused_with_retry_after']} budget refusals carried Retry-After")
    if rep["errors"]:
        bad.append(f"{rep['errors']} requests neither completed nor were refused with budget_exhausted")
    if rep["usage_mismatches"]:
        bad.append(f"{rep['usage_mismatches']} settled requests differ from their predicted usage/cost")
    if el["admitted"] != rep["admitted"]:
        bad.append(f"event log admitted {el['admitted']} but the client completed {rep['admitted']}")
    if el["settled"] + el["expired"] != el["admitted"] or el["held_micro_at_end"] != 0:
        bad.append(f"holds left open: {el['admitted']} admitted, {el['settled']} settled, {el['expired']} expired")
    if not (rep["admin"]["settled_equals_eventlog"] and rep["admin"]["held_is_zero"]):
        bad.append(f"admin API disagrees with the event log: {rep['admin']}")
    fr = rep["unused_at_first_refusal"]
    if fr and not fr["eventlog_prefix_with_message_figure"]:
        bad.append("no prefix of the event log shows the first refusal's 'left' figure")
    return bad


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=None, help="concurrent streaming requests (default 2000)")
    ap.add_argument("--keys", type=int, default=None, help="keys of team platform, round-robin (default 50)")
    ap.add_argument("--quick", action="store_true", help="200 requests from 10 keys, for a smoke run")
    ap.add_argument("--seed", type=int, default=20261001)
    ap.add_argument("--spread-s", type=float, default=0.0,
                    help="launch evenly over this many seconds instead of all at once (default 0: all at once)")
    ap.add_argument("--json", type=Path, default=OUT_JSON, help="where to write the figures")
    args = ap.parse_args(argv)
    n = args.requests or (200 if args.quick else 2000)
    n_keys = args.keys or (10 if args.quick else 50)
    if n < 1 or n_keys < 1:
        ap.error("--requests and --keys must be positive")

    import yaml
    tree = yaml.safe_load((EXAMPLES / "farebox.yaml").read_text())
    prices = prices_from_config(tree, datetime.now(timezone.utc))
    plan = plan_requests(n, n_keys, prices, args.seed)
    total = sum(p.expected_cost_micro for p in plan)
    limit = int((Decimal(total) * BUDGET_SHARE).to_integral_value(rounding=ROUND_FLOOR))
    # what the gateway will hold at most per request (the estimate is its own; this is the output part)
    out_hold = prices.cost_micro(0, MAX_COMPLETION_TOKENS)
    setup = {
        "requests": n, "keys": n_keys, "seed": args.seed, "spread_s": args.spread_s, "alias": ALIAS, "deployment": DEPLOYMENT,
        "price_per_1m": {"currency": prices.currency, "input": str(prices.input), "output": str(prices.output)},
        "fx": str(prices.fx), "budget_currency": prices.budget_currency,
        "output_tokens_range": list(OUTPUT_RANGE), "prompt_words_range": list(PROMPT_WORDS),
        "tokens_per_s_range": list(TOKENS_PER_S), "ttft_ms": TTFT_MS,
        "max_completion_tokens": MAX_COMPLETION_TOKENS,
        "expected_input_tokens": sum(p.input_tokens for p in plan),
        "expected_output_tokens": sum(p.output_tokens for p in plan),
        "expected_total_micro": total, "budget_share_pct": int(BUDGET_SHARE * 100), "limit_micro": limit,
        "hold_output_part_micro": out_hold,
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    print(f"farebox budget bench: {n} requests, {n_keys} keys; predicted total {money(total)}, "
          f"limit {money(limit)} ({setup['budget_share_pct']}%); {setup['cpus_usable']} usable cores")

    try:
        import uvloop
        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="farebox-bench-budget-") as tmp:
        with running_stack(Path(tmp), aliases=ALIAS, mutate=budget_mutator(limit),
                           sim_defaults={"ttft_ms": TTFT_MS, "tokens_per_s": 150}) as stack:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                rep = runner.run(run(stack, plan, n_keys, limit, prices, spread_s=args.spread_s))
    rep = {"setup": setup, **rep, "elapsed_s": round(time.monotonic() - started, 1)}
    for line in table(rep, setup):
        print(line)
    problems = verdict(rep)
    rep["problems"] = problems
    for p in problems:
        print(f"  PROBLEM: {p}")
    if not problems:
        print("  no budget violations: overshoot within recorded overrun, holds all closed, admin agrees")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rep, indent=2, default=str))
    print(f"figures written to {args.json} (elapsed {rep['elapsed_s']} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
