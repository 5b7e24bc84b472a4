"""The budget bench's plan: exact prices, the requests it fires and the config it runs under.

Shared by ``tests.bench.budget`` (embedded) and ``tests.bench.distributed`` (3 pods):
the expected cost of every request is computed exactly before the run (the
simulator's input-token rule x price x FX in Decimal, rounded up to micro-INR
once per request, as the gateway does), so a budget can be set to a share of
the total and every settled cost checked against its prediction.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from typing import Callable

import orjson

from infra.simulator.generation import VOCAB

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
