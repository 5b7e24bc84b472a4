"""Reading a deployment entry (YAML or admin API) into a ``Deployment`` and its prices.

Pure: a ``Reader`` over already-parsed data in, values and collected problems out. Prices are keyed by
deployment id; a served tier's prices (``price_per_1m.tiers``) under ``{deployment}@{tier}``
(``pricing.book.tier_key``), so a deployment id may not contain ``@``.
"""

from __future__ import annotations

from dataclasses import replace

from ledger.usage import SERVICE_TIER, STANDARD_TIERS
from pricing.book import TIER_SEP, Price
from proxy.control.policies import per_minute
from proxy.control.problems import Reader
from proxy.snapshot import AUTH_KINDS, CAPABILITIES, DATA_CLASSES, DIALECTS, BreakerPolicy, Deployment, ProviderLimits


def read_deployments(root: Reader, priced_here: bool = True) -> tuple[dict[str, Deployment], dict[str, Price]]:
    deployments: dict[str, Deployment] = {}
    prices: dict[str, Price] = {}
    for r in root.items("deployments", required=True):
        dep_id = r.str("id")
        if dep_id in deployments:
            r.problems.add(r.at("id"), f"duplicate deployment {dep_id!r}")
        caps = r.str_list("capabilities", [], choices=CAPABILITIES)
        classes = r.str_list("data_classes", ["public", "internal"], choices=DATA_CLASSES)
        lim = r.child("limits")
        limits = ProviderLimits(
            rpm=per_minute(lim, "rpm"), input_tpm=per_minute(lim, "input_tpm"), output_tpm=per_minute(lim, "output_tpm"),
            concurrent_sequences=_sequences(lim),
        )
        lim.reject_unknown()
        price = _prices(r.child("price_per_1m", required=True)) if priced_here else {}
        owner = _provisioned(r.child("provisioned"), price, priced_here) if "provisioned" in r.data else None
        dialect = r.str("dialect", choices=DIALECTS) or "openai"
        dep = Deployment(
            id=dep_id or "?",
            dialect=dialect,
            base_url=(r.str("base_url") or "").rstrip("/"),
            provider=r.str("provider") or "?",
            account=r.str("account") or "?",
            project=r.str("project", None),
            region=r.str("region") or "?",
            model=r.str("model") or "?",
            context_window=r.int("context_window", 128_000, 1),
            capabilities=frozenset(caps),
            data_classes=tuple(classes),
            limits=limits,
            weight=r.int("weight", 1, 0),  # 0: a standby, tried only after every weighted deployment
            secret_ref=r.str("api_key_env", None),
            forward_headers=tuple(h.lower() for h in r.str_list("forward_headers", [])),
            tokenizer=r.str("tokenizer", None, choices=("o200k_base", "cl100k_base")),
            self_hosted=r.bool("self_hosted", False),
            breaker=_breaker(r.child("breaker")),
            provisioned_team=owner,
            **_auth(r, dialect),
        )
        if dep.base_url and not dep.base_url.startswith(("http://", "https://")):
            r.problems.add(r.at("base_url"), "must start with http:// or https://")
        r.reject_unknown()
        if dep_id and TIER_SEP in dep_id:
            r.problems.add(r.at("id"), f"must not contain {TIER_SEP!r} (it keys a service tier's price)")
        if dep_id:
            deployments[dep_id] = dep
            prices.update({dep_id + key: p for key, p in price.items()})
    return deployments, prices


def _provisioned(r: Reader, price: dict[str, Price], priced_here: bool) -> str | None:
    """A deployment's ``provisioned: {team, per_hour | per_month}``: the owning team (routing's), with the
    reservation written into its price (the finance side's, versioned like every price). Without prices here
    (price versions from the admin API) only ``team`` is read: the versions carry the reservation."""
    team = r.str("team")
    amounts = {name: r.decimal(name, None) for name in ("per_hour", "per_month")}
    r.reject_unknown()
    if not priced_here and any(v is not None for v in amounts.values()):
        r.problems.add(r.path, "the price versions carry the reservation (reserved_hour or reserved_month, and "
                               "reserved_team): give only team here")
    base = price.get("")
    if priced_here and team is not None and base is not None:
        if base.reserved:
            r.problems.add(r.path, "the reservation is given here; price_per_1m must not carry reserved_* as well")
            return team
        if (amounts["per_hour"] is None) == (amounts["per_month"] is None):
            r.problems.add(r.path, "needs one of per_hour or per_month: the reservation's price, in the "
                                   "deployment's price currency")
            return team
        try:
            price[""] = replace(base, reserved_hour=amounts["per_hour"], reserved_month=amounts["per_month"],
                                reserved_team=team)
        except ValueError as exc:
            r.problems.add(r.path, str(exc))
    return team


