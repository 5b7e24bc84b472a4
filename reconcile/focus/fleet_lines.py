"""FOCUS rows of the fleets paid by the hour: each UTC day's fleet hours, attributed to who was served.

A deployment priced per GPU-hour (``Price.gpu_hour`` x ``gpus``) costs every hour its price is in force
(``reconcile.fleet``: the hour's cost, split over the attempts it served by their tokens, to the micro-unit).
Its rows, per UTC day x deployment x price version x the request's team/app/key/alias/business unit/cost
centre/tags:

* ``BilledCost`` = ``EffectiveCost`` = the shares of that group (whole micro-units); an hour in which nothing
  was served is an **idle** row of its own (no team), so the day's rows add up to what its hours cost;
* ``ConsumedQuantity`` = ``PricingQuantity`` = the GPU-hours those shares buy (``BilledCost`` over the price of
  one GPU-hour in the billing currency, to 6 decimal places), ``ConsumedUnit`` = ``PricingUnit`` = ``GPU-Hours``;
  ``ListUnitPrice`` = ``ContractedUnitPrice`` = that price, ``ListCost`` = ``ContractedCost`` = price x quantity;
* ``ChargeCategory`` ``Usage``, ``ChargeFrequency`` ``Recurring`` (the hours are paid whether used or not),
  ``SkuId`` ``{model}:gpu_hour``, ``SkuPriceId`` ``{deployment}:{model}:gpu_hour``, ``x_token_type`` null.

The hours run from the month's start (UTC) to the archive's newest event (a closed month: all of it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

from pricing.book import FxTable, PriceBook
from pricing.money import to_decimal
from reconcile.fleet import attribute, fleet_hours, has_fleets, latest_event, month_window
from reconcile.focus.columns import COLUMNS, resource_columns, tags_json
from reconcile.focus.usage import tag_pairs
from reconcile.warehouse import Warehouse

GPU_HOURS = "GPU-Hours"
QUANTUM = Decimal("0.000001")  # GPU-hours are given to the millionth

_LINES_SQL = """
SELECT s.deployment, CAST(timezone('UTC', s.hour_start) AS DATE) AS day, h.price_version, h.gpu_hour, h.gpus,
       h.currency, q.team, q.app, q.business_unit, q.key_id, q.alias, q.cost_centre,
       to_json(q.tags)::VARCHAR AS tags, sum(s.fleet_micro)::BIGINT AS billed_micro,
       count(DISTINCT s.request_id)::BIGINT AS requests, count(*)::BIGINT AS attempts
FROM fleet_shares AS s
JOIN fleet_hours AS h ON h.deployment = s.deployment AND h.hour_start = s.hour_start
LEFT JOIN requests AS q ON q.request_id = s.request_id
GROUP BY ALL
UNION ALL
SELECT h.deployment, CAST(timezone('UTC', h.hour_start) AS DATE), h.price_version, h.gpu_hour, h.gpus, h.currency,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, sum(h.cost_micro)::BIGINT, 0, 0
FROM fleet_hours AS h
WHERE NOT EXISTS (SELECT 1 FROM fleet_shares AS s WHERE s.deployment = h.deployment AND s.hour_start = h.hour_start)
GROUP BY ALL
"""

_DEPLOYMENT_SQL = """
SELECT deployment, arg_max(provider, event_time), arg_max(account, event_time),
       arg_max(json_extract_string(event, '$.project'), event_time), arg_max(model, event_time),
       arg_max(region, event_time)
