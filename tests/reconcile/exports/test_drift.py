"""The pure drift comparison, with figures checked by hand."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from decimal import Decimal

import pytest

from reconcile.drift import Cause, DriftInputError, OurUsage, compare_money, compare_tokens
from reconcile.exports import CostRow, UsageRow

DAY = date(2026, 11, 30)
M = "gpt-4o-mini"


def theirs(token_type: str, tokens: int, model: str = M, account: str = "acme") -> UsageRow:
    return UsageRow("openai", account, DAY, model, token_type, tokens, requests=7)


def ours(token_type: str, tokens: int, model: str = M, account: str = "acme", **kw: object) -> OurUsage:
    return OurUsage(account, DAY, model, token_type, tokens, **kw)  # type: ignore[arg-type]


def one(rows, token_type):
    (row,) = [r for r in rows if r.token_type == token_type]
    return row


def test_equal_figures_are_not_flagged_and_the_threshold_is_strict():
    rows = compare_tokens([theirs("input", 1000), theirs("cached_input", 1000), theirs("output", 1000)],
                          [ours("input", 1000), ours("cached_input", 990), ours("output", 989)])
    assert one(rows, "input").difference == 0 and one(rows, "input").percent == 0 and not one(rows, "input").flagged
    assert one(rows, "cached_input").percent == Decimal(1) and not one(rows, "cached_input").flagged  # exactly 1%
    out = one(rows, "output")
    assert out.percent == Decimal("1.1") and out.flagged  # 11 / 1000: nothing in our data but the direction
    assert out.causes == (Cause("provider_reports_more",
                                "the provider reports 11 tokens more than we recorded (1000 against 989)"),)
    assert (out.provider, out.provider_figure, out.ours, out.difference) == ("openai", 1000, 989, 11)


def test_a_scaled_export_is_flagged_at_about_three_percent():
    (row,) = compare_tokens([theirs("output", 970)], [ours("output", 1000)])
    assert row.difference == -30 and row.flagged
    assert row.percent == Decimal(-30) / Decimal(970) * 100  # of the provider's figure
    assert row.percent.quantize(Decimal("0.01")) == Decimal("-3.09")


def test_a_custom_threshold():
    (row,) = compare_tokens([theirs("output", 970)], [ours("output", 1000)], threshold=Decimal("5"))
    assert not row.flagged


def test_estimated_share_is_named():
    (row,) = compare_tokens([theirs("output", 1000)], [ours("output", 800, estimated_tokens=200)])
    assert row.flagged and row.percent == Decimal(20)
    assert row.causes == (Cause("estimated_usage", "25.00% of our 800 tokens (200) were estimated, "
                                                   "not provider-reported"),)
    assert row.to_dict() == {
        "measure": "tokens", "provider": "openai", "account": "acme", "day": "2026-11-30", "model": M,
        "token_type": "output", "provider_figure": "1000", "ours": "800", "difference": "200", "percent": "20.00",
        "flagged": True, "causes": [{"code": "estimated_usage", "detail": row.causes[0].detail}], "currency": None,
        "tier": None}


def test_a_type_we_never_price_is_flagged_with_its_cause():
    rows = compare_tokens([theirs("input", 500), theirs("input_audio_tokens", 40)], [ours("input", 500)])
    audio = one(rows, "input_audio_tokens")
    assert (audio.provider_figure, audio.ours, audio.percent, audio.flagged) == (40, 0, 100, True)
    assert [c.code for c in audio.causes] == ["unpriced_token_type"]
    assert "'input_audio_tokens'" in audio.causes[0].detail
    assert not one(rows, "input").flagged


def test_expired_holds_are_named_only_where_the_provider_counts_more():
    rows = compare_tokens([theirs("output", 1000), theirs("input", 100)],
                          [ours("output", 900, expired_requests=2), ours("input", 120, expired_requests=2)])
    assert [c.code for c in one(rows, "output").causes] == ["expired_holds"]
    assert "2 request(s)" in one(rows, "output").causes[0].detail
    assert one(rows, "input").flagged  # we count more: not lost usage, an under-report
    assert [c.code for c in one(rows, "input").causes] == ["provider_reports_less"]


def test_unattributed_expired_requests_of_the_day_are_named():
    (row,) = compare_tokens([theirs("output", 1000)], [ours("output", 900)], unattributed_expired={DAY: 3})
    assert [c.code for c in row.causes] == ["expired_holds"] and "3 request(s) that day" in row.causes[0].detail


def test_reasoning_is_folded_into_output_when_the_provider_does_not_report_it():
    provider = [theirs("input", 10), theirs("cached_input", 0), theirs("output", 600)]  # OpenAI: no reasoning row
    rows = compare_tokens(provider, [ours("input", 10), ours("output", 500), ours("reasoning", 100,
                                                                                 estimated_tokens=100)])
    assert [(r.token_type, r.ours, r.flagged) for r in rows] == [("input", 10, False), ("output", 600, False)]
    # a provider that does report reasoning compares it as it is
    rows = compare_tokens(provider + [theirs("reasoning", 100)], [ours("output", 500), ours("reasoning", 100)])
    assert one(rows, "output").flagged and not one(rows, "reasoning").flagged


def test_a_report_not_grouped_by_model_is_set_against_all_our_models():
    rows = compare_tokens([theirs("input", 300, model="*")],
                          [ours("input", 100, model="a", expired_requests=1),
                           ours("input", 200, model="b", expired_requests=2)])
    assert [(r.model, r.ours, r.flagged) for r in rows] == [("*", 300, False)]
    rows = compare_tokens([theirs("input", 400, model="*")],
                          [ours("input", 100, model="a", expired_requests=1),
                           ours("input", 200, model="b", expired_requests=2)])
    assert "3 request(s)" in rows[0].causes[0].detail  # expired counts add across models


def test_only_covered_accounts_and_ours_alone_is_flagged():
    rows = compare_tokens([theirs("input", 100)], [ours("input", 100), ours("input", 50, account="other")])
    assert {r.account for r in rows} == {"acme"}
    rows = compare_tokens([], [ours("input", 50, account="other")], accounts=["other"])
    assert [(r.provider_figure, r.ours, r.percent, r.flagged) for r in rows] == [(0, 50, None, True)]


def test_both_zero_is_no_row_and_duplicates_are_refused():
    assert compare_tokens([theirs("cache_write", 0)], [ours("cache_write", 0)]) == []
    with pytest.raises(DriftInputError, match="repeat the key acme/2026-11-30/gpt-4o-mini/input"):
        compare_tokens([], [ours("input", 1), ours("input", 2)])
    with pytest.raises(DriftInputError, match="estimated_tokens 5 > tokens 4"):
        ours("input", 4, estimated_tokens=5)


# --- money ---------------------------------------------------------------------------------------------------


def cost(token_type: str | None, amount: str, model: str | None = M, currency: str = "USD",
         description: str | None = None) -> CostRow:
    return CostRow("openai", "acme", DAY, model, token_type, Decimal(amount), currency, description)


def test_money_matches_to_the_micro_unit_and_names_a_price_version_mismatch():
    provider = [cost("input", "0.3"), cost("cached_input", "0.06"), cost("output", "0.37")]
    mine = [ours("input", 500, cost_micro=300_000, price_versions={3}),
            ours("cached_input", 800, cost_micro=60_000, price_versions={3}),
            ours("output", 600, cost_micro=350_000, price_versions={2})]
    rows = compare_money(provider, mine, current_price_version=3)
    assert [(r.token_type, r.flagged) for r in rows] == [("cached_input", False), ("input", False), ("output", True)]
    out = one(rows, "output")
    assert (out.provider_figure, out.ours, out.difference) == (Decimal("0.37"), Decimal("0.35"), Decimal("0.02"))
    assert out.percent.quantize(Decimal("0.001")) == Decimal("5.405") and out.currency == "USD"
    assert out.causes == (Cause("price_version_mismatch", "priced under version(s) 2; version 3 is in force"),)


def test_money_folds_our_reasoning_into_output_when_the_provider_bills_it_as_output():
    provider = [cost("input", "0.001"), cost("output", "0.003")]  # OpenAI line items: no reasoning
    rows = compare_money(provider, [ours("input", 1000, cost_micro=1_000), ours("output", 500, cost_micro=2_000),
                                    ours("reasoning", 250, cost_micro=1_000)])
    assert [(r.token_type, r.ours, r.flagged) for r in rows] == [("input", Decimal("0.001"), False),
                                                                 ("output", Decimal("0.003"), False)]


def test_money_within_one_smallest_currency_unit_is_never_flagged():
    """Rounding below a cent is not drift, whatever its percentage (-38.89% on 0.00000216 USD); a yen either."""
    (row,) = compare_money([cost("output", "0.00000216")], [ours("output", 3, cost_micro=3)])
    assert row.percent.quantize(Decimal("0.01")) == Decimal("-38.89") and not row.flagged and row.causes == ()
    (row,) = compare_money([cost("output", "0.01")], [ours("output", 3, cost_micro=0)])
    assert not row.flagged  # exactly one cent
    (row,) = compare_money([cost("output", "0.010001")], [ours("output", 3, cost_micro=0)])
    assert row.flagged and [c.code for c in row.causes] == ["missing_rows"]
    (row,) = compare_money([cost("output", "101", currency="JPY")], [ours("output", 3, cost_micro=100_000_000,
                                                                          currency="JPY")])
    assert not row.flagged  # one yen, the lowest unit of JPY


def test_money_with_several_versions_and_no_current_one():
    (row,) = compare_money([cost("output", "1")], [ours("output", 1, cost_micro=500_000, price_versions={1, 2})])
    assert row.percent == 50 and [c.detail for c in row.causes] == ["priced under several versions: 1, 2"]


def test_money_rows_of_one_key_are_summed_and_coarse_rows_take_our_sum():
    # Anthropic gives the two cache-write lifetimes as two rows of one key
    provider = [cost("cache_write", "0.105", description="5m"), cost("cache_write", "0.20", description="1h")]
    (row,) = compare_money(provider, [ours("cache_write", 1050, cost_micro=305_000)])
    assert row.provider_figure == Decimal("0.305") and row.difference == 0 and not row.flagged
    # an account-day total against every model and type we have
    (row,) = compare_money([cost(None, "1.00", model=None)],
                           [ours("input", 1, cost_micro=400_000), ours("output", 1, model="b", cost_micro=600_000)])
    assert (row.model, row.token_type, row.ours, row.flagged) == (None, None, Decimal("1.000000"), False)


def test_money_the_provider_billed_for_something_we_never_record():
    rows = compare_money([cost("input", "0.3"), cost("Image models", "1.5", model=None)],
                         [ours("input", 500, cost_micro=300_000)])
    image = one(rows, "Image models")
    assert (image.provider_figure, image.ours, image.percent, image.flagged) == (Decimal("1.5"), 0, 100, True)
    assert [c.code for c in image.causes] == ["unpriced_token_type"]


def test_money_we_charged_that_no_provider_row_covers():
    rows = compare_money([cost("input", "0.3")], [ours("input", 500, cost_micro=300_000),
                                                  ours("output", 10, cost_micro=20_000, estimated_tokens=10)])
    out = one(rows, "output")
    assert (out.provider_figure, out.ours, out.percent, out.flagged) == (0, Decimal("0.02"), None, True)
    assert [c.code for c in out.causes] == ["estimated_usage"]


def test_a_billed_quantity_tells_a_price_mismatch_from_a_usage_difference():
    """The tokens a charge bills, summed over its rows: agreeing with ours (within the threshold) makes the money
    difference the rate; disagreeing leaves it to the usage causes; a row without a quantity makes it unknown."""
    def billed(amount: str, *quantities: int | None) -> list[CostRow]:
        share = Decimal(amount) / len(quantities)
        return [replace(cost("output", str(share)), quantity=q) for q in quantities]

    mine = [ours("output", 1_000_000, cost_micro=10_000_000)]  # 10 USD per 1M
    (row,) = compare_money(billed("12", 600_000, 400_000), mine)
    assert row.flagged and [c.code for c in row.causes] == ["price_mismatch"]
    assert row.causes[0].detail.endswith("charged 12 USD per 1M against our price book's 10")
    (row,) = compare_money(billed("12", 1_200_000), mine)  # more tokens billed: not the rate
    assert [c.code for c in row.causes] == ["provider_reports_more"]
    (row,) = compare_money(billed("12", 600_000, None), mine)
    assert [c.code for c in row.causes] == ["provider_reports_more"]


def test_money_in_another_currency_is_refused():
    with pytest.raises(DriftInputError, match="ours in INR, the provider's in USD; convert first"):
        compare_money([cost("input", "0.3")], [ours("input", 1, cost_micro=1, currency="INR")])


def test_a_provider_reporting_by_tier_is_compared_by_tier_and_a_moved_tier_is_named():
    """Anthropic reports by service tier: ours is kept by tier (standard where we record none); a provider that
    bills at priority what we recorded at standard is flagged on both tiers with ``tier_mismatch``, the totals
    agreeing; a provider that does not report tiers is compared on the sum of ours."""
    def tiered(token_type: str, tokens: int, tier: str) -> UsageRow:
        return UsageRow("anthropic", "acme", DAY, M, token_type, tokens, None, tier)

    mine = [ours("output", 700), ours("output", 300, tier="priority"), ours("input", 1000)]
    rows = compare_tokens([tiered("output", 700, "standard"), tiered("output", 300, "priority"),
                           tiered("input", 1000, "standard")], mine)
    assert [(r.token_type, r.tier, r.flagged) for r in rows] == [
        ("input", "standard", False), ("output", "priority", False), ("output", "standard", False)]
    moved = compare_tokens([tiered("output", 600, "standard"), tiered("output", 400, "priority"),
                            tiered("input", 1000, "standard")], mine)
    flagged = {r.tier: r for r in moved if r.flagged}
    assert set(flagged) == {"standard", "priority"}
    assert all([c.code for c in r.causes] == ["tier_mismatch"] for r in flagged.values())
    assert "over every tier the tokens agree (1000 against our 1000)" in flagged["priority"].causes[0].detail
    untiered = compare_tokens([theirs("output", 1000), theirs("input", 1000)], mine)
    assert [(r.token_type, r.tier, r.ours, r.flagged) for r in untiered] == [("input", None, 1000, False),
                                                                             ("output", None, 1000, False)]
