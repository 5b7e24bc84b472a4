"""Price changes as mutations of the config database rows: a new version, never an edit.

``price_table`` checks a ``{deployment: {currency, input, output, ...}}``
table (every problem at once; decimals kept as strings). ``add_version``
inserts the next version: the latest prices carried forward and overlaid
with the table, refused when a price moves by more than ``factor`` (unless
the caller confirmed a large change with ``factor=None``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ledger.usage import SERVICE_TIER, STANDARD_TIERS
from pricing.book import Price, PriceVersion, tier_key
from proxy.control.db.models import PriceRow, PriceVersionRow
from proxy.control.db.store import Mutation, price_record
from proxy.control.errors import ConfigRejected, ControlConflict
from proxy.control.problems import Problems, Reader
from proxy.control.validate import check_price_change

PRICE_TYPES = ("input", "output", "cached_input", "cache_write", "reasoning", "cache_write_1h")


def _check(problems: Problems, what: str) -> None:
    if problems.items:
        raise ConfigRejected(problems.items, what)


def price_table(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Validate ``{deployment: {currency, input, output, ..., tiers: {tier: {...}}}}``; decimals as strings. A
    served tier's prices become their own entry, ``{deployment}@{tier}`` (in the deployment's currency unless
    they name one)."""
    problems = Problems()
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(body, Mapping) or not body:
        raise ConfigRejected(["prices: give at least one deployment's prices"], "price version")
    for dep_id, entry in body.items():
        tiers = entry.get("tiers") if isinstance(entry, Mapping) else None
        if isinstance(entry, Mapping) and "tiers" in entry:
            entry = {k: v for k, v in entry.items() if k != "tiers"}
        out[str(dep_id)] = _record(Reader(entry, f"prices.{dep_id}", problems))
        if tiers is None:
            continue
        if not isinstance(tiers, Mapping):
            problems.add(f"prices.{dep_id}.tiers", "must map each served tier to its prices")
            continue
        for tier, prices in tiers.items():
            where = f"prices.{dep_id}.tiers.{tier}"
            if not isinstance(tier, str) or not SERVICE_TIER.match(tier) or tier in STANDARD_TIERS:
                problems.add(where, "must be a served tier's lower-case name (flex, priority, ...)")
                continue
            if isinstance(prices, Mapping) and "currency" not in prices and isinstance(entry.get("currency"), str):
                prices = {**prices, "currency": entry["currency"]}
            out[tier_key(str(dep_id), tier)] = _record(Reader(prices, where, problems))
    _check(problems, "price version")
    return out


def reservation_into_price(spec: dict[str, Any], price: Any) -> tuple[dict[str, Any], Any]:
    """A deployment body's ``provisioned: {team, per_hour | per_month}`` split as the database keeps it: the team
    in the deployment, the reservation in the new price version (``price_per_1m`` must come with it)."""
    prov = spec.get("provisioned")
    if not isinstance(prov, Mapping) or not ({"per_hour", "per_month"} & set(prov)):
        return spec, price
    if not isinstance(price, Mapping):
        raise ConfigRejected(["provisioned: a reservation's price is a new price version: send price_per_1m with "
                              "it"], "deployment")
    amounts = {f"reserved_{k[4:]}": prov[k] for k in ("per_hour", "per_month") if k in prov}
    rest = {k: v for k, v in prov.items() if k not in ("per_hour", "per_month")}
    return {**spec, "provisioned": rest}, {**price, **amounts, "reserved_team": prov.get("team")}


def _record(r: Reader) -> dict[str, Any]:
    rec = {"currency": r.str("currency", "USD")}
    for name in (*PRICE_TYPES, "gpu_hour", "reserved_hour", "reserved_month"):
        value = r.decimal(name) if name in ("input", "output") else r.decimal(name, None)
        if value is not None:
            rec[name] = str(value)
    gpus = r.int("gpus", None, 1)
    if gpus is not None:
        rec["gpus"] = gpus
    if ("gpu_hour" in rec) != ("gpus" in rec):
        r.problems.add(r.path, "gpu_hour and gpus go together: the price of one GPU-hour and how many GPUs")
    team = r.str("reserved_team", None)
    if team is not None:
        rec["reserved_team"] = team
    if ("reserved_hour" in rec or "reserved_month" in rec) != (team is not None):
        r.problems.add(r.path, "reserved_hour (or reserved_month) and reserved_team go together: the reservation's "
                               "price and the team it is charged to")
    r.reject_unknown()
    return rec


def add_version(s: Session, number: int | None, valid_from: datetime, table: Mapping[str, Mapping[str, Any]],
                actor: str, factor: Decimal | None = None, carry: bool = True) -> int:
    """Insert a new version (latest prices overlaid with ``table``); ``factor``: refuse bigger moves."""
    latest = s.scalars(sa.select(PriceVersionRow).order_by(PriceVersionRow.version.desc()).limit(1)).first()
    if number is None:
        number = (latest.version if latest else 0) + 1
    elif s.get(PriceVersionRow, number) is not None:
        raise ControlConflict(f"Price version {number} exists and is never edited; publish a new version.",
                              param="version")
    merged: dict[str, dict[str, Any]] = {}
    if latest is not None and carry:  # carry forward what the change does not mention
        for p in s.scalars(sa.select(PriceRow).where(PriceRow.version == latest.version)):
            merged[p.deployment] = price_record(p)
    before = dict(merged)
    if latest is not None and not carry:
        before = {p.deployment: price_record(p)
                  for p in s.scalars(sa.select(PriceRow).where(PriceRow.version == latest.version))}
    merged.update({k: dict(v) for k, v in table.items()})
    if factor is not None and latest is not None:
        problems = Problems()
        check_price_change(_version(latest.version, latest.valid_from, before), _version(number, valid_from, merged),
                           factor, problems)
        _check(problems, "price version")
    s.add(PriceVersionRow(version=number, valid_from=valid_from, created_at=datetime.now(timezone.utc), created_by=actor))
    s.flush()
    for dep_id, rec in merged.items():
        s.add(PriceRow(version=number, deployment=dep_id, currency=rec.get("currency", "USD"), input=rec["input"],
                       output=rec["output"], cached_input=rec.get("cached_input"),
                       cache_write=rec.get("cache_write"), reasoning=rec.get("reasoning"),
                       cache_write_1h=rec.get("cache_write_1h"), gpu_hour=rec.get("gpu_hour"),
                       gpus=rec.get("gpus"), reserved_hour=rec.get("reserved_hour"),
                       reserved_month=rec.get("reserved_month"), reserved_team=rec.get("reserved_team")))
    return number


def _version(number: int, valid_from: datetime, table: Mapping[str, Mapping[str, Any]]) -> PriceVersion:
    if valid_from.tzinfo is None:
        valid_from = valid_from.replace(tzinfo=timezone.utc)
    return PriceVersion(version=number, valid_from=valid_from, prices={d: Price(**rec) for d, rec in table.items()})


def add_price_version(number: int | None, valid_from: datetime, table: Mapping[str, Mapping[str, Any]],
                      actor: str, factor: Decimal | None = None) -> Mutation:
    """``factor``: refuse a move beyond it (None: the caller confirmed a large change)."""

    def mutate(s: Session) -> tuple[Any, Any]:
        version = add_version(s, number, valid_from, table, actor, factor)
        return None, {"version": version, "valid_from": valid_from.isoformat(), "prices": dict(table)}

    return mutate
