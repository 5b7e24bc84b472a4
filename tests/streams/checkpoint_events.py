"""Request lifecycles for the checkpoint tests and the rebuild benchmark (uniquely named module)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ledger.events import Event, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage

IST = ZoneInfo("Asia/Kolkata")
T0 = datetime(2026, 11, 30, 17, 0, tzinfo=timezone.utc)  # 22:30 IST: the log crosses into December
USAGE = TokenUsage(input=1_200, output=300)


def request_events(i: int, *, teams: int = 50, keys_per_team: int = 20, step_ms: int = 20) -> list[Event]:
    """Admitted / attempted / settled for request ``i``; many teams and keys."""
    team = f"team-{i % teams}"
    key = f"k-{i % teams}-{(i // teams) % keys_per_team}"
    at = T0 + timedelta(milliseconds=step_ms * i)
    hold = 20_000 + (i % 97) * 100
    cost = hold * (50 + i % 60) // 100  # some settle above the hold: overruns
    holds = {f"key:{key}": hold, f"team:{team}": hold, "bu:retail": hold}
    costs = {scope: cost for scope in holds}
    return [
        RequestAdmitted(
            time=at, request_id=f"req-{i}", team=team, key_id=key, business_unit="retail", app="bot",
            run_id=None, alias="chat-default", data_class="internal", est_input_tokens=1_200,
            max_output_tokens=512, holds=holds, currency="INR", price_version=3, pod="pod-a",
            hold_ttl_s=900, stream=True,
        ),
        RequestAttempted(
            time=at + timedelta(milliseconds=5), request_id=f"req-{i}", team=team, attempt=1,
            deployment="d-mumbai", provider="openai", account="acct", model="gpt-x", region="ap-south-1",
            outcome="ok", status=200, ttft_ms=300, latency_ms=1_800, usage=USAGE, cost_micro=cost,
            currency="INR", price_version=3, error_code=None,
        ),
        RequestSettled(
            time=at + timedelta(milliseconds=10), request_id=f"req-{i}", team=team, final_status=200,
            attempts=1, deployment="d-mumbai", usage=USAGE, cost_micro=cost, currency="INR",
            cost_by_scope=costs, hold_released={s: max(hold - cost, 0) for s in holds},
            overrun_micro=max(cost - hold, 0), cache_hit=False, latency_ms=1_800,
        ),
    ]
