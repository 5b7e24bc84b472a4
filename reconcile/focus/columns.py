"""The FOCUS file's columns: names and order, fixed values, and how a charge line becomes a row.

One row is one ``ChargeLine``: tokens of one
token type, used on one UTC day, on one deployment, at one price version, by
one team/app/key/alias/cost centre/tag set, or one side of a correction.

Columns, in file order:

* FOCUS 1.2 columns (``FOCUS_COLUMNS``), alphabetical as the spec lists them;
* farebox's dimensions (``X_COLUMNS``), after every FOCUS column, each with the ``x_`` prefix the spec asks of
  custom columns.

Values that hold for every row: ChargeCategory ``Usage`` (a correction is
``Usage`` with ChargeClass ``Correction``), ChargeFrequency ``Usage-Based``,
PricingCategory ``Standard`` (``Other`` for tokens served by a provider's batch API, ``x_service_tier`` ``batch``:
a price of its own, neither on demand nor committed nor dynamic; FOCUS 1.2 names no batch category), ServiceCategory ``AI and Machine Learning``,
ServiceSubcategory ``Generative AI``, ConsumedUnit ``Tokens``, PricingUnit
``1000000 Tokens`` (the price book prices per million tokens). Provider,
publisher and invoice issuer are the deployment's provider. BillingAccountId is
the deployment's provider ``account`` (the organisation, payer account, billing
account the provider invoices); SubAccountId is its ``project`` (an OpenAI
project, an Anthropic workspace, an AWS member account, a Google Cloud project,
an Azure subscription), null where the deployment names none; both types are
the provider's own words (``ACCOUNT_TYPES``). InvoiceId is the provider invoice
of the row's account and billing month where reconciliation has seen exactly one
(``reconcile.invoices``), else null. SkuId is model x token type; SkuPriceId is deployment x
model x token type, the same in every price version, so a re-rated charge is
followed from one version to the next; the version itself is in
SkuPriceDetails and ``x_price_version``. ListUnitPrice = ContractedUnitPrice =
the book's price per million tokens converted to the billing currency (the
book holds the prices farebox pays: there is no separate list price), so
ListCost = ContractedCost = ListUnitPrice x PricingQuantity exactly, and
PricingCurrencyEffectiveCost is the same product in the price book's currency.
BilledCost = EffectiveCost = the ledger's micro-units (see ``reconcile.focus.export``
for how they relate).

``FocusError`` is the export's one error: every refusal names what is wrong.

Decimals are exact: ``Decimal`` in, plain fixed-point text in CSV (always with
a decimal point, so a CSV reader sees a decimal column, not an integer one),
``decimal128`` in Parquet at the smallest scale that holds every value of the
column exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Context, Decimal, Inexact, InvalidOperation, localcontext
from typing import Any

from ledger.usage import TOKEN_TYPES
from pricing.money import to_decimal
from reconcile.errors import ReconcileError

# The token types a charge line is for: the priced types, with the one-hour cache writes (``cache_write_1h``, a
# detail of ``cache_write`` in usage) a line of their own at their own price; ``cache_write`` lines then hold
# the other writes.
FOCUS_TYPES = ("input", "cached_input", "cache_write", "cache_write_1h", "output", "reasoning")
SKU_METERS = {
    "input": "Input Tokens",
    "cached_input": "Cached Input Tokens",
    "cache_write": "Cache Write Tokens",
    "cache_write_1h": "Cache Write Tokens (1 hour)",
    "output": "Output Tokens",
    "reasoning": "Reasoning Tokens",
}
assert tuple(SKU_METERS) == FOCUS_TYPES and set(TOKEN_TYPES) <= set(FOCUS_TYPES)

HEDGE_LOST = ", lost leg of a hedged request (cut when another deployment answered first)"
CONSUMED_UNIT = "Tokens"
PRICING_UNIT = "1000000 Tokens"
TOKENS_PER_PRICING_UNIT = Decimal(1_000_000)
CORRECTION = "Correction"
BATCH_TIER = "batch"  # the tier of a provider batch's lines (``proxy.batches.provider_money``)

FOCUS_COLUMNS = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "CapacityReservationId",
    "CapacityReservationStatus", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId",
    "CommitmentDiscountName", "CommitmentDiscountQuantity", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "CommitmentDiscountUnit", "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice",
    "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory",
    "PricingCurrency", "PricingCurrencyContractedUnitPrice", "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
    "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId",
    "SubAccountName", "SubAccountType", "Tags",
)
X_COLUMNS = (
    "x_team", "x_app", "x_business_unit", "x_cost_centre", "x_alias", "x_key_id", "x_requests",
    "x_attempts", "x_token_type", "x_price_version", "x_correction_id", "x_correction_side", "x_service_tier",
)
COLUMNS = FOCUS_COLUMNS + X_COLUMNS
assert all(c.startswith("x_") for c in X_COLUMNS)

# provider -> (what it calls the account it invoices, what it calls the sub-account a deployment bills to)
ACCOUNT_TYPES = {
    "openai": ("Organization", "Project"),
    "anthropic": ("Organization", "Workspace"),
    "azure": ("Billing Account", "Subscription"),
    "aws": ("Management Account", "Member Account"),
    "google": ("Cloud Billing Account", "Project"),
}
DEFAULT_ACCOUNT_TYPES = ("Billing Account", "Sub Account")

# Inexact traps: an amount that could not be held exactly raises instead of rounding.
EXACT = Context(prec=80, traps=[Inexact, InvalidOperation])

DECIMAL_COLUMNS = frozenset({
    "BilledCost", "CommitmentDiscountQuantity", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice",
    "EffectiveCost", "ListCost", "ListUnitPrice", "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost", "PricingCurrencyListUnitPrice", "PricingQuantity",
})
INTEGER_COLUMNS = frozenset({"x_requests", "x_attempts", "x_price_version"})
DATETIME_COLUMNS = frozenset({"BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"})


class FocusError(ReconcileError):
    """The export cannot be made as asked: bad month, no data, unpriceable usage, bad corrections. Names what."""


@dataclass(frozen=True, slots=True)
class ChargeLine:
    """One row's facts before formatting; money is exact (micro-units, Decimal prices)."""

    charge_day: date
    billing_month: date  # the first day of the billing period
    deployment: str
    provider: str
    account: str
    model: str
    region: str
    token_type: str
    price_version: int
    team: str
    app: str | None
    business_unit: str | None
    key_id: str | None
    alias: str | None
    cost_centre: str | None
    tags: tuple[tuple[str, str], ...]
    tokens: int  # negative on the reversal side of a correction
    billed_micro: int
    requests: int
    attempts: int
    unit_price: Decimal  # per 1M tokens, in the billing currency
    pricing_currency: str
    pricing_unit_price: Decimal  # per 1M tokens, in the price book's currency
    correction_id: str | None = None
    correction_side: str | None = None  # "reversal" | "corrected"
    service_tier: str | None = None  # the non-standard tier the provider served (priced at that tier's prices)
    project: str | None = None  # the sub-account under ``account`` (SubAccountId)
    hedge_lost: bool = False  # attempts that lost a hedge race (their own ChargeDescription)

    def sort_key(self) -> tuple:
        """Row order: charge day, usage before corrections, then every dimension (a total order)."""
        return (self.charge_day, self.correction_id is not None, self.deployment, self.model, self.provider,
                self.account, self.region, FOCUS_TYPES.index(self.token_type), self.price_version, self.team,
                self.app or "",
                self.business_unit or "", self.key_id or "", self.alias or "", self.cost_centre or "", self.tags,
                self.correction_id or "", self.correction_side or "", self.service_tier or "", self.project or "",
                self.hedge_lost)


