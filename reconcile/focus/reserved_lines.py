"""FOCUS rows of provisioned capacity: the reservation as a recurring commitment purchase, and its use.

A reserved deployment (``Price.reserved_hour`` or ``reserved_month``, charged to ``reserved_team``) costs every
hour its price is in force, used or not (``reconcile.reserved``). Per UTC day x deployment x price version, the
rows FOCUS 1.2 gives a commitment discount paid as it goes:

* one **Purchase** row (``ChargeCategory`` ``Purchase``, ``ChargeFrequency`` ``Recurring``): ``BilledCost`` = what
  the day's hours cost, ``EffectiveCost`` 0 (the purchase covers the usage rows below), ``PricingQuantity`` =
  ``CommitmentDiscountQuantity`` = the hours, the owning team in ``x_team``: this is where the money is billed,
  once;
* **Used** rows (``ChargeCategory`` ``Usage``, ``CommitmentDiscountStatus`` ``Used``), per team/app/key/alias/
  business unit/cost centre/tags served in the day: ``BilledCost`` 0, ``EffectiveCost`` = the shares of the used
  hours' cost (each used hour split over its attempts by tokens, whole micro-units), the quantity = those shares
  in hours (``EffectiveCost`` over one hour's price, to the millionth);
* an **Unused** row for the day's hours that served nothing, to the owning team: ``EffectiveCost`` their cost,
  ``ConsumedQuantity`` null as FOCUS asks.

So a day's Used and Unused ``EffectiveCost`` add up to its Purchase ``BilledCost``. Every row carries
``CommitmentDiscountId`` ``{provider}/{account}/{deployment}/provisioned`` (``Category`` ``Usage``, ``Unit``
``Hours``, ``Type`` ``Provisioned Capacity``). The tokens the deployment served are ordinary token rows at their
price (0 for a reservation paid in full), not repeated here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime, time, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

from pricing.book import FxTable, PriceBook
from pricing.money import to_decimal
from reconcile.fleet import latest_event, month_window
from reconcile.focus.columns import COLUMNS, resource_columns, tags_json
from reconcile.focus.fleet_lines import deployment_facts
from reconcile.focus.usage import tag_pairs
from reconcile.reserved import has_reservations, register, reserved_hours
from reconcile.warehouse import Warehouse

HOURS = "Hours"
QUANTUM = Decimal("0.000001")  # hours are given to the millionth

_LINES_SQL = """
SELECT 'used' AS status, s.deployment, CAST(timezone('UTC', s.hour_start) AS DATE) AS day, h.price_version,
       h.unit_price, h.currency, h.team AS owner, q.team, q.app, q.business_unit, q.key_id, q.alias, q.cost_centre,
       to_json(q.tags)::VARCHAR AS tags, sum(s.reserved_micro)::BIGINT AS micro, 0::BIGINT AS hours,
       count(DISTINCT s.request_id)::BIGINT AS requests, count(*)::BIGINT AS attempts
FROM reserved_shares AS s
JOIN reserved_hours AS h ON h.deployment = s.deployment AND h.hour_start = s.hour_start
LEFT JOIN requests AS q ON q.request_id = s.request_id
GROUP BY ALL
UNION ALL
SELECT CASE WHEN u.hour_start IS NULL THEN 'unused' ELSE 'used_hours' END, h.deployment,
       CAST(timezone('UTC', h.hour_start) AS DATE), h.price_version, h.unit_price, h.currency, h.team, h.team, NULL,
       NULL, NULL, NULL, NULL, NULL, sum(h.cost_micro)::BIGINT, count(*)::BIGINT, 0, 0
FROM reserved_hours AS h
LEFT JOIN (SELECT DISTINCT deployment, hour_start FROM reserved_shares) AS u
  ON u.deployment = h.deployment AND u.hour_start = h.hour_start
