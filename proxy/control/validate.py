"""Validation before publish, beyond what the compiler checks field by field.

Run on a compiled candidate snapshot; every problem is collected:
every deployment has a price in force (now and in the latest version) and an
FX rate into the budget currency, alias fallbacks are coherent, every key can
actually be served at its default data class and within its region and
deployment pins (each of its aliases keeps a deployment), confidential and restricted
traffic never fails over across regions, and a price change beyond the
configured factor needs an explicit flag.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pricing.book import Price, PriceVersion
from pricing.errors import PricingError
from proxy.control.problems import Problems
from proxy.snapshot import DATA_CLASSES, Snapshot

PRICE_FIELDS = ("input", "output", "cached_input", "cache_write", "reasoning", "cache_write_1h", "gpu_hour",
                "reserved_hour", "reserved_month")
_RANK = {c: i for i, c in enumerate(DATA_CLASSES)}


def check_snapshot(snap: Snapshot, now: datetime, problems: Problems) -> None:
    _prices_in_force(snap, now, problems)
    _aliases(snap, problems)
    _keys_servable(snap, problems)


def _prices_in_force(snap: Snapshot, now: datetime, problems: Problems) -> None:
    if not snap.price_book.versions:
        problems.add("prices", "no price version is published")
        return
    try:
        current = snap.price_book.in_force(now)
    except PricingError as exc:
        problems.add("prices", str(exc))
        return
    latest = snap.price_book.latest
    for dep_id in snap.deployments:
        for version in {current.version: current, latest.version: latest}.values():
            if dep_id not in version.prices:
                problems.add(f"deployments.{dep_id}", f"has no price in price version {version.version}")
        if dep_id in current.prices:
            try:
                snap.fx.rate(current.prices[dep_id].currency, snap.currency, now)
            except PricingError as exc:
                problems.add(f"deployments.{dep_id}", f"cannot be priced now: {exc}")
            _reservation(snap, dep_id, current.prices[dep_id], current.version, problems)


def _reservation(snap: Snapshot, dep_id: str, price: Price, version: int, problems: Problems) -> None:
    """A provisioned deployment's owner (routing's) and its price's reservation (finance's) name one team."""
    owner = snap.deployments[dep_id].provisioned_team
    if owner is not None and price.reserved_team != owner:
        problems.add(f"deployments.{dep_id}.provisioned",
                     f"is for team {owner!r} but price version {version} "
                     + (f"charges its reservation to {price.reserved_team!r}" if price.reserved
                        else "has no reservation for it (reserved_hour or reserved_month, and reserved_team)"))
    elif owner is None and price.reserved:
        problems.add(f"deployments.{dep_id}", f"price version {version} charges a reservation to team "
                                              f"{price.reserved_team!r}, but the deployment is not provisioned")


def _aliases(snap: Snapshot, problems: Problems) -> None:
    for alias in snap.aliases.values():
        seen, cur = {alias.name}, alias
        while cur.fallback_alias and cur.fallback_alias in snap.aliases:
            nxt = snap.aliases[cur.fallback_alias]
            if nxt.kind != alias.kind:
                problems.add(f"aliases.{cur.name}.fallback_alias", f"{nxt.name!r} is a {nxt.kind} alias, not {alias.kind}")
                break
            if nxt.name in seen:
                problems.add(f"aliases.{alias.name}.fallback_alias", f"fallback chain loops back to {nxt.name!r}")
                break
            seen.add(nxt.name)
            cur = nxt
        deps = [snap.deployments[d] for d in alias.deployments if d in snap.deployments]
        for cls in ("confidential", "restricted"):
            regions = {d.region for d in deps if cls in d.data_classes}
            if len(regions) > 1:
                problems.add(f"aliases.{alias.name}",
                             f"{cls} traffic could fail over across regions {sorted(regions)}; keep it in one region")


def _keys_servable(snap: Snapshot, problems: Problems) -> None:
    for key in snap.keys.values():
        if key.revoked:
            continue
        if _RANK[key.default_data_class] > _RANK[key.data_class_ceiling]:
            problems.add(f"keys.{key.key_id}", f"default data class {key.default_data_class!r} is above its ceiling "
                                                f"{key.data_class_ceiling!r}")
        for name in sorted(key.aliases):
            alias = snap.aliases.get(name)
            if alias is None:
                continue
            if not any(key.default_data_class in snap.deployments[d].data_classes
                       for d in alias.deployments if d in snap.deployments):
                problems.add(f"keys.{key.key_id}", f"alias {name!r} has no deployment accepting its default data class "
                                                   f"{key.default_data_class!r}")
            if key.regions or key.deployments:
                usable = [d for d in alias.deployments if d in snap.deployments
                          and (not key.regions or snap.deployments[d].region in key.regions)
                          and (not key.deployments or d in key.deployments)]
                if not usable:
                    pins = ([f"region(s) {sorted(key.regions)}"] if key.regions else []) + \
                           ([f"deployment(s) {sorted(key.deployments)}"] if key.deployments else [])
                    problems.add(f"keys.{key.key_id}", f"alias {name!r} has no deployment within its "
                                                       f"{' and '.join(pins)}")


def check_price_change(before: PriceVersion | None, after: PriceVersion, factor: Decimal, problems: Problems) -> None:
    """A price moving by more than ``factor`` (either way) is refused unless the caller confirms it."""
    if before is None:
        return
    for dep_id, new in sorted(after.prices.items()):
        old = before.prices.get(dep_id)
        if old is None:
            continue
        for name in PRICE_FIELDS:
            a, b = getattr(old, name), getattr(new, name)
            if a is None or b is None or a == b:
                continue
            if old.currency != new.currency or a == 0 or b == 0 or b / a > factor or a / b > factor:
                problems.add(f"prices.v{after.version}.{dep_id}.{name}",
                             f"changes from {a} {old.currency} to {b} {new.currency} (more than x{factor}); "
                             "confirm with allow_large_change")
