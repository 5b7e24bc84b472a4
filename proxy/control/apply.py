"""``farebox config apply farebox.yaml``: make the config database say what the file says.

Idempotent: applying the same file twice changes nothing the second time and
publishes no snapshot. The file is authoritative for business units, teams,
apps, deployments, aliases, FX rates and the currency / budget / rate-limit
policies (entries missing from the file are deleted); budget scopes and keys
it declares are upserted, never deleted (finance sets budgets and admins mint
keys through the API). Prices: ``prices.version`` with the deployments'
``price_per_1m`` is one price version; a version already published with
other prices is refused (versions are never edited: bump the number).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Mapping

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proxy.control.db.models import (
    AliasRow,
    AppRow,
    BudgetRow,
    BusinessUnit,
    DeploymentRow,
    FxRateRow,
    KeyRow,
    PolicyRow,
    PriceRow,
    PriceVersionRow,
    TeamRow,
)
from proxy.control.db.store import Mutation, budget_record, price_record
from proxy.control.declarative import EPOCH
from proxy.control.errors import ConfigRejected
from proxy.control.price_changes import add_version, price_table, reservation_into_price


def _fmt(v: Any) -> str:
    return repr(v) if not isinstance(v, dict) else "{" + ", ".join(f"{k}: {v[k]!r}" for k in v) + "}"


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    keys = [k for k in {**before, **after} if before.get(k) != after.get(k)]
    return ", ".join(f"{k}: {_fmt(before.get(k))} -> {_fmt(after.get(k))}" for k in keys)


def _set_fields(row: Any, want: Mapping[str, Any]) -> None:
    for name, value in want.items():
        setattr(row, name, value)


def _sync(s: Session, diff: list[str], kind: str, model: type, key: str, desired: dict[str, dict[str, Any]],
          current: dict[str, Any], view, build, update, delete: bool = True) -> None:  # type: ignore[no-untyped-def]
    for name, want in desired.items():
        row = current.get(name)
        if row is None:
            s.add(build(name, want))
            shown = {k: v for k, v in want.items() if v is not None and v is not False}  # defaults unshown
            diff.append(f"+ {kind} {name}" + (f": {_fmt(shown)}" if shown else ""))
        elif view(row) != want:
            diff.append(f"~ {kind} {name}: {_changed(view(row), want)}")
            update(row, want)
    if delete:
        for name, row in current.items():
            if name not in desired:
                s.delete(row)
                diff.append(f"- {kind} {name}")
    s.flush()


def apply_tree(tree: Mapping[str, Any], now: datetime, actor: str, factor: Decimal | None,
               diff: list[str]) -> Mutation:
    """The mutation; ``diff`` receives one line per change (``+`` added, ``~`` changed, ``-`` deleted)."""

    def mutate(s: Session) -> tuple[Any, Any]:
        currency = tree.get("currency") or "INR"
        budgets = dict(tree.get("budgets") or {})
        scopes = budgets.pop("scopes", None) or []
        policies = {"currency": {"value": currency}, "budgets": budgets, "rate_limits": dict(tree.get("rate_limits") or {}),
                    "privacy": dict(tree.get("privacy") or {})}
        _sync(s, diff, "policy", PolicyRow, "name", policies, {r.name: r for r in s.scalars(sa.select(PolicyRow))},
              lambda r: r.spec, lambda n, w: PolicyRow(name=n, spec=w), lambda r, w: setattr(r, "spec", w))
        fx = {}
        for e in tree.get("fx") or []:
            fx[f"{e['from']}->{e.get('to') or currency} {e['month']}"] = {
                "from_ccy": e["from"], "to_ccy": e.get("to") or currency, "month": e["month"], "rate": str(e["rate"])}
        _sync(s, diff, "fx", FxRateRow, "", fx,
              {f"{r.from_ccy}->{r.to_ccy} {r.month}": r for r in s.scalars(sa.select(FxRateRow))},
              lambda r: {"from_ccy": r.from_ccy, "to_ccy": r.to_ccy, "month": r.month, "rate": r.rate},
              lambda n, w: FxRateRow(**w), lambda r, w: setattr(r, "rate", w["rate"]))
        bus = {name: {} for name in tree.get("business_units") or []}
        teams = {t["name"]: {"business_unit": t.get("business_unit"), "cost_centre": t.get("cost_centre"),
                             "body_log": bool(t.get("body_log", False))}
                 for t in tree.get("teams") or []}
        apps = {f"{a['team']}/{a['name']}": {"cost_centre": a.get("cost_centre")} for a in tree.get("apps") or []}
        # Deletions run children first (apps, teams, then units); additions parents first.
        current_apps = {f"{r.team}/{r.name}": r for r in s.scalars(sa.select(AppRow))}
        for name, row in current_apps.items():
            if name not in apps:
                s.delete(row)
                diff.append(f"- app {name}")
        s.flush()
        _sync(s, diff, "business_unit", BusinessUnit, "name", bus, {r.name: r for r in s.scalars(sa.select(BusinessUnit))},
              lambda r: {}, lambda n, w: BusinessUnit(name=n), lambda r, w: None, delete=False)
        _sync(s, diff, "team", TeamRow, "name", teams, {r.name: r for r in s.scalars(sa.select(TeamRow))},
              lambda r: {"business_unit": r.business_unit, "cost_centre": r.cost_centre, "body_log": bool(r.body_log)},
              lambda n, w: TeamRow(name=n, **w), _set_fields)
        _sync(s, diff, "app", AppRow, "", apps, {f"{r.team}/{r.name}": r for r in s.scalars(sa.select(AppRow))},
              lambda r: {"cost_centre": r.cost_centre},
              lambda n, w: AppRow(team=n.split("/", 1)[0], name=n.split("/", 1)[1], **w), _set_fields, delete=False)
        for name, row in {r.name: r for r in s.scalars(sa.select(BusinessUnit))}.items():
            if name not in bus:
                s.delete(row)
                diff.append(f"- business_unit {name}")
        deps = {dep_id: spec for dep_id, (spec, _) in _deployments(tree).items()}
        _sync(s, diff, "deployment", DeploymentRow, "id", deps, {r.id: r for r in s.scalars(sa.select(DeploymentRow))},
              lambda r: r.spec, lambda n, w: DeploymentRow(id=n, spec=w), lambda r, w: setattr(r, "spec", w))
        aliases = {a["name"]: {k: v for k, v in a.items() if k != "name"} for a in tree.get("aliases") or []}
        _sync(s, diff, "alias", AliasRow, "name", aliases, {r.name: r for r in s.scalars(sa.select(AliasRow))},
              lambda r: r.spec, lambda n, w: AliasRow(name=n, spec=w), lambda r, w: setattr(r, "spec", w))
        budget_rows = {}
        for e in scopes:
            rec = {k: e[k] for k in ("monthly_limit", "soft_pct", "downgrade_alias", "max_calls", "env", "spend_per_hour")
                   if k in e}
            if "limit" in e:
                rec["monthly_limit"] = e["limit"]
            if rec.get("monthly_limit") is not None:
                rec["monthly_limit"] = str(Decimal(str(rec["monthly_limit"])))
            rec.setdefault("soft_pct", 80)
            budget_rows[e["scope"]] = {"scope": e["scope"], **rec}
        _sync(s, diff, "budget", BudgetRow, "scope", budget_rows, {r.scope: r for r in s.scalars(sa.select(BudgetRow))},
              budget_record, lambda n, w: BudgetRow(**{"env": "any", **w}),
              lambda r, w: [setattr(r, k, w.get(k, d)) for k, d in
                            (("monthly_limit", None), ("soft_pct", 80), ("downgrade_alias", None), ("max_calls", None),
                             ("env", "any"), ("spend_per_hour", None))],
              delete=False)
        _static_keys(s, tree.get("keys") or [], now, actor, diff)
        _prices(s, tree, now, actor, factor, diff)
        return None, {"changes": list(diff)}

    return mutate


def _deployments(tree: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], Any]]:
    """Each deployment of the file as the database keeps it: (its spec, its ``price_per_1m``), a reservation's
    price moved from ``provisioned`` into the price (``reservation_into_price``)."""
    return {d["id"]: reservation_into_price({k: v for k, v in d.items() if k not in ("id", "price_per_1m")},
                                            d.get("price_per_1m"))
            for d in tree.get("deployments") or []}


def _static_keys(s: Session, entries: list[Mapping[str, Any]], now: datetime, actor: str, diff: list[str]) -> None:
    for e in entries:
        want = {"hash": e["hash"], "team": e["team"], "app": e["app"], "aliases": list(e.get("aliases") or []),
                "env": e.get("env", "prod" if str(e["id"]).startswith("fb-prod-") else "dev"),
                "data_class_ceiling": e.get("data_class_ceiling", "internal"),
                "default_data_class": e.get("default_data_class", "internal"), "expires_at": e.get("expires_at"),
                "rpm": e.get("rpm"), "input_tpm": e.get("input_tpm"), "output_tpm": e.get("output_tpm"),
                "regions": list(e.get("regions") or []) or None, "deployments": list(e.get("deployments") or []) or None}
        row = s.get(KeyRow, e["id"])
        revoked = bool(e.get("revoked"))
        if row is None:
            s.add(KeyRow(id=e["id"], created_at=now, created_by=actor, revoked_at=now if revoked else None, **want))
            diff.append(f"+ key {e['id']}")
            continue
        have = {k: getattr(row, k) for k in want}
        if have != want or (row.revoked_at is not None) != revoked:
            for k, v in want.items():
                setattr(row, k, v)
            row.revoked_at = (row.revoked_at or now) if revoked else None
            diff.append(f"~ key {e['id']}")


def _prices(s: Session, tree: Mapping[str, Any], now: datetime, actor: str, factor: Decimal | None,
            diff: list[str]) -> None:
    section = tree.get("prices") or {}
    number = int(section.get("version", 1))
    raw_from = section.get("valid_from")
    valid_from = datetime.fromisoformat(str(raw_from).replace("Z", "+00:00")) if raw_from else EPOCH
    priced = {dep_id: price for dep_id, (_, price) in _deployments(tree).items() if price}
    table = price_table(priced) if priced else {}
    if not table:
        return
    existing = s.get(PriceVersionRow, number)
    if existing is None:
        add_version(s, number, valid_from, table, actor, factor, carry=False)
        diff.append(f"+ price version {number} valid from {valid_from.isoformat()}: {len(table)} deployment(s)")
        return
    have = {p.deployment: price_record(p) for p in s.scalars(sa.select(PriceRow).where(PriceRow.version == number))}
    have_from = existing.valid_from if existing.valid_from.tzinfo else existing.valid_from.replace(tzinfo=valid_from.tzinfo)
    if _norm(have) != _norm(table) or have_from != valid_from:
        raise ConfigRejected([f"prices.version: version {number} is already published with other prices or "
                              f"valid_from; versions are never edited, publish the change as version "
                              f"{_next(s)} with its valid_from"], "config")


def _norm(table: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d: {k: (Decimal(v) if k != "currency" else v) for k, v in rec.items()} for d, rec in table.items()}


def _next(s: Session) -> int:
    return (s.scalar(sa.select(sa.func.max(PriceVersionRow.version))) or 0) + 1
