"""Admin changes as mutations of the config database rows.

Each public function checks its own input (every problem at once), then
returns a ``Mutation`` for ``ConfigDB.change``: it edits rows inside the
change's transaction and returns (before, after) for the audit log. Whether
the result is a valid whole (aliases point at deployments, prices in force,
...) is decided afterwards by compiling the new snapshot document. Audit
records and answers never hold a key or token, only display ids. Price
versions are in ``price_changes.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Mapping

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proxy.control.db.models import (
    AdminTokenRow,
    AliasRow,
    AppRow,
    BudgetRow,
    BusinessUnit,
    DeploymentRow,
    KeyRow,
    TeamRow,
)
from proxy.control.db.store import Mutation, budget_record
from proxy.control.errors import ConfigRejected, ControlConflict, ControlNotFound
from proxy.control.keys import MintedKey, mint_admin_token, mint_key
from proxy.control.policies import KEY_ENVS, budget_limit_from, spend_scope_problem
from proxy.control.price_changes import add_version, price_table, reservation_into_price
from proxy.control.problems import Problems, Reader
from proxy.control.secret_guard import secret_guard
from proxy.snapshot import ADMIN_ROLES, DATA_CLASSES, MAX_COST_CENTRE
from proxy.snapshot.secrets import SecretHosts

KEY_FIELDS = ("team", "app", "aliases", "env", "data_class_ceiling", "default_data_class", "rpm", "input_tpm",
              "output_tpm", "expires_at", "regions", "deployments")


def _check(problems: Problems, what: str) -> None:
    if problems.items:
        raise ConfigRejected(problems.items, what)


def key_view(k: KeyRow) -> dict[str, Any]:
    """A key as admins see it: display id and policy, never the hash or the key."""
    return {
        "id": k.id, "team": k.team, "app": k.app, "env": k.env, "aliases": list(k.aliases),
        "data_class_ceiling": k.data_class_ceiling, "default_data_class": k.default_data_class,
        "rpm": k.rpm, "input_tpm": k.input_tpm, "output_tpm": k.output_tpm,
        "regions": list(k.regions or []), "deployments": list(k.deployments or []),
        "expires_at": _iso_unix(k.expires_at), "revoked": k.revoked_at is not None,
        "revoked_at": _iso(k.revoked_at), "created_at": _iso(k.created_at), "created_by": k.created_by,
        "rotated_from": k.rotated_from,
    }


def _iso(at: datetime | None) -> str | None:
    if at is None:
        return None
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).isoformat()


def _iso_unix(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _expiry(r: Reader) -> float | None:
    raw = r.data.get("expires_at")
    r.skip("expires_at")
    if raw is None:
        return None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, str):
        try:
            at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if at.tzinfo is not None:
                return at.timestamp()
        except ValueError:
            pass
    r.problems.add(r.at("expires_at"), f"must be unix seconds or an ISO-8601 time with a zone, got {raw!r}")
    return None


# -- keys ---------------------------------------------------------------------------------------


def key_spec(body: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a key-create body; the spec for ``create_key``."""
    problems = Problems()
    r = Reader(dict(body), "", problems)
    spec = {
        "team": r.str("team"), "app": r.str("app"), "aliases": r.str_list("aliases"),
        "env": r.str("env", "dev", choices=KEY_ENVS),
        "data_class_ceiling": r.str("data_class_ceiling", "internal", choices=DATA_CLASSES),
        "default_data_class": r.str("default_data_class", "internal", choices=DATA_CLASSES),
        "rpm": r.int("rpm", None, 1), "input_tpm": r.int("input_tpm", None, 1), "output_tpm": r.int("output_tpm", None, 1),
        "expires_at": _expiry(r),
        "regions": _unique(r.str_list("regions", [])), "deployments": _unique(r.str_list("deployments", [])),
    }
    if not spec["aliases"] and "aliases" in body:
        problems.add("aliases", "give at least one alias")
    r.reject_unknown()
    _check(problems, "key")
    return spec


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _check_pins(s: Session, spec: Mapping[str, Any], problems: Problems) -> None:
    """A key's regions must be some deployment's region, its deployments must exist."""
    specs = {row.id: row.spec for row in s.scalars(sa.select(DeploymentRow))}
    regions = {str(d.get("region")) for d in specs.values() if isinstance(d, Mapping) and d.get("region")}
    for i, region in enumerate(spec.get("regions") or ()):
        if region not in regions:
            problems.add(f"regions[{i}]", f"no deployment is in region {region!r} (regions: {sorted(regions)})")
    for i, dep in enumerate(spec.get("deployments") or ()):
        if dep not in specs:
            problems.add(f"deployments[{i}]", f"unknown deployment {dep!r}")


