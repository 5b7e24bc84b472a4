"""Realistic request traffic for the worker benches: admitted / attempted / settled, as a pod records it.

Each request is built with the real event classes (``ledger.events``) the
way ``proxy.metering.meter.Meter`` fills them: holds on the key, team and business
unit scopes (3 scope entries per admit and per settle), the hold priced for
the estimated input plus ``max_output_tokens``, the actual usage priced with
the config's real prices and FX (``tests.bench.budget_plan.Prices``),
overrun recorded when the cost beats the hold. Teams are the cluster's
(``alpha``, ``beta``, ``gamma``, each with ``keys`` keys). Events are appended
to the pods' own producer (``streams.kafka.log.KafkaEventLog``), so topic
routing, key, value codec and the ``fb-id`` header are exactly production's.

Not modelled: leases on admits (``leases`` empty: the scope ledger treats an
unknown lease like none), retries (one attempt per request).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from ledger.events import Event, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from tests.bench.budget_plan import DEPLOYMENT, Prices
from tests.bench.distributed.env import Expected
from tests.distributed.cluster import TEAMS

ALIAS = "chat-openai"
MAX_OUTPUT = 512
INPUT_TOKENS = (20, 2000)
OUTPUT_TOKENS = (16, 600)
BU = "retail"  # the cluster's teams' business unit


@dataclass(frozen=True, slots=True)
class Req:
    request_id: str
    team: str
    key_id: str
    input_tokens: int
    output_tokens: int
    hold: int
    cost: int


class Traffic:
    """Draws requests and builds their events; adds every settled one to ``expected``."""

    def __init__(self, prices: Prices, expected: Expected, *, keys: int = 10, seed: int = 1,
                 pod: str = "bench-pod") -> None:
        self.prices = prices
        self.expected = expected
        self.keys = keys
        self.rng = random.Random(seed)
        self.pod = pod
        self.tag = uuid.uuid4().hex[:8]
        self.n = 0

    def draw(self) -> Req:
        rng = self.rng
        i, self.n = self.n, self.n + 1
        team = TEAMS[i % len(TEAMS)]
        in_tok, out_tok = rng.randint(*INPUT_TOKENS), rng.randint(*OUTPUT_TOKENS)
        est_in = max(1, int(in_tok * rng.uniform(0.9, 1.1)))   # the estimator is close, not exact
        hold = self.prices.cost_micro(est_in, MAX_OUTPUT)
        return Req(f"req-{self.tag}-{i}", team, f"fb-bench-{team}-{rng.randrange(self.keys)}", in_tok, out_tok,
                   hold, self.prices.cost_micro(in_tok, out_tok))

    def scopes(self, r: Req) -> list[str]:
        return [f"key:{r.key_id}", f"team:{r.team}", f"bu:{BU}"]

    def admitted(self, r: Req, now: datetime | None = None) -> RequestAdmitted:
        return RequestAdmitted(
            time=now or datetime.now(timezone.utc), request_id=r.request_id, team=r.team, key_id=r.key_id,
            business_unit=BU, app=f"app-{r.team}", run_id=None, alias=ALIAS, data_class="internal",
            est_input_tokens=r.input_tokens, max_output_tokens=MAX_OUTPUT, holds=dict.fromkeys(self.scopes(r), r.hold),
            currency=self.prices.budget_currency, price_version=1, pod=self.pod, hold_ttl_s=600, stream=True)

    def finished(self, r: Req, now: datetime | None = None) -> list[Event]:
        """The attempt and the settlement (counted in ``expected`` here: the caller appends both)."""
        now = now or datetime.now(timezone.utc)
        usage = TokenUsage(input=r.input_tokens, output=r.output_tokens, source="provider")
        ttft, latency = self.rng.randint(80, 900), self.rng.randint(900, 6000)
        attempted = RequestAttempted(
            time=now, request_id=r.request_id, team=r.team, attempt=1, deployment=DEPLOYMENT, provider="openai",
            account="sim", model="gpt-4o-mini", region="ap-south-1", outcome="ok", status=200, ttft_ms=ttft,
            latency_ms=latency, usage=usage, cost_micro=r.cost, currency=self.prices.budget_currency,
            price_version=1, error_code=None)
        settled = RequestSettled(
            time=now, request_id=r.request_id, team=r.team, final_status=200, attempts=1, deployment=DEPLOYMENT,
            usage=usage, cost_micro=r.cost, currency=self.prices.budget_currency,
            cost_by_scope=dict.fromkeys(self.scopes(r), r.cost), hold_released=dict.fromkeys(self.scopes(r), r.hold),
            overrun_micro=max(r.cost - r.hold, 0), cache_hit=False, latency_ms=latency)
        self.expected.requests[r.team] += 1
        self.expected.settled[r.team] += r.cost
        return [attempted, settled]

    def batch(self, n: int, window: int = 100) -> list[Event]:
        """``n`` whole requests in windows: ``window`` admits, then their attempts and settlements."""
        out: list[Event] = []
        for start in range(0, n, window):
            reqs = [self.draw() for _ in range(min(window, n - start))]
            out += [self.admitted(r) for r in reqs]
            for r in reqs:
                out += self.finished(r)
        return out
