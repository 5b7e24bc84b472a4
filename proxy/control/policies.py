"""Who may spend what: keys, budgets, rate limits and admin tokens, read from config.

The policy half of the declarative compiler (``declarative.py`` holds the
catalogue: currency, FX, prices, teams, deployments, aliases). Same rules:
pure, every problem recorded with its path, nothing raised on the first.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from proxy.admission.spend_rate import parse_spend_per_hour
from proxy.control.problems import Problems, Reader
from proxy.limits.bucket import max_capacity
from proxy.snapshot import (
    ADMIN_ROLES,
    DATA_CLASSES,
    AdminToken,
    Alias,
    BudgetLimit,
    BudgetPolicy,
    Deployment,
    KeyLimits,
    KeyRecord,
    RatePolicy,
    Team,
)

MAX_PER_MINUTE = max_capacity(60)  # ~150M: token buckets stay exact integers (also in Redis Lua)
KEY_ENVS = ("dev", "prod")
BUDGET_ENVS = ("any", "prod", "dev")


def with_env_conflict(key: KeyRecord, budgets: BudgetPolicy) -> KeyRecord:
    """Precompute the first budget of the other environment this key would charge (checked at auth)."""
    scopes = [f"key:{key.key_id}", f"team:{key.team}"] + ([f"bu:{key.business_unit}"] if key.business_unit else [])
    for scope in scopes:
        limit = budgets.scopes.get(scope)
        if limit is not None and limit.env not in ("any", key.env):
            return replace(key, env_conflict=scope)
    return key


def add_key(
    keys: dict[str, KeyRecord],
    r: Reader,
    teams: Mapping[str, Team],
    apps: Mapping[str, object],  # "team/app" -> the app (only membership is checked here)
    aliases: Mapping[str, Alias],
    deployments: Mapping[str, Deployment],
) -> None:
    key_hash = r.str("hash")
    team, app = r.str("team"), r.str("app")
    allowed = r.str_list("aliases")
    if key_hash and (len(key_hash) != 64 or any(c not in "0123456789abcdef" for c in key_hash)):
        r.problems.add(r.at("hash"), "must be a lowercase SHA-256 hex digest")
    if team and team not in teams:
        r.problems.add(r.at("team"), f"unknown team {team!r}")
    if team and app and apps and f"{team}/{app}" not in apps:
        r.problems.add(r.at("app"), f"unknown app {app!r} for team {team!r}")
    for i, a in enumerate(allowed):
        if a not in aliases:
            r.problems.add(f"{r.at('aliases')}[{i}]", f"unknown alias {a!r}")
    regions, pinned = _key_pins(r, deployments)
    key_id = r.str("id") or "?"
    env = r.str("env", "prod" if key_id.startswith("fb-prod-") else "dev", choices=KEY_ENVS)
    ceiling = r.str("data_class_ceiling", "internal", choices=DATA_CLASSES)
    default_class = r.str("default_data_class", "internal", choices=DATA_CLASSES)
    rec = KeyRecord(
        key_id=key_id,
        key_hash=key_hash or "",
        team=team or "?",
        app=app or "?",
        business_unit=teams[team].business_unit if team in teams else None,
        aliases=frozenset(allowed),
        data_class_ceiling=ceiling,
        default_data_class=default_class,
        expires_at=r.number("expires_at", None),
        revoked=r.bool("revoked", False),
        limits=_key_limits(r),
        env=env,
        regions=regions,
        deployments=pinned,
    )
    r.str("created_at", None)  # informational
    r.reject_unknown()
    if key_hash:
        keys[key_hash] = rec


def _key_pins(r: Reader, deployments: Mapping[str, Deployment]) -> tuple[frozenset[str], frozenset[str]]:
    """A key's ``regions`` (residency pin) and ``deployments`` (allow-list); empty or absent: no restriction."""
    known_regions = {d.region for d in deployments.values()}
    regions = r.str_list("regions", [])
    for i, region in enumerate(regions):
        if region not in known_regions:
            r.problems.add(f"{r.at('regions')}[{i}]", f"no deployment is in region {region!r} "
                                                     f"(regions: {sorted(known_regions)})")
    pinned = r.str_list("deployments", [])
    for i, dep in enumerate(pinned):
        if dep not in deployments:
            r.problems.add(f"{r.at('deployments')}[{i}]", f"unknown deployment {dep!r}")
    return frozenset(regions), frozenset(pinned)


def per_minute(r: Reader, name: str) -> int | None:
    """A requests- or tokens-per-minute limit, within what a token bucket counts exactly."""
    value = r.int(name, None, 1)
    if value is not None and value > MAX_PER_MINUTE:
        r.problems.add(r.at(name), f"must be <= {MAX_PER_MINUTE:,} per minute, got {value:,}")
        return None
    return value


def _key_limits(r: Reader) -> KeyLimits:
    return KeyLimits(rpm=per_minute(r, "rpm"), input_tpm=per_minute(r, "input_tpm"), output_tpm=per_minute(r, "output_tpm"))


def _micro(r: Reader, name: str) -> int | None:
    """A money amount in currency units -> exact integer micro-units (at most 6 decimals)."""
    value = r.decimal(name, None)
    if value is None:
        return None
    micro = value * 1_000_000
    if micro != micro.to_integral_value():
        r.problems.add(r.at(name), "has more than 6 decimal places")
        return None
    return int(micro)