def create_key(spec: Mapping[str, Any], actor: str, now: datetime, *, rotated_from: str | None = None,
               minted: MintedKey | None = None) -> tuple[Mutation, MintedKey]:
    minted = minted or mint_key(team=spec["team"], app=spec["app"], aliases=list(spec["aliases"]), env=spec["env"],
                                now_iso=now.isoformat())

    def mutate(s: Session) -> tuple[Any, Any]:
        problems = Problems()
        if s.get(TeamRow, spec["team"]) is None:
            problems.add("team", f"unknown team {spec['team']!r}")
        known = set(s.scalars(sa.select(AliasRow.name)))
        for i, a in enumerate(spec["aliases"]):
            if a not in known:
                problems.add(f"aliases[{i}]", f"unknown alias {a!r}")
        _check_pins(s, spec, problems)
        _check(problems, "key")
        row = KeyRow(id=minted.record["id"], hash=minted.record["hash"], team=spec["team"], app=spec["app"],
                     env=spec["env"], aliases=list(spec["aliases"]), data_class_ceiling=spec["data_class_ceiling"],
                     default_data_class=spec["default_data_class"], rpm=spec.get("rpm"),
                     input_tpm=spec.get("input_tpm"), output_tpm=spec.get("output_tpm"),
                     regions=list(spec.get("regions") or []) or None,
                     deployments=list(spec.get("deployments") or []) or None,
                     expires_at=spec.get("expires_at"), created_at=now, created_by=actor, rotated_from=rotated_from)
        s.add(row)
        s.flush()
        return None, key_view(row)

    return mutate, minted


def _key(s: Session, key_id: str) -> KeyRow:
    row = s.get(KeyRow, key_id)
    if row is None:
        raise ControlNotFound(f"No key with id {key_id!r}.", param="key_id")
    return row


def revoke_key(key_id: str, now: datetime) -> Mutation:
    def mutate(s: Session) -> tuple[Any, Any]:
        row = _key(s, key_id)
        before = key_view(row)
        if row.revoked_at is None:
            row.revoked_at = now
        return before, key_view(row)

    return mutate


def rotate_spec(body: Mapping[str, Any]) -> dict[str, list[str]]:
    """Validate a key-rotate body: ``overlap_s`` (read by the caller), optional ``regions`` / ``deployments``
    replacing the old key's on the new one; the pins for ``rotate_key``."""
    problems = Problems()
    r = Reader(dict(body), "", problems)
    r.skip("overlap_s")
    pins: dict[str, list[str]] = {}
    for name in ("regions", "deployments"):
        values = r.str_list(name, [])
        if body.get(name) is not None:  # absent or null: carry the old key's over
            pins[name] = _unique(values)
    r.reject_unknown()
    _check(problems, "rotation")
    return pins


def rotate_key(key_id: str, overlap_s: float, actor: str, now: datetime,
               pins: Mapping[str, list[str]] | None = None) -> tuple[Mutation, list[MintedKey]]:
    """A new key with the old one's policy; the old key stays valid for ``overlap_s`` more seconds.

    ``pins``: ``regions`` / ``deployments`` for the new key (else the old key's are carried over).
    """
    out: list[MintedKey] = []

    def mutate(s: Session) -> tuple[Any, Any]:
        old = _key(s, key_id)
        if old.revoked_at is not None:
            raise ConfigRejected([f"key {key_id} is revoked; create a new key instead"], "rotation")
        before = key_view(old)
        spec = {"team": old.team, "app": old.app, "aliases": list(old.aliases), "env": old.env,
                "data_class_ceiling": old.data_class_ceiling, "default_data_class": old.default_data_class,
                "rpm": old.rpm, "input_tpm": old.input_tpm, "output_tpm": old.output_tpm, "expires_at": old.expires_at,
                "regions": list(old.regions or []), "deployments": list(old.deployments or []), **(pins or {})}
        end = (now + timedelta(seconds=overlap_s)).timestamp()
        old.expires_at = end if old.expires_at is None else min(old.expires_at, end)
        create, minted = create_key(spec, actor, now, rotated_from=key_id)
        _, new = create(s)
        out.append(minted)
        return before, {"old": key_view(old), "new": new}

    return mutate, out