FROM archive_rows WHERE type = 'request.attempted' AND deployment IN (SELECT deployment FROM {hours})
GROUP BY deployment
"""


def deployment_facts(warehouse: Warehouse, hours: str) -> dict[str, tuple]:
    """deployment -> (provider, account, project, model, region), as its newest attempt event says, for the
    deployments of the ``hours`` relation (one that never served: ``(id, id, None, id, "")``, see the callers)."""
    return {row[0]: row[1:] for row in warehouse.query(_DEPLOYMENT_SQL.format(hours=hours)).rows}


@dataclass(frozen=True, slots=True)
class FleetLine:
    day: date
    deployment: str
    provider: str
    account: str
    project: str | None
    model: str
    region: str
    price_version: int
    gpus: int
    unit_price: Decimal  # one GPU-hour, billing currency
    pricing_currency: str
    pricing_unit_price: Decimal  # one GPU-hour, the price book's currency
    team: str | None  # None: idle hours
    app: str | None
    business_unit: str | None
    key_id: str | None
    alias: str | None
    cost_centre: str | None
    tags: tuple[tuple[str, str], ...]
    billed_micro: int
    requests: int
    attempts: int

    def sort_key(self) -> tuple:
        return (self.day, self.deployment, self.price_version, self.team is None, self.team or "", self.app or "",
                self.business_unit or "", self.key_id or "", self.alias or "", self.cost_centre or "", self.tags)


def fleet_lines(root: Path, month_start: date, book: PriceBook, fx: FxTable, currency: str) -> list[FleetLine]:
    """The fleet rows of the UTC month starting at ``month_start`` (none when no deployment has an hourly
    price in it)."""
    if not has_fleets(book):
        return []
    with Warehouse(root, tz="UTC") as warehouse:
        start, end = month_window(f"{month_start:%Y-%m}", "UTC", latest_event(warehouse))
        hours = fleet_hours(book, fx, currency, start, end)
        if not hours:
            return []
        attribute(warehouse, hours)
        known = deployment_facts(warehouse, "fleet_hours")
        rows = warehouse.query(_LINES_SQL).rows
    at = datetime.combine(month_start, time(), timezone.utc)
    out = []
    for (dep, day, version, gpu_hour, gpus, ccy, team, app, bu, key, alias, centre, tags, billed, requests,
         attempts) in rows:
        provider, account, project, model, region = known.get(dep, (dep, dep, None, dep, ""))
        out.append(FleetLine(
            day=day, deployment=dep, provider=provider, account=account, project=project, model=model,
            region=region, price_version=version, gpus=gpus, unit_price=Decimal(gpu_hour) * fx.rate(ccy, currency, at),
            pricing_currency=ccy, pricing_unit_price=Decimal(gpu_hour), team=team, app=app, business_unit=bu,
            key_id=key, alias=alias, cost_centre=centre, tags=tag_pairs(tags), billed_micro=billed,
            requests=requests, attempts=attempts))
    return sorted(out, key=FleetLine.sort_key)


def fleet_row(line: FleetLine, billing_currency: str, invoice: str | None = None) -> dict[str, Any]:
    """The FOCUS row of one fleet line (every column of ``COLUMNS``)."""
    billed = to_decimal(line.billed_micro)
    quantity = (billed / line.unit_price).quantize(QUANTUM, rounding=ROUND_HALF_EVEN) if line.unit_price else \
        Decimal(0)
    who = "idle GPU hours (nothing served)" if line.team is None else "GPU hours attributed by tokens served"
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(resource_columns(provider=line.provider, account=line.account, project=line.project,
                                region=line.region or None, deployment=line.deployment, charge_day=line.day,
                                billing_month=line.day.replace(day=1), billing_currency=billing_currency,
                                invoice=invoice))
    row.update({
        "BilledCost": billed, "EffectiveCost": billed, "ChargeCategory": "Usage", "ChargeFrequency": "Recurring",
        "ChargeDescription": f"{who} of {line.deployment} ({line.model}), price version {line.price_version}",
        "ConsumedQuantity": quantity, "ConsumedUnit": GPU_HOURS, "PricingQuantity": quantity, "PricingUnit": GPU_HOURS,
        "ContractedCost": line.unit_price * quantity, "ContractedUnitPrice": line.unit_price,
        "ListCost": line.unit_price * quantity, "ListUnitPrice": line.unit_price, "PricingCategory": "Standard",
        "PricingCurrency": line.pricing_currency,
        "PricingCurrencyContractedUnitPrice": line.pricing_unit_price,
        "PricingCurrencyListUnitPrice": line.pricing_unit_price,
        "PricingCurrencyEffectiveCost": line.pricing_unit_price * quantity,
        "SkuId": f"{line.model}:gpu_hour", "SkuMeter": "GPU Hours",
        "SkuPriceDetails": json.dumps({"x_Gpus": line.gpus, "x_PriceVersion": line.price_version},
                                      sort_keys=True, separators=(",", ":")),
        "SkuPriceId": f"{line.deployment}:{line.model}:gpu_hour",
        "Tags": tags_json(line.tags),
        "x_team": line.team, "x_app": line.app, "x_business_unit": line.business_unit,
        "x_cost_centre": line.cost_centre, "x_alias": line.alias, "x_key_id": line.key_id,
        "x_requests": line.requests, "x_attempts": line.attempts, "x_price_version": line.price_version,
    })
    return row
