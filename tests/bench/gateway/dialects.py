"""The provider dialects side by side: Chat Completions through an alias on each dialect's deployment
(chat-openai, chat-azure, chat-bedrock, chat-gemini), each against a direct run of the simulator in that
provider's own wire (Azure's URL and api-key, Bedrock's SigV4-signed Converse and event-stream, Gemini's
generateContent and SSE), in alternating rounds so drift on a shared machine hits all alike. What it answers:
does a dialect's translation add latency of its own (the issue's bar: added p50 within 10% of the OpenAI
dialect's in the same run, or within a tenth of a millisecond)?

The Bedrock direct run is signed with botocore once per round (a signature is good for five minutes); the
gateway signs each request itself, which is part of what its added latency measures.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import orjson

from tests.bench.gateway.closed_loop import closed_loop, warm
from tests.bench.gateway.report import fmt
from tests.bench.gateway.stats import NO_CPU, CpuMeter, Level, added
from tests.bench.gateway.targets import MAX_TOKENS, PROMPT, SIM_OPENAI_KEY, Target, new_session, openai_target
from tests.harness import Stack

DIALECTS = {"openai": "chat-openai", "azure_openai": "chat-azure", "bedrock_converse": "chat-bedrock",
            "gemini": "chat-gemini"}
SIM_AZURE_KEY = "sim-azure-retail-0001"  # examples/simulator.yaml
SIM_AWS = ("AKIASIMRETAIL0001", "sim-aws-retail-secret-0001")
SIM_GEMINI_KEY = "sim-gemini-retail-0001"
WITHIN, OR_MS = 0.10, 0.1


def _bedrock(sim: str) -> Target:
    from proxy.upstream.credentials.aws import AwsSigner, static_credentials

    signer = AwsSigner(static_credentials(":".join(SIM_AWS)), "ap-south-1")
    body = orjson.dumps({"messages": [{"role": "user", "content": [{"text": PROMPT}]}],
                         "inferenceConfig": {"maxTokens": MAX_TOKENS}})
    base = sim + "/model/sim.nova-mid-v1%3A0/"
    headers = {"content-type": "application/json", "accept": "application/json"}
    # One signature per URL: the stream's is a different request. The bench sends what each URL was signed for.
    signed = {**headers, **signer.sign("POST", base + "converse", headers, body)}
    stream = {**headers, "accept": "application/vnd.amazon.eventstream"}
    stream_signed = {**stream, **signer.sign("POST", base + "converse-stream", stream, body)}
    return Target("direct-bedrock", base + "converse", signed, body, body, "bedrock", base + "converse-stream"), \
        Target("direct-bedrock-stream", base + "converse-stream", stream_signed, body, body, "bedrock",
               base + "converse-stream")


def direct_targets(stack: Stack) -> dict[str, tuple[Target, Target]]:
    """dialect -> (its direct non-stream target, its direct stream target), freshly signed."""
    sim = stack.sim_url
    openai = openai_target("direct-openai", sim + "/v1/chat/completions", "sim-gpt-mid-2026-08", SIM_OPENAI_KEY)
    azure = openai_target("direct-azure", sim + "/openai/deployments/sim-azure-gpt-mid/chat/completions"
                                                "?api-version=2024-10-21", "sim-azure-gpt-mid", "")
    azure = Target(azure.name, azure.url, {"api-key": SIM_AZURE_KEY, "Content-Type": "application/json"},
                   azure.body, azure.stream_body, "openai")
    gemini_body = orjson.dumps({"contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
                                "generationConfig": {"maxOutputTokens": MAX_TOKENS}})
    model = sim + "/v1beta/models/sim-gemini-flash-2026-09"
    gemini = Target("direct-gemini", model + ":generateContent", {"x-goog-api-key": SIM_GEMINI_KEY,
                    "Content-Type": "application/json"}, gemini_body, gemini_body, "gemini",
                    model + ":streamGenerateContent?alt=sse")
    return {"openai": (openai, openai), "azure_openai": (azure, azure), "bedrock_converse": _bedrock(sim),
            "gemini": (gemini, gemini)}


async def compare_dialects(stack: Stack, levels: dict[int, int], *, rounds: int = 4, cpu: CpuMeter = NO_CPU,
                           out: Callable[[str], None] = print) -> dict:
    """Per stream kind and level: each dialect's direct and gateway p50/p99 and added p50/p99, in ms."""
    gateways = {d: openai_target(f"gw-{d}", stack.gateway_url + "/v1/chat/completions", alias, stack.key)
                for d, alias in DIALECTS.items()}
    sessions = {name: new_session() for d in DIALECTS for name in (f"direct-{d}", f"gw-{d}")}
    report: dict = {}
    try:
        for stream in (False, True):
            for d in DIALECTS:
                direct = direct_targets(stack)[d][1 if stream else 0]
                await warm(sessions[f"direct-{d}"], direct, max(levels), requests=3 * max(levels))
                await warm(sessions[f"gw-{d}"], gateways[d], max(levels), requests=3 * max(levels))
            rows = []
            for conc, n in levels.items():
                acc = {name: Level(name, stream) for name in sessions}
                for _ in range(rounds):
                    directs = direct_targets(stack)  # re-signed each round
                    for d in DIALECTS:
                        for name, target in ((f"direct-{d}", directs[d][1 if stream else 0]), (f"gw-{d}", gateways[d])):
                            gc.collect()
                            acc[name].merge(await closed_loop(sessions[name], target, stream=stream, concurrency=conc,
                                                              requests=max(1, n // rounds),
                                                              cpu=NO_CPU if name.startswith("direct") else cpu))
                row: dict = {"concurrency": conc}
                for d in DIALECTS:
                    ds, gs = acc[f"direct-{d}"].summary(), acc[f"gw-{d}"].summary()
                    row[d] = {**gs, "direct_p50_ms": ds["p50_ms"], "direct_errors": ds["errors"],
                              "added_p50_ms": added(gs["p50_ms"], ds["p50_ms"]),
                              "added_p99_ms": added(gs["p99_ms"], ds["p99_ms"])}
                rows.append(row)
            report["streaming" if stream else "non_streaming"] = rows
            out(dialects_table(stream, rows))
    finally:
        for session in sessions.values():
            await session.close()
    return report


def within(row: dict, dialect: str) -> bool | None:
    a, o = row[dialect].get("added_p50_ms"), row["openai"].get("added_p50_ms")
    if a is None or o is None:
        return None
    return a <= o * (1 + WITHIN) or a - o <= OR_MS


def dialects_table(stream: bool, rows: list[dict]) -> str:
    what = "TTFT" if stream else "latency"
    lines = [f"\n== dialects, {'STREAMING' if stream else 'non-streaming'} ({what}): chat through each dialect's "
             "alias vs a direct run of the simulator in that provider's wire, alternating rounds",
             f"{'conc':>5} | " + " | ".join(f"{d + ' added p50/p99':>30}" for d in DIALECTS)
             + " | " + " ".join(f"{d[:6] + ' us/req':>13}" for d in DIALECTS) + " | within 10% of openai"]
    for r in rows:
        cells = [f"{fmt(r[d]['added_p50_ms'], 17)}/{fmt(r[d]['added_p99_ms'], 0).strip():<12}" for d in DIALECTS]
        cpu = [fmt(r[d].get("gateway_cpu_us_per_req"), 13, 0) for d in DIALECTS]
        verdict = " ".join(f"{d}:{'yes' if within(r, d) else 'NO'}" for d in list(DIALECTS)[1:])
        errors = sum(r[d]["errors"] + r[d]["direct_errors"] for d in DIALECTS)
        lines.append(f"{r['concurrency']:>5} | " + " | ".join(cells) + " | " + " ".join(cpu) + f" | {verdict}"
                     + (f"  <-- {errors} ERRORS" if errors else ""))
    lines.append("  (ms; added = gateway minus direct; us/req = gateway CPU per request)")
    return "\n".join(lines)


def dialect_errors(report: dict) -> int:
    return sum(r[d]["errors"] + r[d]["direct_errors"] for rows in report.values() for r in rows for d in DIALECTS)


def dialect_summary(report: dict) -> list[str]:
    lines = []
    for kind, rows in report.items():
        one = next((r for r in rows if r["concurrency"] == 1), None)
        if one is None:
            continue
        figures = "/".join(fmt(one[d]["added_p50_ms"], 0, 2).strip() for d in DIALECTS)
        verdict = ", ".join(f"{d} {'within' if within(one, d) else 'NOT within'} 10%" for d in list(DIALECTS)[1:])
        lines.append(f"  dialects {kind:<13} c=1 added p50 {'/'.join(DIALECTS)} {figures} ms ({verdict})")
    return lines