def _auth(r: Reader, dialect: str) -> dict:
    """The deployment's auth kind (its dialect's default when absent) and the settings that go with it."""
    kinds = AUTH_KINDS.get(dialect, ("key",))
    out = {"auth": r.str("auth", kinds[0], choices=kinds) or kinds[0],
           "api_version": r.str("api_version", None), "aws_profile": r.str("aws_profile", None)}
    for name, owner in (("api_version", "azure_openai"), ("aws_profile", "bedrock_converse")):
        if out[name] is not None and dialect != owner:
            r.problems.add(r.at(name), f"only {owner} deployments have it")
    return out


def _breaker(r: Reader) -> BreakerPolicy:
    d = BreakerPolicy()
    policy = BreakerPolicy(
        error_pct=r.int("error_pct", d.error_pct, 1),
        min_requests=r.int("min_requests", d.min_requests, 1),
        window_s=r.number("window_s", d.window_s),
        cooldown_s=r.number("cooldown_s", d.cooldown_s),
        max_cooldown_s=r.number("max_cooldown_s", d.max_cooldown_s),
        probes=r.int("probes", d.probes, 1),
        close_after=r.int("close_after", d.close_after, 1),
    )
    if policy.error_pct > 100:
        r.problems.add(r.at("error_pct"), "must be <= 100")
    if policy.max_cooldown_s < policy.cooldown_s:
        r.problems.add(r.at("max_cooldown_s"), "must be >= cooldown_s")
    r.reject_unknown()
    return policy


MAX_SEQUENCES = 100_000  # concurrent sequences of one deployment; well inside what a bucket counts exactly


def _sequences(lim: Reader) -> int | None:
    value = lim.int("concurrent_sequences", None, 1)
    if value is not None and value > MAX_SEQUENCES:
        lim.problems.add(lim.at("concurrent_sequences"), f"must be <= {MAX_SEQUENCES:,}, got {value:,}")
        return None
    return value


def _prices(r: Reader) -> dict[str, Price]:
    """A deployment's ``price_per_1m``: {"": its standard price, "@flex": a tier's, ...} (``tiers:`` holds each
    served tier's prices, in the deployment's currency unless given)."""
    tiers = r.child("tiers")
    out: dict[str, Price] = {}
    for tier in list(tiers.data):
        if not isinstance(tier, str) or not SERVICE_TIER.match(tier) or tier in STANDARD_TIERS:
            tiers.problems.add(tiers.at(str(tier)), "must be a served tier's lower-case name (flex, priority, ...)")
            continue
        child = tiers.child(tier)
        if "currency" not in child.data and isinstance(r.data.get("currency"), str):
            child = Reader({**child.data, "currency": r.data["currency"]}, child.path, child.problems)
        price = read_price(child)
        if price is not None and price.gpu_hour is not None:
            child.problems.add(child.at("gpu_hour"), "a fleet's hourly price is the deployment's, not a tier's")
        elif price is not None:
            out[TIER_SEP + tier] = price
    base = read_price(r)
    return {"": base, **out} if base is not None else {}


def read_price(r: Reader) -> Price | None:
    fields: dict = {n: r.decimal(n, None) for n in (
        "cached_input", "cache_write", "reasoning", "cache_write_1h", "gpu_hour", "reserved_hour", "reserved_month")}
    fields["gpus"] = r.int("gpus", None, 1)
    fields["reserved_team"] = r.str("reserved_team", None)
    inp, out = r.decimal("input"), r.decimal("output")
    ccy = r.str("currency", "USD")
    r.reject_unknown()
    if inp is None or out is None:
        return None
    try:
        return Price(input=inp, output=out, currency=ccy, **fields)
    except ValueError as exc:
        r.problems.add(r.path, str(exc))
        return None


