"""Compile the declarative control-plane config (farebox.yaml) into a Snapshot.

Pure: takes parsed YAML (dicts and lists) plus stored key records, returns a
``Snapshot`` or raises ``ConfigError`` listing every problem with its path.
Sections read here: ``currency``, ``fx``, ``prices``, ``business_units``,
``teams``, ``apps``, ``deployments``, ``aliases``; keys, budgets, rate limits
and admin tokens are read by ``policies.py``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import orjson

from ledger.usage import SERVICE_TIER
from pricing.book import FxTable, Price, PriceBook, PriceVersion
from pricing.errors import PricingError
from proxy.control.alias_cache import check_semantic, read_alias_cache
from proxy.control.alias_variants import (
    check_shadow_teams,
    check_shadows,
    check_splits,
    read_shadow,
    read_split,
    shadow_keys,
)
from proxy.control.deployment_reader import read_deployments, read_price
from proxy.control.policies import (
    add_key,
    read_admin_tokens,
    read_budgets,
    read_rate_limits,
    with_env_conflict,
)
from proxy.control.problems import Problems, Reader
from proxy.snapshot import (
    CAPABILITIES,
    MAX_COST_CENTRE,
    Alias,
    App,
    Deployment,
    KeyRecord,
    Snapshot,
    Team,
)
from proxy.snapshot.privacy import PrivacyPolicy, policy_from_mapping

CONTROL_SECTIONS = (
    "currency", "fx", "prices", "business_units", "teams", "apps", "deployments", "aliases", "keys",
    "budgets", "rate_limits", "privacy",
)
EPOCH = datetime(2020, 1, 1, tzinfo=timezone.utc)


def compile_snapshot(
    tree: Mapping[str, Any],
    stored_keys: Iterable[Mapping[str, Any]] = (),
    stored_budgets: Iterable[Mapping[str, Any]] = (),
    stored_admin_tokens: Iterable[Mapping[str, Any]] = (),
    *,
    version: int = 1,
    problems: Problems | None = None,
    price_versions: Iterable[Mapping[str, Any]] | None = None,
) -> Snapshot | None:
    """Build a snapshot; returns None when problems were recorded.

    ``price_versions`` (the config database's versioned rows:
    ``{version, valid_from, prices: {deployment: price}}``) replace the
    file's ``prices`` section and the deployments' ``price_per_1m``.
    """
    problems = problems if problems is not None else Problems()
    root = Reader(dict(tree), "", problems)
    currency = root.str("currency", "INR")
    fx = _fx(root, currency)
    bus = set(root.str_list("business_units", []))
    teams = _teams(root, bus)
    apps = _apps(root, teams)
    deployments, prices = read_deployments(root, priced_here=price_versions is None)
    for dep in deployments.values():
        if dep.provisioned_team is not None and dep.provisioned_team not in teams:
            problems.add(f"deployments.{dep.id}.provisioned.team", f"{dep.provisioned_team!r} is not a team")
    if price_versions is None:
        book = _price_book(root, prices)
    else:
        root.skip("prices")
        book = _versioned_book(price_versions, problems)
    aliases = _aliases(root, deployments)
    budgets = read_budgets(root.child("budgets"), stored_budgets, teams, bus, aliases)
    rate_limits = read_rate_limits(root.child("rate_limits"), teams)
    keys: dict[str, KeyRecord] = {}
    for r in root.items("keys"):
        add_key(keys, r, teams, apps, aliases, deployments)
    for i, entry in enumerate(stored_keys):
        add_key(keys, Reader(entry, f"stored keys[{i}]", problems), teams, apps, aliases, deployments)
    admin_tokens = read_admin_tokens(stored_admin_tokens, problems)
    check_shadow_teams(aliases, teams, problems)
    privacy = _privacy(root, version)
    if problems.items:
        return None
    keys = {h: with_env_conflict(k, budgets) for h, k in keys.items()}
    content = {
        "currency": currency,
        "teams": sorted(teams),
        "deployments": sorted(deployments),
        "aliases": sorted(aliases),
        "keys": sorted(keys),
        "admin_tokens": sorted((h, t.role) for h, t in admin_tokens.items()),
        "tree": {k: tree.get(k) for k in CONTROL_SECTIONS if k != "keys"},
        "budgets": sorted((k, repr(v)) for k, v in budgets.scopes.items()),
        "prices": sorted((v.version, v.valid_from.isoformat(), repr(sorted(v.prices.items())))
                         for v in book.versions),
    }
    digest = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()
    return Snapshot(
        version=version,
        content_hash=digest,
        keys=keys,
        aliases=aliases,
        deployments=deployments,
        teams=teams,
        price_book=book,
        fx=fx,
        business_units=frozenset(bus),
        currency=currency,
        budgets=budgets,
        rate_limits=rate_limits,
        admin_tokens=admin_tokens,
        apps=apps,
        privacy=privacy,
        shadow_keys=shadow_keys(aliases, teams),
    )


def _privacy(root: Reader, version: int) -> PrivacyPolicy:
    """The ``privacy`` section over the default policy; each problem is reported with its path."""
    section = root.child("privacy")  # records "expected a mapping" itself
    try:
        return policy_from_mapping(section.data, version)
    except ValueError as exc:
        for line in str(exc).splitlines():
            path, _, message = line.partition(": ")
            root.problems.add(path, message)
        return PrivacyPolicy(version)


def _fx(root: Reader, currency: str) -> FxTable:
    rates = {}
    for r in root.items("fx"):
        src, month, rate = r.str("from"), r.str("month"), r.decimal("rate")
        dst = r.str("to", currency)
        if month and not _is_month(month):
            r.problems.add(r.at("month"), f"must be YYYY-MM, got {month!r}")
            month = None
        if rate is not None and rate <= 0:
            r.problems.add(r.at("rate"), "must be > 0")
        r.reject_unknown()
        if src and dst and month and rate:
            rates[(src, dst, month)] = rate
    try:
        return FxTable(rates)
    except ValueError as exc:
        root.problems.add("fx", str(exc))
        return FxTable({})


def _is_month(value: str) -> bool:
    try:
        datetime.strptime(value, "%Y-%m")
    except ValueError:
        return False
    return True


def _teams(root: Reader, bus: set[str]) -> dict[str, Team]:
    teams: dict[str, Team] = {}
    for r in root.items("teams", required=True):
        name, bu, cc = r.str("name"), r.str("business_unit", None), _cost_centre(r)
        body_log = r.bool("body_log", False)
        if bu is not None and bu not in bus:
            r.problems.add(r.at("business_unit"), f"unknown business unit {bu!r}")
        if name in teams:
            r.problems.add(r.at("name"), f"duplicate team {name!r}")
        r.reject_unknown()
        if name:
            teams[name] = Team(name=name, business_unit=bu, cost_centre=cc, body_log=body_log)
    return teams


def _cost_centre(r: Reader) -> str | None:
    cc = r.str("cost_centre", None)
    if cc is not None and len(cc) > MAX_COST_CENTRE:
        r.problems.add(r.at("cost_centre"), f"must be at most {MAX_COST_CENTRE} characters")
    return cc


def _apps(root: Reader, teams: Mapping[str, Team]) -> dict[str, App]:
    apps: dict[str, App] = {}
    for r in root.items("apps"):
        name, team, cc = r.str("name"), r.str("team"), _cost_centre(r)
        if team and team not in teams:
            r.problems.add(r.at("team"), f"unknown team {team!r}")
        r.reject_unknown()
        if name and team:
            apps[f"{team}/{name}"] = App(team=team, name=name, cost_centre=cc)
    return apps


def _price_book(root: Reader, prices: dict[str, Price]) -> PriceBook:
    r = root.child("prices")
    version = r.int("version", 1, 1)
    raw_from = r.str("valid_from", None)
    valid_from = EPOCH
    if raw_from:
        try:
            valid_from = datetime.fromisoformat(raw_from.replace("Z", "+00:00"))
            if valid_from.tzinfo is None:
                raise ValueError
        except ValueError:
            r.problems.add(r.at("valid_from"), f"must be an ISO-8601 time with a zone, got {raw_from!r}")
            valid_from = EPOCH
    r.reject_unknown()
    return PriceBook().add(PriceVersion(version=version, valid_from=valid_from, prices=dict(prices)))


def _versioned_book(versions: Iterable[Mapping[str, Any]], problems: Problems) -> PriceBook:
    """The config database's price versions, oldest first; each is immutable once published."""
    out = []
    for entry in sorted(versions, key=lambda v: v.get("version", 0)):
        r = Reader(entry, f"prices.v{entry.get('version')}", problems)
        number = r.int("version", None, 1)
        valid_from = _when(r, "valid_from")
        prices: dict[str, Price] = {}
        table = r.child("prices")
        for dep_id in list(table.data):
            price = read_price(table.child(dep_id))
            if price is not None:
                prices[dep_id] = price
        r.reject_unknown()
        if number is not None and valid_from is not None:
            out.append(PriceVersion(version=number, valid_from=valid_from, prices=prices))
    try:
        return PriceBook.of(out)
    except (ValueError, PricingError) as exc:
        problems.add("prices", str(exc))
        return PriceBook()


