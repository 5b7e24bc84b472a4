"""Events for the streams tests (a uniquely named module: tests dirs are not packages)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ledger.events import Event, HoldExpired, LeaseGranted, RequestAdmitted

T0 = datetime(2026, 10, 3, 10, 0, tzinfo=timezone.utc)


def make_event(i: int, team: str = "payments") -> Event:
    """A deterministic event per ``i``, cycling through a few types."""
    time = T0 + timedelta(milliseconds=i)
    if i % 3 == 0:
        return HoldExpired(time=time, request_id=f"req-{i}", team=team, charged={f"team:{team}": i}, currency="INR")
    if i % 3 == 1:
        return LeaseGranted(
            time=time, lease_id=f"lease-{i}", scope=f"team:{team}", pod="pod-a", amount_micro=i,
            expires_at=time + timedelta(minutes=5),
        )
    return RequestAdmitted(
        time=time, request_id=f"req-{i}", team=team, key_id="fb-dev-1a2b", business_unit="retail",
        app="bot", run_id=None, alias="chat-default", data_class="internal", est_input_tokens=i,
        max_output_tokens=256, holds={f"team:{team}": i}, currency="INR", price_version=1, pod="pod-a",
        hold_ttl_s=600, stream=False,
    )
