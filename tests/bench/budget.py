"""Budgets under a burst: ``python -m tests.bench.budget`` (``make bench-budget``).

One stack (provider simulator with ttft 20 ms and 100-200 tokens/s per
request, so streams overlap, plus a real ``farebox serve``) with alias
``chat-openai`` (one OpenAI-dialect deployment, $2 in / $10 out per 1M tokens,
converted at the config's USD->INR rate). N keys of team ``platform`` (minted
through the admin API) fire R streaming requests all at once, keys
round-robin, each with ``max_completion_tokens`` 512 (so holds are pessimistic
as in production) and its own output length (``x-sim-output-tokens``, uniform
16-400) and prompt length. Every stream is read to the end.

Before the run the expected cost of every request is computed exactly
(simulator input-token rule x price x FX in Decimal, rounded up to micro-INR
once per request, as the gateway does) and the team budget is set to 60% of
the total, so about 60% of the work could be paid for.

Reported (and written to var/bench/budget.json):
  * admitted, and refused by code: 429 ``budget_exhausted`` (final: no
    Retry-After, ``x-should-retry: false``) or ``budget_reserved`` (after the
    wait: Retry-After and ``x-should-retry: true``; ``--retries`` retries them
    as the SDKs do); anything else is listed as an error;
  * overshoot = max(0, settled - limit) from the event log (``request.settled``
    cost on team:platform plus ``hold.expired`` charges), next to the recorded
    overrun (sum of ``overrun_micro``) and as % of the limit; plus the peak of
    settled + held over every prefix of the log;
  * the issue's goals (``goals``: met or missed, not an exit code);
  * unused budget at the first ``budget_exhausted``: from the 429's message ("has ₹X left
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
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Callable

import aiohttp

from tests.bench.budget_analysis import analyse, wait_settled
from tests.bench.budget_client import Result, admin_token, listen_overflows, mint_keys, one, wait_admin_live
from tests.bench.budget_plan import (
    ALIAS,
    BUDGET_SHARE,
    DEPLOYMENT,
    MAX_COMPLETION_TOKENS,
    OUTPUT_RANGE,
    PROMPT_WORDS,
    REQUEST_TIMEOUT_S,
    SCOPE,
    TEAM,
    TOKENS_PER_S,
    TTFT_MS,
    Planned,
    Prices,
    budget_mutator,
    money,
    plan_requests,
    prices_from_config,
)
from tests.bench.output import finish
from tests.harness import EXAMPLES, ROOT, Stack, running_stack, wait_key_live

OUT_JSON = ROOT / "var" / "bench" / "budget.json"


# --------------------------------------------------------------------------- the run


async def run(stack: Stack, plan: list[Planned], n_keys: int, limit: int, prices: Prices,
              out: Callable[[str], None] = print, spread_s: float = 0.0, max_wait_ms: int | None = None,
              retries: int = 0) -> dict:
    token = admin_token(stack)
    admin = admin_token(stack, "admin", "bench-admin")
    url = stack.gateway_url + "/v1/chat/completions"
    admin_url = f"{stack.gateway_url}/admin/v1/budgets/{SCOPE}"
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=120)
    session = aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
                                    auto_decompress=False, skip_auto_headers=("User-Agent",))
    try:
        await wait_admin_live(session, f"{stack.gateway_url}/admin/v1/keys", admin)
        keys = await mint_keys(session, stack.gateway_url, admin, n_keys)
        for k in (keys[0], keys[-1]):
            await asyncio.to_thread(wait_key_live, stack.gateway_url, k, 10.0)
        before = await wait_admin_live(session, admin_url, token)
        if before["limit_micro"] != limit or before["settled_micro"] or before["held_micro"]:
            raise RuntimeError(f"unexpected budget before the run: {before}")
        how = "all at once" if not spread_s else f"evenly over {spread_s:g} s"
        out(f"{len(plan)} streaming requests from {n_keys} keys, {how} ...")
        go = asyncio.Event()
        step = spread_s / len(plan)
        tasks = [asyncio.create_task(one(session, url, keys[p.key_index], p, go, p.index * step, max_wait_ms, retries))
                 for p in plan]
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
        *[row(f"refused 429 {code}", f"{n:,}", "") for code, n in sorted(rep["refused_by_code"].items())],
        row("  with wrong Retry-After / x-should-retry", f"{rep['refused_with_wrong_retry_headers']:,}",
            f"(retries of budget_reserved made: {rep['retried']})"),
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
            row("unused at first budget_exhausted (429 message)", money(fr["message_left_micro"]),
                f"({pct_of_limit(fr['message_left_micro'] or 0)}; {fr['client_ms_after_start']} ms in,"
                f" {fr['settled_before_first_refusal']} settled by then)"),
            row("  same, event log at receipt", money(fr["eventlog_left_at_receipt_micro"]),
                f"(limit - settled - held; a log prefix shows the message's figure exactly: "
                f"{'yes' if fr['eventlog_prefix_with_message_figure'] else 'NO'})"),
            row("  limit - settled at that instant", money(fr["limit_minus_settled_at_receipt_micro"]),
                f"(goal: below one request's worst case, {money(setup['worst_case_micro'])})"),
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


def goals(rep: dict, setup: dict) -> dict[str, bool]:
    """The issue's goals for embedded mode (reported, not an exit code: they depend on the machine's load)."""
    fr = rep["unused_at_first_refusal"]
    return {
        "overshoot beyond recorded overrun is 0": rep["overshoot_beyond_overrun_micro"] == 0,
        "total overshoot <= 1% of the limit": rep["overshoot_pct_of_limit"] <= 1,
        "unused at the end <= 5% of the limit": rep["unused_at_end_pct"] <= 5,
        "no budget_exhausted while limit - settled >= one worst case":
            fr is None or fr["limit_minus_settled_at_receipt_micro"] < setup["worst_case_micro"],
    }


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
    if rep["refused_with_wrong_retry_headers"]:
        bad.append(f"{rep['refused_with_wrong_retry_headers']} budget refusals had the wrong Retry-After or "
                   "x-should-retry (budget_exhausted: none and false; budget_reserved: both, true)")
    if rep["errors"]:
        bad.append(f"{rep['errors']} requests neither completed nor were refused with a budget code")
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
    ap.add_argument("--max-wait-ms", type=int, default=None,
                    help="x-fb-max-wait-ms on every request (default: none, the gateway's default wait)")
    ap.add_argument("--retries", type=int, default=0,
                    help="retry a 429 saying x-should-retry: true after its Retry-After, up to this many times "
                         "(the official SDKs: 2)")
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
        "worst_case_micro": prices.cost_micro(max(p.input_tokens for p in plan) * 2, MAX_COMPLETION_TOKENS),
        "max_wait_ms": args.max_wait_ms, "retries": args.retries,
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
                rep = runner.run(run(stack, plan, n_keys, limit, prices, spread_s=args.spread_s,
                                     max_wait_ms=args.max_wait_ms, retries=args.retries))
    rep = {"setup": setup, **rep, "elapsed_s": round(time.monotonic() - started, 1)}
    rep["goals"] = goals(rep, setup)
    for line in table(rep, setup):
        print(line)
    for name, met in rep["goals"].items():
        print(f"  goal {'met   ' if met else 'MISSED'} {name}")
    return finish(rep, verdict(rep), args.json,
                  "no budget violations: overshoot within recorded overrun, holds all closed, admin agrees", "  ")


if __name__ == "__main__":
    sys.exit(main())