def _when(r: Reader, name: str) -> datetime | None:
    raw = r.str(name)
    if not raw:
        return None
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        if at.tzinfo is None:
            raise ValueError
    except ValueError:
        r.problems.add(r.at(name), f"must be an ISO-8601 time with a zone, got {raw!r}")
        return None
    return at.astimezone(timezone.utc)


def _aliases(root: Reader, deployments: Mapping[str, Deployment]) -> dict[str, Alias]:
    aliases: dict[str, Alias] = {}
    for r in root.items("aliases", required=True):
        name = r.str("name")
        kind = r.str("kind", "chat", choices=("chat", "embeddings"))
        deps = r.str_list("deployments")
        if not deps:
            r.problems.add(r.at("deployments"), "must list at least one deployment")
        for i, d in enumerate(deps):
            if d not in deployments:
                r.problems.add(f"{r.at('deployments')}[{i}]", f"unknown deployment {d!r}")
        needs = frozenset(r.str_list("needs", [], choices=CAPABILITIES))
        for d in deps:
            dep = deployments.get(d)
            if dep is not None and not needs <= dep.capabilities:
                r.problems.add(r.at("needs"), f"deployment {d!r} lacks {sorted(needs - dep.capabilities)}")
        t, rb, hedge = r.child("timeouts"), r.child("retry_budget"), r.child("hedge")
        exact, semantic = read_alias_cache(r, kind or "chat")
        alias = Alias(
            name=name or "?",
            kind=kind,
            deployments=tuple(deps),
            needs=needs,
            default_max_output_tokens=r.int("max_output_tokens", 1024, 1),
            max_output_tokens_cap=r.int("max_output_tokens_cap", 16384, 1),
            connect_timeout_s=t.number("connect_s", 5.0),
            first_token_timeout_s=t.number("first_token_s", 30.0),
            total_timeout_s=t.number("total_s", 600.0),
            fallback_alias=r.str("fallback_alias", None),
            idle_timeout_s=t.number("idle_s", 20.0),
            heartbeat_s=t.number("heartbeat_s", 15.0),
            capacity_wait_s=t.number("capacity_wait_s", 1.0),
            max_attempts=r.int("max_attempts", 3, 1),
            retry_budget_pct=rb.int("pct", 10, 0),
            retry_budget_min=rb.int("min", 10, 0),
            retry_window_s=rb.number("window_s", 10.0),
            backoff_s=r.number("backoff_s", 0.05),
            sticky=r.bool("sticky", True),
            hedge=hedge.bool("enabled", False),
            hedge_after_s=hedge.number("after_s", None),
            cache=exact,
            semantic=semantic,
            content_filter_failover=r.bool("content_filter_failover", False),
            batch_service_tier=r.str("batch_service_tier", None),
            batch_via=r.str("batch_via", "gateway") or "gateway",
            split=read_split(r) if r.data.get("split") is not None else None,
            shadow=read_shadow(r) if r.data.get("shadow") is not None else None,
        )
        if alias.batch_service_tier is not None and not SERVICE_TIER.match(alias.batch_service_tier):
            r.problems.add(r.at("batch_service_tier"), "must be a service tier's name (lower case: flex, priority)")
        if alias.batch_via not in ("gateway", "provider"):
            r.problems.add(r.at("batch_via"), "must be gateway or provider")
        elif alias.batch_via == "provider" and alias.kind != "chat":
            r.problems.add(r.at("batch_via"), "provider batches run chat requests only; an embeddings alias's "
                                              "batches run through the gateway")
        t.reject_unknown()
        rb.reject_unknown()
        hedge.reject_unknown()
        if name in aliases:
            r.problems.add(r.at("name"), f"duplicate alias {name!r}")
        r.reject_unknown()
        if name:
            aliases[name] = alias
    for alias in aliases.values():
        if alias.fallback_alias and alias.fallback_alias not in aliases:
            root.problems.add(f"aliases.{alias.name}.fallback_alias", f"unknown alias {alias.fallback_alias!r}")
    check_semantic(aliases, root.problems)
    check_splits(aliases, root.problems)
    check_shadows(aliases, root.problems)
    return aliases