# -- budgets, teams, business units ---------------------------------------------------------------


def budget_spec(body: Mapping[str, Any], scope: str | None = None) -> dict[str, Any]:
    problems = Problems()
    r = Reader(dict(body), "", problems)
    limit = budget_limit_from(r)
    r.reject_unknown()
    if scope is not None and (why := spend_scope_problem(scope, limit)):
        problems.add("spend_per_hour", why)
    _check(problems, "budget")
    spec = {k: body[k] for k in ("monthly_limit", "limit", "soft_pct", "downgrade_alias", "max_calls", "env",
                                 "spend_per_hour") if k in body}
    if "limit" in spec:
        spec["monthly_limit"] = spec.pop("limit")
    if spec.get("monthly_limit") is not None:
        spec["monthly_limit"] = str(Decimal(str(spec["monthly_limit"])))
    if spec.get("spend_per_hour") is not None:
        spec["spend_per_hour"] = spec["spend_per_hour"].strip()  # validated: a decimal string
    return spec


def set_budget(scope: str, spec: Mapping[str, Any]) -> Mutation:
    def mutate(s: Session) -> tuple[Any, Any]:
        row = s.get(BudgetRow, scope)
        before = budget_record(row) if row else None
        if row is None:
            row = BudgetRow(scope=scope, soft_pct=80, env="any")
            s.add(row)
        row.monthly_limit = spec.get("monthly_limit")
        row.soft_pct = spec.get("soft_pct", 80)
        row.downgrade_alias = spec.get("downgrade_alias")
        row.max_calls = spec.get("max_calls")
        row.env = spec.get("env", "any")
        row.spend_per_hour = spec.get("spend_per_hour")
        return before, budget_record(row)

    return mutate


def put_team(name: str, fields: Mapping[str, Any]) -> Mutation:
    """Create or change a team; a field the body omits keeps its value (null clears it)."""

    def mutate(s: Session) -> tuple[Any, Any]:
        row = s.get(TeamRow, name)
        before = _team_record(row) if row else None
        business_unit = fields.get("business_unit", row.business_unit if row else None)
        cost_centre = fields.get("cost_centre", row.cost_centre if row else None)
        body_log = fields.get("body_log", row.body_log if row else False)
        problems = [] if isinstance(body_log, bool) else [f"body_log: must be true or false, got {body_log!r}"]
        if business_unit is not None and s.get(BusinessUnit, business_unit) is None:
            problems.append(f"business_unit: unknown business unit {business_unit!r}")
        if not _good_cost_centre(cost_centre):
            problems.append(_COST_CENTRE_RULE)
        if problems:
            raise ConfigRejected(problems, "team")
        if row is None:
            row = TeamRow(name=name)
            s.add(row)
        row.business_unit, row.cost_centre, row.body_log = business_unit, cost_centre, body_log
        return before, _team_record(row)

    return mutate


def _team_record(row: TeamRow) -> dict[str, Any]:
    return {"name": row.name, "business_unit": row.business_unit, "cost_centre": row.cost_centre,
            "body_log": bool(row.body_log)}


_COST_CENTRE_RULE = f"cost_centre: must be null or a non-empty string of at most {MAX_COST_CENTRE} characters"


def _good_cost_centre(value: Any) -> bool:
    return value is None or (isinstance(value, str) and bool(value.strip()) and len(value) <= MAX_COST_CENTRE)