def month_bounds(first: date) -> tuple[datetime, datetime]:
    """[start, end) of the calendar month starting at ``first``, in UTC."""
    start = datetime.combine(first, time(), timezone.utc)
    following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return start, datetime.combine(following, time(), timezone.utc)


def tags_json(tags: tuple[tuple[str, str], ...]) -> str:
    """Tags as a canonical JSON object (sorted keys, no spaces): the same tags give the same text."""
    return json.dumps(dict(tags), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def resource_columns(*, provider: str, account: str, project: str | None, region: str | None, deployment: str,
                     charge_day: date, billing_month: date, billing_currency: str,
                     invoice: str | None) -> dict[str, Any]:
    """The columns every row of one deployment's charge on one day shares (usage, correction or fleet hours):
    who bills it, where, for which period."""
    charge_start = datetime.combine(charge_day, time(), timezone.utc)
    billing_start, billing_end = month_bounds(billing_month)
    account_type, sub_account_type = ACCOUNT_TYPES.get(provider, DEFAULT_ACCOUNT_TYPES)
    return {
        "BillingAccountId": account, "BillingAccountName": account, "BillingAccountType": account_type,
        "BillingCurrency": billing_currency, "BillingPeriodEnd": billing_end, "BillingPeriodStart": billing_start,
        "ChargePeriodEnd": charge_start + timedelta(days=1), "ChargePeriodStart": charge_start,
        "InvoiceId": invoice, "InvoiceIssuerName": provider, "ProviderName": provider, "PublisherName": provider,
        "RegionId": region, "RegionName": region, "ResourceId": deployment, "ResourceName": deployment,
        "ResourceType": "Model Deployment", "ServiceCategory": "AI and Machine Learning",
        "ServiceName": f"{provider} model inference", "ServiceSubcategory": "Generative AI",
        "SubAccountId": project, "SubAccountName": project, "SubAccountType": sub_account_type if project else None,
    }


def focus_row(line: ChargeLine, billing_currency: str, invoice: str | None = None) -> dict[str, Any]:
    """The FOCUS row of one charge line: every column of ``COLUMNS``, None where FOCUS allows null; ``invoice`` is
    the provider invoice its account's billing month sits on, where reconciliation has seen exactly one."""
    quantity = Decimal(line.tokens)
    with localcontext(EXACT):
        pricing_quantity = quantity / TOKENS_PER_PRICING_UNIT
        list_cost = line.unit_price * pricing_quantity
        pricing_cost = line.pricing_unit_price * pricing_quantity
    billed = to_decimal(line.billed_micro)
    meter = SKU_METERS[line.token_type]
    side = f" ({line.correction_side} of correction {line.correction_id})" if line.correction_id else ""
    if line.hedge_lost:
        side += HEDGE_LOST
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(resource_columns(provider=line.provider, account=line.account, project=line.project,
                                region=line.region, deployment=line.deployment, charge_day=line.charge_day,
                                billing_month=line.billing_month, billing_currency=billing_currency,
                                invoice=invoice))
    row.update({
        "BilledCost": billed,
        "ChargeCategory": "Usage",
        "ChargeClass": CORRECTION if line.correction_id else None,
        "ChargeDescription": f"{meter} of {line.model} on {line.deployment}, price version "
                             f"{line.price_version}{side}",
        "ChargeFrequency": "Usage-Based",
        "ConsumedQuantity": quantity,
        "ConsumedUnit": CONSUMED_UNIT,
        "ContractedCost": list_cost,
        "ContractedUnitPrice": line.unit_price,
        "EffectiveCost": billed,
        "ListCost": list_cost,
        "ListUnitPrice": line.unit_price,
        "PricingCategory": "Other" if line.service_tier == BATCH_TIER else "Standard",
        "PricingCurrency": line.pricing_currency,
        "PricingCurrencyContractedUnitPrice": line.pricing_unit_price,
        "PricingCurrencyEffectiveCost": pricing_cost,
        "PricingCurrencyListUnitPrice": line.pricing_unit_price,
        "PricingQuantity": pricing_quantity,
        "PricingUnit": PRICING_UNIT,
        "SkuId": f"{line.model}:{line.token_type}",
        "SkuMeter": meter,
        "SkuPriceDetails": json.dumps({"x_PriceVersion": line.price_version, "x_TokenType": line.token_type},
                                      sort_keys=True, separators=(",", ":")),
        "SkuPriceId": f"{line.deployment}:{line.model}:{line.token_type}"
                      + (f"@{line.service_tier}" if line.service_tier else ""),
        "Tags": tags_json(line.tags),
        "x_team": line.team,
        "x_app": line.app,
        "x_business_unit": line.business_unit,
        "x_cost_centre": line.cost_centre,
        "x_alias": line.alias,
        "x_key_id": line.key_id,
        "x_requests": line.requests,
        "x_attempts": line.attempts,
        "x_token_type": line.token_type,
        "x_price_version": line.price_version,
        "x_correction_id": line.correction_id,
        "x_correction_side": line.correction_side,
        "x_service_tier": line.service_tier,
    })
    return row


def decimal_text(value: Decimal) -> str:
    """Plain fixed-point text, never an exponent, always with a decimal point (``1234`` -> ``1234.0``)."""
    text = format(value, "f")
    return text if "." in text else f"{text}.0"


def csv_value(column: str, value: Any) -> str:
    if value is None:
        return ""
    if column in DECIMAL_COLUMNS:
        return decimal_text(value)
    if column in DATETIME_COLUMNS:
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def scale_of(values: Mapping[str, list[Any]], column: str) -> int:
    """The smallest decimal scale that holds every value of ``column`` exactly (at least 1)."""
    scale = 1
    for value in values[column]:
        if value is not None:
            scale = max(scale, -value.as_tuple().exponent)
    return scale
