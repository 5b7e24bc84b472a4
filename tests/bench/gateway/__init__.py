"""What farebox adds to latency: ``python -m tests.bench.gateway`` (``make bench``).

One stack (provider simulator with ttft 0 / instant tokens / 32 output tokens,
plus a real ``farebox serve`` process) is driven by ONE client (aiohttp, one
event loop, uvloop when available) that measures the simulator directly and
through the gateway with the same code, in alternating rounds, so the
difference is what the gateway adds (its own work plus one more hop and one
more process competing for the same cores).

Sections:
  1. closed loop, non-streaming: latency p50/p99 direct vs gateway at c=1/10/100
  2. closed loop, streaming: time to first content token p50/p99, same levels
     (both for chat-openai and, unless --no-anthropic, chat-anthropic vs /v1/messages)
  3. open loop: a Poisson arrival schedule per rate, requests fired on schedule
     regardless of completions, latency measured from the SCHEDULED time (no
     coordinated omission); the ladder stops once the gateway's added p99 is over
     the budget (20 ms) twice in a row or errors appear; then the direct run
     continues alone until it saturates, to show where the client/simulator limit is.
  3b. unless --no-surfaces: the same alias through Chat Completions, the Responses API and the Messages API
     against the same direct run in alternating rounds, c <= 10 (``surfaces``): each surface's added
     latency beside chat's
  4. unless --workers-arm 0: sections 1-3 (openai only) again against a second stack
     served by ``farebox serve --workers N`` (default 2), its gateway CPU summed over
     the owner and every gateway process; then the two arms side by side.

Figures are printed as tables and written to var/bench/gateway.json.

Modules: ``targets`` (endpoints, client session, one request), ``stats`` (Level,
percentiles, CPU readings), ``closed_loop``, ``open_loop`` (schedule, ladder),
``report`` (tables, summary, arms side by side), ``workers_arm`` (the --workers
arm's pids, CPU meter and checks), ``run`` (plans, the run, ``main``). The names
below are re-exported so ``from tests.bench import gateway`` keeps one surface.
``--profile`` instead runs the gateway under cProfile for a fixed load and
prints where its time goes (figures under cProfile are not latency figures).
"""

from tests.bench.gateway.closed_loop import closed_loop, compare_closed, warm
from tests.bench.gateway.open_loop import (
    ADDED_P99_BUDGET_MS,
    MAX_IN_FLIGHT,
    RateRow,
    open_loop,
    rate_ladder,
    saturated,
    schedule,
)
from tests.bench.gateway.report import (
    arm_figures,
    arms_table,
    closed_table,
    cpu_cell,
    fmt,
    rate_header,
    rate_line,
    ratio,
    summary_lines,
)
from tests.bench.gateway.run import (
    FULL,
    OUT_JSON,
    OUT_PROF,
    QUICK,
    Plan,
    machine_facts,
    main,
    run_bench,
    run_profile,
    run_workers_arm,
)
from tests.bench.gateway.stats import NO_CPU, CpuMeter, Level, added, listen_counters, pct, thread_cpu
from tests.bench.gateway.targets import (
    MAX_TOKENS,
    PROMPT,
    REQUEST_TIMEOUT_S,
    SIM_ANTHROPIC_KEY,
    SIM_OPENAI_KEY,
    RequestFailed,
    Target,
    anthropic_target,
    call,
    new_session,
    openai_target,
    pairs,
)

__all__ = [
    "ADDED_P99_BUDGET_MS", "FULL", "MAX_IN_FLIGHT", "MAX_TOKENS", "NO_CPU", "OUT_JSON", "OUT_PROF", "PROMPT", "QUICK",
    "REQUEST_TIMEOUT_S", "SIM_ANTHROPIC_KEY", "SIM_OPENAI_KEY", "CpuMeter", "Level", "Plan", "RateRow",
    "RequestFailed", "Target", "added", "anthropic_target", "arm_figures", "arms_table", "call", "closed_loop",
    "closed_table", "compare_closed", "cpu_cell", "fmt", "listen_counters", "machine_facts", "main", "new_session",
    "open_loop", "openai_target", "pairs", "pct", "rate_header", "rate_ladder", "rate_line", "ratio", "run_bench",
    "run_profile", "run_workers_arm", "saturated", "schedule", "summary_lines", "thread_cpu", "warm",
]