def put_app(team: str, name: str, fields: Mapping[str, Any]) -> Mutation:
    """Create an app of an existing team or change its cost centre (omitted: kept; null: the team's)."""

    def mutate(s: Session) -> tuple[Any, Any]:
        if s.get(TeamRow, team) is None:
            raise ConfigRejected([f"team: unknown team {team!r}"], "app")
        row = s.get(AppRow, (team, name))
        before = {"team": team, "name": name, "cost_centre": row.cost_centre} if row else None
        cost_centre = fields.get("cost_centre", row.cost_centre if row else None)
        if not _good_cost_centre(cost_centre):
            raise ConfigRejected([_COST_CENTRE_RULE], "app")
        if row is None:
            row = AppRow(team=team, name=name)
            s.add(row)
        row.cost_centre = cost_centre
        return before, {"team": team, "name": name, "cost_centre": cost_centre}

    return mutate


def put_business_unit(name: str) -> Mutation:
    def mutate(s: Session) -> tuple[Any, Any]:
        if s.get(BusinessUnit, name) is not None:
            return {"name": name}, {"name": name}
        s.add(BusinessUnit(name=name))
        return None, {"name": name}

    return mutate


# -- aliases, deployments, prices -----------------------------------------------------------------


def put_alias(name: str, body: Mapping[str, Any]) -> Mutation:
    spec = {k: v for k, v in body.items() if k != "name"}

    def mutate(s: Session) -> tuple[Any, Any]:
        row = s.get(AliasRow, name)
        before = {"name": name, **row.spec} if row else None
        if row is None:
            row = AliasRow(name=name, spec=spec)
            s.add(row)
        else:
            row.spec = spec
        return before, {"name": name, **spec}

    return mutate


def put_deployment(dep_id: str, body: Mapping[str, Any], now: datetime, actor: str,
                   factor: Decimal | None = None, secret_hosts: SecretHosts | None = None) -> Mutation:
    """A deployment over the admin API (``secret_guard`` holds); ``price_per_1m`` is a new price version from now."""
    spec = {k: v for k, v in body.items() if k not in ("id", "price_per_1m")}
    spec, price = reservation_into_price(spec, body.get("price_per_1m"))  # the reservation is a price

    def mutate(s: Session) -> tuple[Any, Any]:
        row = s.get(DeploymentRow, dep_id)
        if secret_hosts is not None:
            secret_guard(dep_id, row.spec if row else None, spec, secret_hosts)
        before = {"id": dep_id, **row.spec} if row else None
        if row is None:
            s.add(DeploymentRow(id=dep_id, spec=spec))
        else:
            row.spec = spec
        after: dict[str, Any] = {"id": dep_id, **spec}
        if price is not None:
            version = add_version(s, None, now, price_table({dep_id: price}), actor, factor)
            after["price_version"] = version
        return before, after

    return mutate


# -- admin tokens ---------------------------------------------------------------------------------


def create_admin_token(name: str, role: str, now: datetime) -> tuple[Mutation, MintedKey]:
    if role not in ADMIN_ROLES:
        raise ConfigRejected([f"role: must be one of {list(ADMIN_ROLES)}, got {role!r}"], "admin token")
    minted = mint_admin_token(name=name, role=role, now_iso=now.isoformat())

    def mutate(s: Session) -> tuple[Any, Any]:
        row = s.get(AdminTokenRow, name)
        if row is not None and row.revoked_at is None:
            raise ControlConflict(f"Admin token {name!r} exists; revoke it first.", param="name")
        if row is not None:
            s.delete(row)
            s.flush()
        s.add(AdminTokenRow(name=name, role=role, hash=minted.record["hash"], created_at=now))
        return None, {"name": name, "role": role}

    return mutate, minted


def revoke_admin_token(name: str, now: datetime) -> Mutation:
    def mutate(s: Session) -> tuple[Any, Any]:
        row = s.get(AdminTokenRow, name)
        if row is None:
            raise ControlNotFound(f"No admin token named {name!r}.")
        before = {"name": name, "role": row.role, "revoked": row.revoked_at is not None}
        row.revoked_at = row.revoked_at or now
        return before, {**before, "revoked": True}

    return mutate
