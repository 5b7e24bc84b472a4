"""Re-rating: the pure re-price, its chain rule, and reading the requests back from the archive."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.balances import Ledger
from ledger.codec import encode
from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from reconcile.rerate.archive import plan_rerate
from reconcile.rerate.reprice import ArchivedAttempt, ArchivedRequest, RerateError, format_table, report_rows, rerate
from streams.archive.write import ArchiveWriter, Record
from tests.reconcile.focus_archive import FX, month_events, write_archive
from tests.reconcile.rerate_fixtures import BOOK4, V3

UTC = timezone.utc
NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
DEPLOYMENTS = sorted(V3.prices)

counts = st.integers(0, 2_000_000)
usages = st.builds(TokenUsage, input=counts, cached_input=counts, cache_write=counts, output=counts,
                   reasoning=counts, source=st.sampled_from(["provider", "estimated"]))


def _request(rid: str, at: datetime, plan: list[tuple[str, TokenUsage]], version: int) -> ArchivedRequest:
    from reconcile.rerate.reprice import price_attempt

    attempts = []
    for n, (deployment, usage) in enumerate(plan, 1):
        a = ArchivedAttempt(n, at + timedelta(seconds=n), deployment, usage, 0, version)
        attempts.append(ArchivedAttempt(n, a.time, deployment, usage,
                                        price_attempt(a, BOOK4.get(version), FX, "INR"), version))
    total = sum(a.cost_micro for a in attempts)
    return ArchivedRequest(request_id=rid, team="payments", admitted_at=at, currency="INR",
                           attempts=tuple(attempts), settled_cost=total,
                           cost_by_scope={"team:payments": total, "key:k1": total})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DEPLOYMENTS), usages), min_size=1, max_size=3),
       st.sampled_from([1, 2, 3, 4]), st.datetimes(datetime(2026, 11, 1), datetime(2026, 11, 30), timezones=st.just(UTC)))
def test_rerating_under_the_original_version_changes_nothing(plan, version, at):
    request = _request("r1", at, plan, version)
    result = rerate([request], BOOK4, FX, version, now=NOW)
    assert result.corrections == [] and result.skipped == []
    assert all(line.diff_micro == 0 for line in result.lines) and result.lines


def test_a_second_rerate_is_relative_to_the_first_and_folds_to_the_last_version():
    at = datetime(2026, 11, 20, 10, tzinfo=UTC)
    usage = TokenUsage(input=123_457, cached_input=1_000, output=65_432)
    request = _request("r1", at, [("oai-mumbai", usage)], 2)
    ledger = Ledger(ZoneInfo("Asia/Kolkata"))
    ledger.apply(RequestAdmitted(
        time=at, request_id="r1", team="payments", key_id="k1", business_unit="retail", app="bot", run_id=None,
        alias="chat-default", data_class="internal", est_input_tokens=1, max_output_tokens=1,
        holds={"team:payments": 10**9, "key:k1": 10**9}, currency="INR", price_version=2, pod="p",
        hold_ttl_s=600, stream=False))
    ledger.apply(RequestSettled(time=at + timedelta(seconds=3), request_id="r1", team="payments", final_status=200,
                                attempts=1, deployment="oai-mumbai", usage=usage, cost_micro=request.settled_cost,
                                currency="INR", cost_by_scope=request.cost_by_scope, hold_released={},
                                overrun_micro=0, cache_hit=False, latency_ms=1))
    (to_v3,) = rerate([request], BOOK4, FX, 3, now=NOW).corrections
    corrected = ArchivedRequest(**{**{f: getattr(request, f) for f in request.__dataclass_fields__},
                                   "corrections": (to_v3,)})
    (to_v4,) = rerate([corrected], BOOK4, FX, 4, now=NOW).corrections
    assert (to_v3.id, to_v4.id) == ("r1/rerate/1", "r1/rerate/2")
    assert (to_v4.old_price_version, to_v4.old_cost_micro) == (3, to_v3.cost_micro)
    assert rerate([corrected], BOOK4, FX, 3, now=NOW).corrections == []  # already at v3: nothing
    v4_cost = _request("r1", at, [("oai-mumbai", usage)], 4).settled_cost
    assert to_v4.cost_micro == v4_cost != to_v3.cost_micro
    for event in (to_v3, to_v4, to_v3):
        ledger.apply(event)
    balance = ledger.balance("team:payments", "2026-11")
    assert balance.settled == v4_cost and balance.corrected == v4_cost - request.settled_cost


def test_expired_and_inconsistent_requests_are_skipped_with_a_reason():
    at = datetime(2026, 11, 20, tzinfo=UTC)
    good = _request("ok", at, [("azure-eu", TokenUsage(input=10, output=10))], 1)
    expired = ArchivedRequest(**{**{f: getattr(good, f) for f in good.__dataclass_fields__},
                                 "request_id": "exp", "settled_cost": None})
    short = ArchivedRequest(**{**{f: getattr(good, f) for f in good.__dataclass_fields__},
                               "request_id": "short", "settled_cost": good.settled_cost + 1})
    result = rerate([good, expired, short], BOOK4, FX, 2, now=NOW)
    assert [c.request_id for c in result.corrections] == ["ok"]
    assert dict(result.skipped).keys() == {"exp", "short"}
    assert "settlement charged" in dict(result.skipped)["short"]


def test_unknown_version_is_refused():
    with pytest.raises(RerateError, match="unknown price version 9; the book has 1, 2, 3, 4"):
        rerate([], BOOK4, FX, 9, now=NOW)


# --- from the archive -------------------------------------------------------------------


def test_plan_from_the_archive_matches_the_book_and_a_second_apply_adds_nothing(tmp_path):
    events = month_events(count=150)
    root = write_archive(tmp_path / "archive", events)
    result = plan_rerate(root, date(2026, 11, 1), date(2026, 11, 30), BOOK4, FX, 3, now=NOW)
    attempts = {(e.request_id, e.attempt): e for e in events if isinstance(e, RequestAttempted)}
    assert result.corrections and not result.skipped
    for fix in result.corrections:
        for n, cost in fix.attempt_costs.items():
            a = attempts[(fix.request_id, int(n))]
            assert fix.old_attempt_costs[n] == a.cost_micro
            price = V3.price(a.deployment)
            from pricing.rating import rate

            expected = rate(a.usage, price, FX.rate(price.currency, "INR", a.time)) if (
                a.usage.prompt_tokens or a.usage.completion_tokens) else 0
            assert cost == expected
    assert result.diff_micro == sum(f.cost_micro - f.old_cost_micro for f in result.corrections)
    rows = report_rows(result)
    assert sum(r["diff_micro"] for r in rows) == result.diff_micro
    assert "diff_micro" in format_table(rows).splitlines()[0]
    # the same re-rate again, its corrections not yet archived: the same ids, nothing new
    again = plan_rerate(root, date(2026, 11, 1), date(2026, 11, 30), BOOK4, FX, 3, now=NOW,
                        pending=result.corrections)
    assert again.corrections == []
    # ... and once archived (on a later day), the same
    ArchiveWriter(root, "log").write([Record(0, 10**6 + n, encode(f)) for n, f in enumerate(result.corrections)])
    assert plan_rerate(root, date(2026, 11, 1), date(2026, 11, 30), BOOK4, FX, 3, now=NOW).corrections == []
    to_v4 = plan_rerate(root, date(2026, 11, 1), date(2026, 11, 30), BOOK4, FX, 4, now=NOW).corrections
    assert to_v4 and {f.sequence for f in to_v4} == {2}


@pytest.mark.parametrize("version, start, end, match", [
    (7, date(2026, 11, 1), date(2026, 11, 2), "unknown price version 7"),
    (2, date(2026, 11, 3), date(2026, 11, 2), "after"),
    (2, date(2025, 1, 1), date(2025, 1, 31), "no events dated 2025-01-01..2025-01-31"),
])
def test_bad_input_is_refused_clearly(tmp_path, version, start, end, match):
    root = write_archive(tmp_path / "archive", month_events(count=20))
    with pytest.raises(RerateError, match=match):
        plan_rerate(root, start, end, BOOK4, FX, version, now=NOW)
    with pytest.raises(RerateError, match="no archive at"):
        plan_rerate(tmp_path / "nowhere", date(2026, 11, 1), date(2026, 11, 2), BOOK4, FX, 2, now=NOW)


def test_random_requests_rerate_consistently_with_their_own_version():
    rng = random.Random(3)
    requests = [_request(f"r{i}", datetime(2026, 11, 1 + i % 28, tzinfo=UTC),
                         [(rng.choice(DEPLOYMENTS), TokenUsage(input=rng.randint(0, 10**6), output=rng.randint(0, 10**5)))],
                         rng.choice([1, 2])) for i in range(200)]
    for version in (1, 2):
        result = rerate([r for r in requests if r.attempts[0].price_version == version], BOOK4, FX, version, now=NOW)
        assert result.corrections == []


def test_report_json_is_the_whole_result():
    import json

    from reconcile.rerate.reprice import report_json

    at = datetime(2026, 11, 20, tzinfo=UTC)
    request = _request("r1", at, [("azure-eu", TokenUsage(input=1_000, output=2_000))], 1)
    result = rerate([request], BOOK4, FX, 2, now=NOW)
    body = json.loads(json.dumps(report_json(result, applied=False)))
    assert body["correction_ids"] == ["r1/rerate/1"] and body["applied"] is False
    assert body["diff_micro"] == result.diff_micro == sum(r["diff_micro"] for r in body["rows"]) < 0
