"""The client surfaces side by side: the same alias through Chat Completions, the Responses API and the
Messages API, each against a direct run of the upstream call it makes, in alternating rounds (direct and
gateway of each surface in turn, round after round) so drift on a shared machine hits all alike. What it
answers: does a surface add latency of its own beyond chat's (the issue's bar: a surface's added p50 within 10%
of chat's, or within a tenth of a millisecond)?

Per dialect: ``openai`` (alias chat-openai: the Responses API passed through to the simulator's /v1/responses,
so its direct run is that endpoint; Messages translated to chat, against /v1/chat/completions) and, unless
--no-anthropic, ``anthropic`` (alias chat-anthropic: the Messages API passed through, Chat Completions and
Responses translated; every direct run is the simulator's /v1/messages).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from tests.bench.gateway.closed_loop import closed_loop, warm
from tests.bench.gateway.report import fmt
from tests.bench.gateway.stats import NO_CPU, CpuMeter, Level, added
from tests.bench.gateway.targets import (
    SIM_ANTHROPIC_KEY,
    SIM_OPENAI_KEY,
    Target,
    anthropic_target,
    new_session,
    openai_target,
    responses_target,
)
from tests.harness import Stack

SURFACES = ("chat", "responses", "messages")
WITHIN = 0.10  # a surface's added p50 within 10% of chat's ...
OR_MS = 0.1  # ... or within 0.1 ms (below that the difference is noise at these latencies)


def surface_targets(stack: Stack, anthropic: bool, store: bool = True) -> dict[str, dict[str, tuple[Target, Target]]]:
    """dialect -> {surface: (its direct run, the gateway target)}; ``store``: the Responses requests' own."""
    gw, sim = stack.gateway_url, stack.sim_url
    chat_direct = openai_target("direct-chat", sim + "/v1/chat/completions", "sim-gpt-mid-2026-08", SIM_OPENAI_KEY)
    out = {"openai": {
        "chat": (chat_direct, openai_target("chat", gw + "/v1/chat/completions", "chat-openai", stack.key)),
        "responses": (responses_target("direct-responses", sim + "/v1/responses", "sim-gpt-mid-2026-08",
                                       SIM_OPENAI_KEY),
                      responses_target("responses", gw + "/v1/responses", "chat-openai", stack.key, store)),
        "messages": (chat_direct, anthropic_target("messages", gw + "/v1/messages", "chat-openai", stack.key))}}
    if anthropic:
        direct = anthropic_target("direct-messages", sim + "/v1/messages", "sim-claude-mid-2026-08",
                                  SIM_ANTHROPIC_KEY)
        out["anthropic"] = {
            "chat": (direct, openai_target("chat", gw + "/v1/chat/completions", "chat-anthropic", stack.key)),
            "responses": (direct, responses_target("responses", gw + "/v1/responses", "chat-anthropic", stack.key,
                                                   store)),
            "messages": (direct, anthropic_target("messages", gw + "/v1/messages", "chat-anthropic", stack.key))}
    return out


async def compare_surfaces(stack: Stack, levels: dict[int, int], anthropic: bool, *, rounds: int = 4,
                           cpu: CpuMeter = NO_CPU, out: Callable[[str], None] = print, store: bool = True) -> dict:
    """Per dialect, stream and level: direct and each surface's p50/p99 and added p50/p99, in ms."""
    report: dict = {}
    for dialect, pairs in surface_targets(stack, anthropic, store).items():
        targets = list({t.name: t for pair in pairs.values() for t in pair}.values())  # each direct run once
        sessions = {t.name: new_session() for t in targets}
        try:
            for target in targets:
                await warm(sessions[target.name], target, max(levels), requests=3 * max(levels))
            report[dialect] = {}
            for stream in (False, True):
                rows = []
                for conc, n in levels.items():
                    acc = {t.name: Level(t.name, stream) for t in targets}
                    for _ in range(rounds):
                        for target in targets:
                            gc.collect()
                            acc[target.name].merge(await closed_loop(
                                sessions[target.name], target, stream=stream, concurrency=conc,
                                requests=max(1, n // rounds),
                                cpu=NO_CPU if target.name.startswith("direct") else cpu))
                    row: dict = {"concurrency": conc, "direct": acc[pairs["chat"][0].name].summary()}
                    for surface in SURFACES:
                        d, s = acc[pairs[surface][0].name].summary(), acc[surface].summary()
                        row[surface] = {**s, "direct_p50_ms": d["p50_ms"], "direct_errors": d["errors"],
                                        "added_p50_ms": added(s["p50_ms"], d["p50_ms"]),
                                        "added_p99_ms": added(s["p99_ms"], d["p99_ms"])}
                    rows.append(row)
                report[dialect]["streaming" if stream else "non_streaming"] = rows
                out(surfaces_table(dialect, stream, rows))
        finally:
            for session in sessions.values():
                await session.close()
    return report


def within(surface: dict, chat: dict) -> bool | None:
    a, c = surface.get("added_p50_ms"), chat.get("added_p50_ms")
    if a is None or c is None:
        return None
    return a <= c * (1 + WITHIN) or a - c <= OR_MS


def surfaces_table(dialect: str, stream: bool, rows: list[dict]) -> str:
    what = "TTFT" if stream else "latency"
    lines = [f"\n== surfaces, {'STREAMING' if stream else 'non-streaming'} ({what}) -- {dialect}: "
             "the same alias through each API vs a direct run of its upstream call, alternating rounds",
             f"{'conc':>5} | {'chat direct p50':>15} | " + " | ".join(f"{s + ' added p50/p99':>24}" for s in SURFACES)
             + " | " + " ".join(f"{s[:4] + ' us/req':>11}" for s in SURFACES) + " | within 10% of chat"]
    for r in rows:
        cells = [f"{fmt(r[s]['added_p50_ms'], 11)}/{fmt(r[s]['added_p99_ms'], 0).strip():<12}" for s in SURFACES]
        cpu = [fmt(r[s].get("gateway_cpu_us_per_req"), 11, 0) for s in SURFACES]
        verdict = " ".join(f"{s}:{'yes' if within(r[s], r['chat']) else 'NO'}" for s in SURFACES[1:])
        errors = sum(r[s]["errors"] + r[s]["direct_errors"] for s in SURFACES)
        lines.append(f"{r['concurrency']:>5} | {fmt(r['direct']['p50_ms'], 15)} | " + " | ".join(cells) + " | "
                     + " ".join(cpu) + f" | {verdict}" + (f"  <-- {errors} ERRORS" if errors else ""))
    lines.append("  (ms; added = surface minus direct; us/req = gateway CPU per request)")
    return "\n".join(lines)


def surface_errors(report: dict) -> int:
    return sum(r[s]["errors"] + r[s]["direct_errors"] for kinds in report.values() for rows in kinds.values()
               for r in rows for s in SURFACES)


def surface_summary(report: dict) -> list[str]:
    """One line per dialect and kind: the c=1 added p50 of each surface and whether it is within chat's bar."""
    lines = []
    for dialect, kinds in report.items():
        for kind, rows in kinds.items():
            one = next((r for r in rows if r["concurrency"] == 1), None)
            if one is None:
                continue
            figures = "/".join(fmt(one[s]["added_p50_ms"], 0, 2).strip() for s in SURFACES)
            verdict = ", ".join(f"{s} {'within' if within(one[s], one['chat']) else 'NOT within'} 10%"
                                for s in SURFACES[1:])
            lines.append(f"  surfaces {dialect:<9} {kind:<13} c=1 added p50 chat/responses/messages {figures} ms"
                         f" ({verdict})")
    return lines
