"""Small event builders for the ledger tests (a uniquely named module: tests dirs are not packages)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ledger.events import HoldExpired, RatingCorrected, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage

IST = ZoneInfo("Asia/Kolkata")
T0 = datetime(2026, 10, 3, 10, 0, tzinfo=timezone.utc)  # October in Kolkata


def admit(
    request_id: str, holds: Mapping[str, int], *, at: datetime = T0, team: str = "payments", ttl_s: int = 900
) -> RequestAdmitted:
    return RequestAdmitted(
        time=at, request_id=request_id, team=team, key_id="k1", business_unit="retail", app="bot",
        run_id=None, alias="chat-default", data_class="internal", est_input_tokens=100,
        max_output_tokens=100, holds=dict(holds), currency="INR", price_version=1, pod="pod-a",
        hold_ttl_s=ttl_s, stream=False,
    )


def attempt(request_id: str, cost: int, *, at: datetime = T0, team: str = "payments", n: int = 1) -> RequestAttempted:
    return RequestAttempted(
        time=at + timedelta(seconds=1), request_id=request_id, team=team, attempt=n, deployment="d1",
        provider="openai", account="acct", model="m", region="r", outcome="ok", status=200, ttft_ms=10,
        latency_ms=20, usage=TokenUsage(input=10, output=10), cost_micro=cost, currency="INR",
        price_version=1, error_code=None,
    )


def settle(
    request_id: str, costs: Mapping[str, int], holds: Mapping[str, int] | None = None, *,
    at: datetime = T0, team: str = "payments",
) -> RequestSettled:
    holds = holds or {}
    cost = max(costs.values(), default=0)
    hold = max(holds.values(), default=0)
    return RequestSettled(
        time=at + timedelta(seconds=2), request_id=request_id, team=team, final_status=200, attempts=1,
        deployment="d1", usage=TokenUsage(input=10, output=10), cost_micro=cost, currency="INR",
        cost_by_scope=dict(costs), hold_released={s: max(h - costs.get(s, 0), 0) for s, h in holds.items()},
        overrun_micro=max(cost - hold, 0), cache_hit=False, latency_ms=20,
    )


def expire(request_id: str, charged: Mapping[str, int], *, at: datetime = T0, team: str = "payments") -> HoldExpired:
    return HoldExpired(time=at, request_id=request_id, team=team, charged=dict(charged), currency="INR")


def correct(
    request_id: str, old: Mapping[str, int], new: Mapping[str, int], *, sequence: int = 1,
    admitted_at: datetime = T0, at: datetime | None = None, team: str = "payments",
    versions: tuple[int, int] = (1, 2),
) -> RatingCorrected:
    """A re-rating correction of a one-attempt request whose scopes all carry the attempt's cost."""
    old_cost, new_cost = max(old.values(), default=0), max(new.values(), default=0)
    return RatingCorrected(
        time=at or admitted_at + timedelta(days=1), request_id=request_id, team=team, sequence=sequence,
        admitted_at=admitted_at, currency="INR", old_price_version=versions[0], price_version=versions[1],
        old_cost_micro=old_cost, cost_micro=new_cost, old_cost_by_scope=dict(old), cost_by_scope=dict(new),
        old_attempt_costs={"1": old_cost}, attempt_costs={"1": new_cost}, reason="test",
    )
