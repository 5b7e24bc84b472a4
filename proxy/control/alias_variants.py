"""An alias's ``split`` (sticky variants, ``proxy.routing.split``) and ``shadow`` (a share of its requests sent
again, in the background, to a candidate alias), read from the config and checked against the other aliases.

A shadow leg runs as a key of the platform's own: ``shadow_keys`` makes one per shadowed alias
(``shadow.<alias>``, never a secret: only the gateway's own batch-runner path can present it), of the team the
shadow names, allowed only the candidate alias, so its cost lands on that team's budget scopes and never on the
calling team's.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Mapping

from proxy.control.problems import Problems, Reader
from proxy.snapshot import DATA_CLASSES, Alias, KeyRecord, Shadow, Split, Team, Variant

SPLIT_KEYS = ("user", "session", "key")
SHADOW_KEY_PREFIX = "shadow."


def read_split(r: Reader) -> Split:
    sp = r.child("split")
    key = sp.str("key", "user", choices=SPLIT_KEYS)
    variants = []
    for v in sp.items("variants", required=True):
        variants.append(Variant(v.str("name") or "?", v.str("alias") or "?", v.int("weight", None, 0) or 0))
        v.reject_unknown()
    sp.reject_unknown()
    return Split(key or "user", tuple(variants))


def read_shadow(r: Reader) -> Shadow:
    sh = r.child("shadow")
    raw = str(sh.data.get("pct", "")) if isinstance(sh.data, dict) else ""
    try:
        pct = Decimal(raw)
    except InvalidOperation:
        pct = Decimal(-1)
    if not Decimal(0) < pct <= Decimal(100):
        sh.problems.add(sh.at("pct"), "must be a percentage above 0 and at most 100")
    sh.skip("pct")
    shadow = Shadow(sh.str("alias") or "?", pct, sh.str("team") or "?", sh.str("app", "shadow") or "shadow")
    sh.reject_unknown()
    return shadow


def check_splits(aliases: Mapping[str, Alias], problems: Problems) -> None:
    """Every split names at least two variants with unique names, each an existing alias of the same kind that
    has no split of its own, with weights that add up to more than 0."""
    for alias in aliases.values():
        split = alias.split
        if split is None:
            continue
        at = f"aliases.{alias.name}.split"
        if len(split.variants) < 2:
            problems.add(at, "needs at least two variants")
        if len({v.name for v in split.variants}) != len(split.variants):
            problems.add(at, "has two variants of the same name")
        if sum(v.weight for v in split.variants) <= 0:
            problems.add(at, "weights must add up to more than 0")
        for v in split.variants:
            target = aliases.get(v.alias)
            if target is None:
                problems.add(f"{at}.{v.name}", f"unknown alias {v.alias!r}")
            elif target.kind != alias.kind:
                problems.add(f"{at}.{v.name}", f"alias {v.alias!r} is a {target.kind} alias, not {alias.kind}")
            elif target.split is not None:
                problems.add(f"{at}.{v.name}", f"alias {v.alias!r} has a split of its own (splits do not nest)")


def check_shadows(aliases: Mapping[str, Alias], problems: Problems) -> None:
    """A shadow's candidate is another existing chat alias without a shadow of its own (chat aliases only)."""
    for alias in aliases.values():
        shadow = alias.shadow
        if shadow is None:
            continue
        at = f"aliases.{alias.name}.shadow"
        target = aliases.get(shadow.alias)
        if alias.kind != "chat":
            problems.add(at, "only a chat alias can be shadowed")
        if target is None:
            problems.add(f"{at}.alias", f"unknown alias {shadow.alias!r}")
        elif target.name == alias.name or target.kind != "chat" or target.shadow is not None:
            problems.add(f"{at}.alias", f"alias {shadow.alias!r} must be another chat alias without a shadow")


def check_shadow_teams(aliases: Mapping[str, Alias], teams: Mapping[str, Team], problems: Problems) -> None:
    """A shadow is paid by a team the config knows."""
    for alias in aliases.values():
        if alias.shadow is not None and alias.shadow.team not in teams:
            problems.add(f"aliases.{alias.name}.shadow.team", f"unknown team {alias.shadow.team!r}")


def shadow_keys(aliases: Mapping[str, Alias], teams: Mapping[str, Team]) -> dict[str, KeyRecord]:
    """The platform's key of each shadowed alias, by key id (``SHADOW_KEY_PREFIX`` + the alias's name)."""
    out: dict[str, KeyRecord] = {}
    for alias in aliases.values():
        shadow = alias.shadow
        if shadow is None:
            continue
        team = teams.get(shadow.team)
        key_id = SHADOW_KEY_PREFIX + alias.name
        out[key_id] = KeyRecord(key_id=key_id, key_hash="", team=shadow.team, app=shadow.app,
                                business_unit=team.business_unit if team else None,
                                aliases=frozenset({shadow.alias}), data_class_ceiling=DATA_CLASSES[-1],
                                env="prod")
    return out