GROUP BY ALL
"""
# (the second part counts a day's used and unused hours apart: its purchase row adds both up, below)

@dataclass(frozen=True, slots=True)
class ReservedLine:
    status: str  # purchase | used | unused (used_hours: a day's used hours, while adding up its purchase)
    day: date
    deployment: str
    provider: str
    account: str
    project: str | None
    model: str
    region: str
    price_version: int
    unit_price: Decimal  # one reserved hour, billing currency
    pricing_currency: str
    pricing_unit_price: Decimal  # one reserved hour, the price book's currency
    owner: str  # the team the reservation is charged to
    team: str | None  # used rows: the request's team; else the owner
    app: str | None
    business_unit: str | None
    key_id: str | None
    alias: str | None
    cost_centre: str | None
    tags: tuple[tuple[str, str], ...]
    micro: int  # purchase: BilledCost; used/unused: EffectiveCost
    hours: int  # purchase/unused: whole hours; used: 0 (its quantity is its share)
    requests: int
    attempts: int

    def sort_key(self) -> tuple:
        return (self.day, self.deployment, self.price_version, ("purchase", "used", "unused").index(self.status),
                self.team or "", self.app or "", self.business_unit or "", self.key_id or "", self.alias or "",
                self.cost_centre or "", self.tags)


def reserved_lines(root: Path, month_start: date, book: PriceBook, fx: FxTable, currency: str) -> list[ReservedLine]:
    """The reservation rows of the UTC month starting at ``month_start`` (none without a reservation in it)."""
    if not has_reservations(book):
        return []
    with Warehouse(root, tz="UTC") as warehouse:
        start, end = month_window(f"{month_start:%Y-%m}", "UTC", latest_event(warehouse))
        hours = reserved_hours(book, fx, currency, start, end)
        if not hours:
            return []
        register(warehouse, hours)
        known = deployment_facts(warehouse, "reserved_hours")
        rows = warehouse.query(_LINES_SQL).rows
    at = datetime.combine(month_start, time(), timezone.utc)
    out: list[ReservedLine] = []
    purchases: dict[tuple, ReservedLine] = {}
    for (status, dep, day, version, unit, ccy, owner, team, app, bu, key, alias, centre, tags, micro, hours_n,
         requests, attempts) in rows:
        provider, account, project, model, region = known.get(dep, (dep, dep, None, dep, ""))
        line = ReservedLine(
            status=status, day=day, deployment=dep, provider=provider, account=account, project=project,
            model=model, region=region, price_version=version, unit_price=Decimal(unit) * fx.rate(ccy, currency, at),
            pricing_currency=ccy, pricing_unit_price=Decimal(unit), owner=owner, team=team, app=app,
            business_unit=bu, key_id=key, alias=alias, cost_centre=centre, tags=tag_pairs(tags), micro=micro,
            hours=hours_n, requests=requests, attempts=attempts)
        if status != "used":  # a day's used and unused hours add up to its purchase
            day_key = (day, dep, version)
            seen = purchases.get(day_key)
            purchases[day_key] = replace(line, status="purchase") if seen is None else replace(
                seen, micro=seen.micro + line.micro, hours=seen.hours + line.hours)
        if status != "used_hours":
            out.append(line)
    return sorted(out + list(purchases.values()), key=ReservedLine.sort_key)


def reserved_row(line: ReservedLine, billing_currency: str, invoice: str | None = None) -> dict[str, Any]:
    """The FOCUS row of one reservation line (every column of ``COLUMNS``)."""
    cost = to_decimal(line.micro)
    if line.status == "used":
        quantity = (cost / line.unit_price).quantize(QUANTUM, rounding=ROUND_HALF_EVEN) if line.unit_price else \
            Decimal(0)
    else:
        quantity = Decimal(line.hours)
    what = {"purchase": "reserved hours", "used": "reserved hours used, attributed by tokens served",
            "unused": "reserved hours unused (nothing served)"}[line.status]
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(resource_columns(provider=line.provider, account=line.account, project=line.project,
                                region=line.region or None, deployment=line.deployment, charge_day=line.day,
                                billing_month=line.day.replace(day=1), billing_currency=billing_currency,
                                invoice=invoice))
    purchase = line.status == "purchase"
    row.update({
        "BilledCost": cost if purchase else Decimal(0), "EffectiveCost": Decimal(0) if purchase else cost,
        "ChargeCategory": "Purchase" if purchase else "Usage", "ChargeFrequency": "Recurring",
        "ChargeDescription": f"Provisioned capacity of {line.deployment} ({line.model}) for team {line.owner}: "
                             f"{what}, price version {line.price_version}",
        "CommitmentDiscountCategory": "Usage",
        "CommitmentDiscountId": f"{line.provider}/{line.account}/{line.deployment}/provisioned",
        "CommitmentDiscountName": f"{line.deployment} provisioned for {line.owner}",
        "CommitmentDiscountQuantity": quantity, "CommitmentDiscountUnit": HOURS,
        "CommitmentDiscountStatus": None if purchase else line.status.capitalize(),
        "CommitmentDiscountType": "Provisioned Capacity",
        "ConsumedQuantity": quantity if line.status == "used" else None,
        "ConsumedUnit": HOURS if line.status == "used" else None,
        "PricingQuantity": quantity, "PricingUnit": HOURS,
        "ContractedCost": line.unit_price * quantity, "ContractedUnitPrice": line.unit_price,
        "ListCost": line.unit_price * quantity, "ListUnitPrice": line.unit_price, "PricingCategory": "Committed",
        "PricingCurrency": line.pricing_currency,
        "PricingCurrencyContractedUnitPrice": line.pricing_unit_price,
        "PricingCurrencyListUnitPrice": line.pricing_unit_price,
        "PricingCurrencyEffectiveCost": Decimal(0) if purchase else line.pricing_unit_price * quantity,
        "SkuId": f"{line.model}:reserved_hour", "SkuMeter": "Provisioned Hours",
        "SkuPriceDetails": f'{{"x_PriceVersion":{line.price_version}}}',
        "SkuPriceId": f"{line.deployment}:{line.model}:reserved_hour",
        "Tags": tags_json(line.tags),
        "x_team": line.team, "x_app": line.app, "x_business_unit": line.business_unit,
        "x_cost_centre": line.cost_centre, "x_alias": line.alias, "x_key_id": line.key_id,
        "x_requests": line.requests, "x_attempts": line.attempts, "x_price_version": line.price_version,
    })
    return row