def _spend_per_hour(r: Reader) -> int | None:
    """The fast spend bucket's money per hour: a quoted decimal string only (``spend_rate.parse_spend_per_hour``)."""
    if r.data.get("spend_per_hour") is None:
        return None
    micro, why = parse_spend_per_hour(r.data["spend_per_hour"])
    if why:
        r.problems.add(r.at("spend_per_hour"), why)
    return micro


def spend_scope_problem(scope: str, limit: BudgetLimit) -> str | None:
    """Why ``scope`` cannot carry the limit's ``spend_per_hour``, or None (only key and team scopes can)."""
    if limit.spend_per_hour_micro and not scope.startswith(("key:", "team:")):
        return "is a per-key or per-team limit (scope key:<id> or team:<team>)"
    return None


def budget_limit_from(r: Reader, aliases: Mapping[str, Alias] | None = None) -> BudgetLimit:
    """One budget limit (config entry or admin API body); problems go to the reader."""
    limit = BudgetLimit(
        limit_micro=_micro(r, "monthly_limit") if "monthly_limit" in r.data else _micro(r, "limit"),
        soft_pct=r.int("soft_pct", 80, 1),
        downgrade_alias=r.str("downgrade_alias", None),
        max_calls=r.int("max_calls", None, 1),
        env=r.str("env", "any", choices=BUDGET_ENVS),
        spend_per_hour_micro=_spend_per_hour(r),
    )
    r.skip("limit", "monthly_limit", "spend_per_hour")
    if limit.soft_pct > 100:
        r.problems.add(r.at("soft_pct"), "must be <= 100")
    if aliases is not None and limit.downgrade_alias and limit.downgrade_alias not in aliases:
        r.problems.add(r.at("downgrade_alias"), f"unknown alias {limit.downgrade_alias!r}")
    return limit


def check_scope(scope: str, teams: Mapping[str, Team], bus: set[str]) -> str | None:
    """Why a budget scope id is not valid, or None."""
    kind, _, name = scope.partition(":")
    if not name or kind not in ("key", "team", "bu"):
        return "must look like key:<key id>, team:<team> or bu:<business unit>"
    if kind == "team" and name not in teams:
        return f"unknown team {name!r}"
    if kind == "bu" and name not in bus:
        return f"unknown business unit {name!r}"
    return None


def read_budgets(
    r: Reader,
    stored: Iterable[Mapping[str, Any]],
    teams: Mapping[str, Team],
    bus: set[str],
    aliases: Mapping[str, Alias],
) -> BudgetPolicy:
    tz = r.str("timezone", "Asia/Kolkata")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        r.problems.add(r.at("timezone"), f"unknown time zone {tz!r}")
    cap = _micro(r, "per_request_cap")
    runs = r.child("runs")
    run_default = budget_limit_from(runs, aliases)
    runs.reject_unknown()
    scopes: dict[str, BudgetLimit] = {}
    entries = [(e, e.str("scope")) for e in r.items("scopes")]
    entries += [(e, e.str("scope")) for e in (Reader(d, f"stored budgets[{i}]", r.problems) for i, d in enumerate(stored))]
    for e, scope in entries:
        limit = budget_limit_from(e, aliases)
        e.skip("set_at", "set_by")
        e.reject_unknown()
        if scope:
            why = check_scope(scope, teams, bus)
            if why:
                e.problems.add(e.at("scope"), why)
            elif why := spend_scope_problem(scope, limit):
                e.problems.add(e.at("spend_per_hour"), why)
            scopes[scope] = limit  # later entries (admin changes) win
    r.reject_unknown()
    return BudgetPolicy(timezone=tz, per_request_cap_micro=cap, run_default=run_default, scopes=scopes)


def read_rate_limits(r: Reader, teams: Mapping[str, Team]) -> RatePolicy:
    kd = r.child("key_defaults")
    key_default = _key_limits(kd)
    kd.reject_unknown()
    team_tpm: dict[str, int] = {}
    tt = r.child("team_tpm")
    for name, value in tt.data.items():
        if name not in teams:
            tt.problems.add(tt.at(name), f"unknown team {name!r}")
        tpm = per_minute(tt, name)
        if tpm:
            team_tpm[name] = tpm
    mirror = r.int("deployment_mirror_pct", 90, 1)
    if mirror > 100:
        r.problems.add(r.at("deployment_mirror_pct"), "must be <= 100")
    r.reject_unknown()
    return RatePolicy(key_default=key_default, team_tpm=team_tpm, mirror_pct=mirror)


def read_admin_tokens(stored: Iterable[Mapping[str, Any]], problems: Problems) -> dict[str, AdminToken]:
    tokens: dict[str, AdminToken] = {}
    for i, entry in enumerate(stored):
        r = Reader(entry, f"stored admin_tokens[{i}]", problems)
        name, role, token_hash = r.str("name"), r.str("role", choices=ADMIN_ROLES), r.str("hash")
        revoked = r.bool("revoked", False)
        r.skip("created_at")
        r.reject_unknown()
        if name and role and token_hash:
            if revoked:
                tokens.pop(token_hash, None)
            else:
                tokens[token_hash] = AdminToken(name=name, role=role, token_hash=token_hash)
    return tokens
