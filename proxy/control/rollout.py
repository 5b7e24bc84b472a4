"""Config canaries: a new config version served to a slice first, compared with the rest, widened in stages or
rolled back. Pure: values in, decisions out (``proxy.control.rollout_runner`` is the I/O around it).

* **What is canaried.** The routing part of a config: deployments, aliases, rate limits and the privacy policy
  (``CANARIED``). Keys, admin tokens, teams, budgets and prices take effect everywhere at once (a revoked key
  is revoked for every request). While a rollout runs, requests in the slice are served the head version (the
  candidate) and the others the baseline's routing over the head's keys (``baseline_document``).
* **The slice.** ``pods`` (named pods serve the candidate whole) or a share of requests: a request is in it when
  a stable hash of the rollout id and its session (``x-fb-session``) or key id falls below the current stage's
  percentage, so one caller sees one version, and widening only adds callers.
* **The comparison.** Per stage, each arm's requests, server errors (5xx), refusals for rate (429), cost and a
  latency histogram, summed over every process and pod (``ArmStats``). Once the candidate has ``min_requests``
  in the stage, a threshold crossed rolls it back at once (``decide``): error rate or 429 rate more than
  ``max_*_pct_points`` above the baseline's, p95 latency or cost per request more than ``max_*_ratio`` times the
  baseline's (those two only once the baseline has ``min_requests`` too; p95 only ``min_p95_delta_ms`` or more
  above). When the stage's window has passed with enough requests and nothing crossed, it widens to the next
  stage; widening to the last (100: nobody left to compare with) completes it.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Mapping

CANARIED = ("deployments", "aliases", "rate_limits", "privacy")
STATES = ("armed", "running", "paused", "completed", "rolled_back")
OPEN = ("armed", "running", "paused")
# latency histogram bucket upper bounds, ms (the last bucket is everything above)
BUCKETS_MS = (5, 10, 20, 50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000, 30000, 60000)


@dataclass(frozen=True, slots=True)
class Thresholds:
    min_requests: int = 20  # per arm and stage before the candidate is judged
    max_error_pct_points: Decimal = Decimal(5)  # candidate's 5xx rate above the baseline's, in points
    max_429_pct_points: Decimal = Decimal(5)
    max_p95_ratio: Decimal = Decimal("1.5")
    min_p95_delta_ms: int = 50  # a p95 this much above the baseline's at least, before the ratio counts
    max_cost_ratio: Decimal = Decimal("1.25")  # cost per request


@dataclass(frozen=True, slots=True)
class Rollout:
    id: int
    baseline: int  # the config version the rest is served
    stages: tuple[int, ...]  # percentages of requests, rising, the last 100
    stage: int  # index into stages
    window_s: float  # how long a stage is watched before it widens
    thresholds: Thresholds
    state: str  # one of STATES
    stage_since: datetime | None  # when the current stage began (None: armed)
    pods: tuple[str, ...] = ()  # a slice of named pods instead of a share of requests
    reason: str | None = None  # why it ended or paused
    candidate: int | None = None  # the head version when it started

    @property
    def pct(self) -> int:
        return self.stages[self.stage]

    def in_slice(self, pod: str, caller: str) -> bool:
        """Whether a request of ``caller`` (session or key id) on ``pod`` is served the candidate (a method, so
        the request path asks it of the rollout the pod holds without importing the control plane)."""
        if self.state not in ("running", "paused"):
            return self.state == "completed"
        if self.pods:
            return pod in self.pods
        digest = hashlib.sha256(f"{self.id}\x00{caller}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % 10_000 < self.pct * 100


@dataclass(slots=True)
class ArmStats:
    """One arm's figures over a stage (summed over processes: ``add``)."""

    requests: int = 0
    errors: int = 0  # answered 5xx
    rate_limited: int = 0  # answered 429
    cost_micro: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))

    def record(self, status: int, latency_ms: float, cost_micro: int) -> None:
        self.requests += 1
        self.errors += status >= 500
        self.rate_limited += status == 429
        self.cost_micro += cost_micro
        self.latency[bisect.bisect_left(BUCKETS_MS, latency_ms)] += 1

    def add(self, other: "ArmStats") -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.rate_limited += other.rate_limited
        self.cost_micro += other.cost_micro
        self.latency = [a + b for a, b in zip(self.latency, other.latency)]

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "errors": self.errors, "rate_limited": self.rate_limited,
                "cost_micro": self.cost_micro, "latency": list(self.latency)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ArmStats":
        return cls(int(data["requests"]), int(data["errors"]), int(data["rate_limited"]), int(data["cost_micro"]),
                   [int(n) for n in data["latency"]])

    def pct(self, count: int) -> Decimal:
        return Decimal(100 * count) / self.requests if self.requests else Decimal(0)

    @property
    def p95_ms(self) -> int | None:
        """The upper bound of the bucket holding the 95th percentile (None: no request; past the last bound:
        twice it)."""
        if not self.requests:
            return None
        need, seen = -(-95 * self.requests // 100), 0
        for i, n in enumerate(self.latency):
            seen += n
            if seen >= need:
                return BUCKETS_MS[i] if i < len(BUCKETS_MS) else 2 * BUCKETS_MS[-1]
        return 2 * BUCKETS_MS[-1]

    @property
    def cost_per_request(self) -> Decimal:
        return Decimal(self.cost_micro) / self.requests if self.requests else Decimal(0)

    def summary(self) -> dict[str, Any]:
        return {"requests": self.requests, "error_pct": f"{self.pct(self.errors):.1f}",
                "rate_limited_pct": f"{self.pct(self.rate_limited):.1f}", "p95_ms": self.p95_ms,
                "cost_per_request_micro": str(self.cost_per_request.quantize(Decimal(1)))}


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # widen | complete | rollback | wait
    reason: str


def decide(r: Rollout, candidate: ArmStats, baseline: ArmStats, now: datetime) -> Decision:
    """What the running rollout does next, from its current stage's figures (module docstring)."""
    t = r.thresholds
    if candidate.requests < t.min_requests:
        return Decision("wait", f"{candidate.requests} of {t.min_requests} candidate requests in the stage")
    crossed = _crossed(t, candidate, baseline)
    if crossed is not None:
        return Decision("rollback", crossed)
    assert r.stage_since is not None
    if (now - r.stage_since).total_seconds() < r.window_s:
        return Decision("wait", "the stage's window has not passed")
    if r.stage + 2 >= len(r.stages):  # the next stage is everyone: nothing left to compare with
        return Decision("complete", f"healthy at {r.pct}% for {r.window_s:g} s: the candidate serves everyone")
    return Decision("widen", f"healthy at {r.pct}% for {r.window_s:g} s: widening to {r.stages[r.stage + 1]}%")


def _crossed(t: Thresholds, c: ArmStats, b: ArmStats) -> str | None:
    for name, count, limit in (("error rate", "errors", t.max_error_pct_points),
                               ("429 rate", "rate_limited", t.max_429_pct_points)):
        cp, bp = c.pct(getattr(c, count)), b.pct(getattr(b, count))
        if cp - bp > limit:
            return f"{name} {cp:.1f}% against the baseline's {bp:.1f}% (more than {limit} points above)"
    if b.requests < t.min_requests:
        return None
    cp95, bp95 = c.p95_ms, b.p95_ms
    if cp95 is not None and bp95 and cp95 - bp95 >= t.min_p95_delta_ms and Decimal(cp95) / bp95 > t.max_p95_ratio:
        return f"p95 latency {cp95} ms against the baseline's {bp95} ms (more than x{t.max_p95_ratio})"
    if b.cost_per_request and c.cost_per_request / b.cost_per_request > t.max_cost_ratio:
        return (f"cost per request {c.cost_per_request:.0f} against the baseline's {b.cost_per_request:.0f} "
                f"micro-units (more than x{t.max_cost_ratio})")
    return None


def step_name(before: Rollout, after: Rollout) -> str | None:
    """The step from ``before`` to ``after`` (the same name whoever took it or noticed it), None: no step."""
    if after.state == before.state and after.stage == before.stage:
        return None
    if after.state in ("completed", "rolled_back"):
        return "complete" if after.state == "completed" else "rollback"
    if before.state == "armed":
        return "start"
    if after.stage != before.stage:
        return "widen"
    return "pause" if after.state == "paused" else "resume"


def advanced(r: Rollout, decision: Decision, now: datetime) -> Rollout:
    """The rollout after ``decision`` (``wait``: unchanged)."""
    if decision.action == "widen":
        return replace(r, stage=r.stage + 1, stage_since=now, reason=decision.reason)
    if decision.action == "complete":
        return replace(r, state="completed", reason=decision.reason)
    if decision.action == "rollback":
        return replace(r, state="rolled_back", reason=decision.reason)
    return r


def baseline_document(head: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """The document the rest is served: the head's, with the baseline's routing (``CANARIED``)."""
    control = dict(head.get("control") or {})
    for name in CANARIED:
        if name in (baseline.get("control") or {}):
            control[name] = baseline["control"][name]
        else:
            control.pop(name, None)
    return {**head, "control": control}
