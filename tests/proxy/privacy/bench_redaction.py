"""Latency redaction adds: ``python -m tests.proxy.privacy.bench_redaction`` (part of ``make bench-privacy``).

Two real gateways on one simulator: one with the example policy (confidential data is redacted before a
deployment outside the network, and the answer restored), one with confidential data allowed as it is. The
same 4 KB prompts carrying confidential identifiers (Aadhaar, PAN, card, UPI, phone, email) go to the
simulator directly and through each gateway, one request at a time, interleaved (direct, off, on, in a
shuffled order per round) so a busy machine's drift hits the three alike. Both gateways scan every prompt;
only the redaction and the restoring of the answer differ. Printed: p50/p99 per arm, the latency each
gateway adds over the direct call (p50 of the per-round differences), the gateway/direct ratio, and what
redaction adds on top. Run by hand; never a timed assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import orjson

from tests.bench.gateway.targets import SIM_OPENAI_KEY, Target, call, new_session
from tests.harness import Stack, generous_limits, mint, running_stack, wait_key_live
from tests.proxy.privacy.prompts import aadhaar, card

PLACEHOLDER = re.compile(r"<[A-Z]+_\d+>")  # what a redacted value becomes (proxy.privacy.redact)
CONFIDENTIAL = ("ABCPK1234F", "ravi.k@okaxis", "+91 98765 43210", "priya.sharma@example.co.in")
WORDS = ("the customer asked about their loan statement and the branch reply was delayed because the "
         "verification of documents took longer than expected please summarise the thread").split()


def pii_prompt(rng: random.Random, size: int = 4096, identifiers: int = 6) -> str:
    """About ``size`` characters of prose with ``identifiers`` confidential identifiers (no secrets: those refuse)."""
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size - 40 * identifiers:
        words.append(rng.choice(WORDS))
    for _ in range(identifiers):
        found = rng.choice((aadhaar(rng), card(rng), *CONFIDENTIAL))
        words.insert(rng.randrange(len(words)), found)
    return " ".join(words)[:size]


def _allow_confidential(tree: dict) -> None:
    generous_limits(tree)
    tree["privacy"]["classes"]["confidential"] = {"action": "allow", "fail": "closed"}


def target(name: str, url: str, model: str, key: str, prompt: str) -> Target:
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                         "max_completion_tokens": 32})
    return Target(name, url, {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, body, body,
                  "openai")


def confidential_key(stack: Stack) -> str:
    key = mint(stack.config, "platform", "playground", "chat-openai", "--data-class-ceiling", "confidential")
    wait_key_live(stack.gateway_url, key)
    return key


async def measure(stacks: dict[str, Stack], rounds: int, seed: int = 11) -> dict[str, list[float]]:
    """Seconds per request per arm ("direct", "off", "on"), one request of each arm per round."""
    rng = random.Random(seed)
    prompts = [pii_prompt(rng) for _ in range(50)]
    keys = {arm: confidential_key(st) for arm, st in stacks.items()}
    sim_url = stacks["on"].sim_url
    out: dict[str, list[float]] = {"direct": [], "off": [], "on": []}
    async with new_session() as session:
        for i in range(rounds + 20):  # the first 20 rounds warm the pools and the scanner
            p = prompts[i % len(prompts)]
            arms = [target("direct", sim_url + "/v1/chat/completions", "sim-gpt-mid-2026-08", SIM_OPENAI_KEY, p),
                    *(target(arm, st.gateway_url + "/v1/chat/completions", "chat-openai", keys[arm], p)
                      for arm, st in stacks.items())]
            rng.shuffle(arms)
            for t in arms:
                t0 = time.perf_counter()
                end, _ = await call(session, t, stream=False)
                if i >= 20:
                    out[t.name].append(end - t0)
    for arm, st in stacks.items():  # the "on" gateway sent placeholders upstream, the "off" one the values
        async with new_session() as session, session.get(st.sim_url + "/_sim/requests", params={"n": "5"}) as resp:
            sent = orjson.dumps((await resp.json())["data"]).decode()
        if bool(PLACEHOLDER.search(sent)) != (arm == "on"):
            raise SystemExit(f"the {arm!r} gateway did not {'redact' if arm == 'on' else 'pass'} the identifiers")
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def report(got: dict[str, list[float]]) -> list[str]:
    ms = {arm: [v * 1000 for v in vs] for arm, vs in got.items()}
    lines = [f"redaction, 4 KB prompts with 6 confidential identifiers, {len(ms['direct'])} rounds at concurrency 1"]
    for arm in ("direct", "off", "on"):
        lines.append(f"  {arm:>6}: p50 {statistics.median(ms[arm]):6.2f} ms  p99 {_pct(ms[arm], 0.99):6.2f} ms")
    for arm, label in (("off", "redaction off"), ("on", "redaction on")):
        added = [g - d for g, d in zip(ms[arm], ms["direct"])]
        ratio = statistics.median(ms[arm]) / statistics.median(ms["direct"])
        lines.append(f"  gateway, {label:>13}: adds p50 {statistics.median(added):5.2f} ms, p99 {_pct(added, 0.99):5.2f} ms"
                     f" over direct (gateway/direct p50 x{ratio:.2f})")
    extra = [on - off for on, off in zip(ms["on"], ms["off"])]
    lines.append(f"  redaction itself: p50 {statistics.median(extra):+.2f} ms per request (on - off, per round)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="farebox-bench-redaction-") as tmp, ExitStack() as stack:
        on = stack.enter_context(running_stack(Path(tmp) / "on", aliases="chat-openai", mutate=generous_limits))
        off = stack.enter_context(running_stack(Path(tmp) / "off", aliases="chat-openai", mutate=_allow_confidential))
        got = asyncio.run(measure({"off": off, "on": on}, args.rounds))
    for line in report(got):
        print(line)
    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
