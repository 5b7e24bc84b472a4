"""A small hand-written archive for the warehouse tests (a uniquely named module).

Five requests of team ``payments`` (and one of ``search``) around midnight of
1 December in Kolkata (18:30 UTC on 30 November):

* r1 admitted 23:50 IST on 30 Nov, settled after midnight: November's money;
* r2 admitted 00:10 IST on 1 Dec, settled with an overrun;
* r3 failed over: attempt 1 on d-oai (503), attempt 2 on d-ant (ok);
* r4 never settled: its hold expired, charged in full;
* r5 still open (held);
* s1 (team search, an agent run) settled in December.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from ledger.codec import encode
from ledger.events import Event, HoldExpired, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from streams.archive.write import ArchiveWriter, Record

MIDNIGHT_IST = datetime(2026, 11, 30, 18, 30, tzinfo=timezone.utc)


def _admit(rid: str, at: datetime, hold: int, *, team: str = "payments", app: str = "bot", alias: str = "chat-default",
           run: str | None = None) -> RequestAdmitted:
    scopes = [f"key:{team}-k", f"team:{team}", "bu:retail"] + ([f"run:{run}"] if run else [])
    return RequestAdmitted(
        time=at, request_id=rid, team=team, key_id=f"{team}-k", business_unit="retail", app=app, run_id=run,
        alias=alias, data_class="internal", est_input_tokens=100, max_output_tokens=200,
        holds={s: hold for s in scopes}, currency="INR", price_version=1, pod="pod-a", hold_ttl_s=900, stream=False)


def _attempt(rid: str, at: datetime, n: int, deployment: str, ok: bool, usage: TokenUsage, cost: int,
             team: str = "payments") -> RequestAttempted:
    return RequestAttempted(
        time=at + timedelta(seconds=n), request_id=rid, team=team, attempt=n, deployment=deployment,
        provider=deployment.removeprefix("d-"), account="acct", model=f"model-{deployment}", region="ap-south-1",
        outcome="ok" if ok else "unavailable", status=200 if ok else 503, ttft_ms=100 * n if ok else None,
        latency_ms=900, usage=usage if ok else TokenUsage(), cost_micro=cost if ok else 0, currency="INR",
        price_version=1, error_code=None if ok else "upstream_unavailable")


def _settle(rid: str, at: datetime, hold: int, cost: int, deployment: str, attempts: int, usage: TokenUsage,
            scopes: list[str]) -> RequestSettled:
    team = scopes[1].removeprefix("team:")
    return RequestSettled(
        time=at, request_id=rid, team=team, final_status=200, attempts=attempts, deployment=deployment, usage=usage,
        cost_micro=cost, currency="INR", cost_by_scope={s: cost for s in scopes},
        hold_released={s: max(hold - cost, 0) for s in scopes}, overrun_micro=max(cost - hold, 0), cache_hit=False,
        latency_ms=1_000)


def month_events() -> list[Event]:
    """The requests above in the order their pods logged them."""
    u = TokenUsage(input=1_000, cached_input=200, output=300, reasoning=50)
    pay = ["key:payments-k", "team:payments", "bu:retail"]
    t1, t2 = MIDNIGHT_IST - timedelta(minutes=40), MIDNIGHT_IST + timedelta(minutes=10)
    t3, t4, t5 = MIDNIGHT_IST + timedelta(minutes=20), MIDNIGHT_IST + timedelta(minutes=30), MIDNIGHT_IST + timedelta(hours=1)
    return [
        _admit("r1", t1, 10_000),
        _attempt("r1", t1, 1, "d-oai", True, u, 7_000),
        _settle("r1", MIDNIGHT_IST + timedelta(minutes=5), 10_000, 7_000, "d-oai", 1, u, pay),
        _admit("r2", t2, 10_000, app="web"),
        _attempt("r2", t2, 1, "d-oai", True, u, 12_000),
        _settle("r2", t2 + timedelta(seconds=30), 10_000, 12_000, "d-oai", 1, u, pay),
        _admit("r3", t3, 20_000, alias="chat-fast"),
        _attempt("r3", t3, 1, "d-oai", False, u, 0),
        _attempt("r3", t3, 2, "d-ant", True, u, 15_000),
        _settle("r3", t3 + timedelta(seconds=30), 20_000, 15_000, "d-ant", 2, u, pay),
        _admit("r4", t4, 5_000),
        HoldExpired(time=t4 + timedelta(minutes=15), request_id="r4", team="payments",
                    charged={s: 5_000 for s in pay}, currency="INR"),
        _admit("r5", t5, 3_000),
        _admit("s1", t5, 4_000, team="search", run="agent-7"),
        _attempt("s1", t5, 1, "d-self", True, u, 2_500, team="search"),
        _settle("s1", t5 + timedelta(seconds=20), 4_000, 2_500, "d-self", 1, u,
                ["key:search-k", "team:search", "bu:retail", "run:agent-7"]),
    ]


def write_archive(root: Path, events: list[Event] | None = None) -> Path:
    """Archive ``events`` (default ``month_events()``) as the embedded archiver would: partition 0, offsets 1..n."""
    events = month_events() if events is None else events
    ArchiveWriter(root, "log").write([Record(0, n + 1, encode(e)) for n, e in enumerate(events)])
    return root
