"""The fast spend bucket: quanta, draws, settlement to the actual cost, refusals, and the config rules.

The bucket itself is the ``Buckets`` port's (run here against both adapters,
Redis real) with a one-hour window.
"""

from __future__ import annotations

import pytest

from ledger.usage import TokenUsage
from proxy.admission.ratelimit import refusal
from proxy.admission.spend_rate import parse_spend_per_hour, quantum, spend_draws, units
from proxy.control.declarative import compile_snapshot
from proxy.control.problems import ConfigError, Problems
from proxy.limits.bucket import max_capacity
from proxy.limits.draws import items, refund, settlement
from tests.proxy.fakes import example_tree, key, snapshot

T0 = 1_700_000_000_000_000
S = 1_000_000


def spend_snapshot(*scopes: tuple[str, str]):  # type: ignore[no-untyped-def]
    """The example snapshot with one key; ``("KEY", amount)`` names that key's own scope."""
    tree = example_tree()
    _, record = key()
    for scope, amount in scopes:
        scope = f"key:{record['id']}" if scope == "KEY" else scope
        tree["budgets"]["scopes"].append({"scope": scope, "spend_per_hour": amount})
    snap = snapshot(tree, [record])
    return snap, snap.keys[record["hash"]]


def test_the_quantum_is_the_smallest_power_of_ten_that_fits_a_bucket() -> None:
    assert quantum(2_000_000) == 1  # ₹2/h counts in micro-units
    assert quantum(60_000_000) == 100
    q = quantum(10**15)
    assert units(10**15, q) <= max_capacity(3600) < units(10**15, q // 10)
    assert units(101, 100) == 2 and units(100, 100) == 1 and units(-5, 100) == 0  # up, never down


@pytest.mark.parametrize(("value", "micro"), [("50", 50_000_000), ("12.5", 12_500_000), ("0.000001", 1),
                                              (" 7.25 ", 7_250_000)])
def test_spend_per_hour_is_a_decimal_string(value: str, micro: int) -> None:
    assert parse_spend_per_hour(value) == (micro, None)


@pytest.mark.parametrize(("value", "why"), [(50.0, "not a number"), (50, "not a number"), ("-5", "negative"),
                                            ("₹50", "no symbol"), ("50 INR", "no symbol"), ("1e3", "exponent"),
                                            ("1,000", "decimal places"), ("0.1234567", "6 decimal places"),
                                            ("0", "greater than 0"), ([1], "decimal string")])
def test_floats_negatives_and_wrong_formats_are_refused(value: object, why: str) -> None:
    micro, reason = parse_spend_per_hour(value)
    assert micro is None and why in reason


def test_a_spend_rate_on_a_business_unit_is_refused_by_the_control_plane() -> None:
    from proxy.control.changes import budget_spec
    from proxy.control.errors import ConfigRejected

    assert budget_spec({"spend_per_hour": "5"}, "team:platform") == {"spend_per_hour": "5"}
    with pytest.raises(ConfigRejected) as err:
        budget_spec({"spend_per_hour": "5", "soft_pct": 101}, "bu:retail")
    assert "per-key or per-team" in str(err.value) and "soft_pct" in str(err.value)


def test_config_check_lists_every_spend_problem() -> None:
    tree = example_tree()
    tree["budgets"]["scopes"] += [{"scope": "team:platform", "spend_per_hour": 12.5},
                                  {"scope": "team:kyc-ops", "spend_per_hour": "-3"},
                                  {"scope": "key:fb-dev-x", "spend_per_hour": "USD 4"},
                                  {"scope": "bu:retail", "spend_per_hour": "5"}]
    with pytest.raises(ConfigError) as err:
        _compile_or_raise(tree)
    text = "\n".join(err.value.problems)
    assert text.count("spend_per_hour") == 4, text
    for fragment in ("not a number", "negative", "'USD 4'", "per-key or per-team"):
        assert fragment in text


def _compile_or_raise(tree: dict):  # type: ignore[no-untyped-def]
    problems = Problems()
    snap = compile_snapshot(tree, problems=problems)
    problems.raise_if_any("farebox.yaml")
    return snap


def test_draws_for_the_key_and_team_scopes_that_set_a_rate() -> None:
    snap, k = spend_snapshot(("KEY", "2"), ("team:platform", "60"))
    draws = spend_draws(snap, k, 123_456)
    assert [(d.spec.capacity, d.spec.window_s, d.amount, d.quantum, d.code) for d in draws] == [
        (2_000_000, 3600, 123_456, 1, "spend_rate_exceeded"), (600_000, 3600, 1235, 100, "spend_rate_exceeded")]
    assert draws[1].who == "Team platform" and draws[0].currency == snap.currency
    # settled to the actual cost (actual − reserved), as token buckets settle; a refusal refunds the hold
    assert settlement(draws, TokenUsage(), 50_000) == [(draws[0].spec, 50_000 - 123_456), (draws[1].spec, 500 - 1235)]
    assert refund(draws) == [(draws[0].spec, -123_456), (draws[1].spec, -1235)]
    assert spend_draws(spend_snapshot()[0], k, 10) == []


async def test_the_bucket_refuses_then_refills_over_the_hour(buckets) -> None:  # type: ignore[no-untyped-def]
    snap, k = spend_snapshot(("team:platform", "1.00"))
    hold = 400_000  # ₹0.40 per request at its worst case
    draws = spend_draws(snap, k, hold)
    assert (await buckets.reserve(items(draws), T0)).ok
    assert (await buckets.reserve(items(draws), T0)).ok
    short = await buckets.reserve(items(draws), T0)
    assert not short.ok
    err = refusal(draws, short, 10, 100)
    assert err.status == 429 and err.code == "spend_rate_exceeded"
    assert "0.200000 INR left of its spend rate of 1.000000 INR per hour" in err.message
    assert "holds 0.400000 INR" in err.message
    assert err.headers["Retry-After"] == "720"  # ₹0.20 more at ₹1/h: 12 minutes
    assert err.headers["x-should-retry"] == "false"  # the SDKs would not wait that long: do not retry blindly
    soon = refusal(draws, await buckets.reserve(items(draws), T0 + 715 * S), 10, 100)
    assert soon.headers["Retry-After"] == "5" and soon.headers["x-should-retry"] == "true"
    await buckets.adjust(settlement(draws, TokenUsage(), 100_000), T0)  # the first settled at ₹0.10
    assert (await buckets.reserve(items(draws), T0)).ok  # the refund funds a third request
    assert (await buckets.reserve(items(draws), T0 + 3600 * S)).ok


async def test_a_hold_above_the_hourly_limit_says_waiting_will_not_help(buckets) -> None:  # type: ignore[no-untyped-def]
    snap, k = spend_snapshot(("team:platform", "0.10"))
    draws = spend_draws(snap, k, 200_000)
    res = await buckets.reserve(items(draws), T0)
    err = refusal(draws, res, 10, 100)
    assert err.code == "spend_rate_exceeded" and "Retry-After" not in err.headers
    assert err.headers["x-should-retry"] == "false" and "waiting will not help" in err.message
