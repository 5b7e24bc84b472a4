"""A month's usage charge lines from the archive: DuckDB over the Parquet files, priced per token type.

Which events: ``request.attempted`` (each attempt is billed by its provider)
whose ``event_time`` is in the half-open UTC window [month start, next month
start), each event id once (the first by log partition and offset). The
attempt's team/app/key/alias/business unit, cost centre and tags come from its
request's ``request.admitted`` (read from the day before the month too, so a
request admitted just before midnight keeps its dimensions).

An attempt that lost a hedge race (``error_code`` ``hedge_lost``: cut when another deployment answered
first; its estimated input is metered) is a line of its own, described as a hedge's lost leg.

The one-hour cache writes (``usage.cache_write_1h``, read from the event where it names them) are a line type
of their own at their own price; the ``cache_write`` line keeps the other writes. An attempt served at a tier
is priced at its tier's entry of the price version (``x_service_tier``).

How an attempt's cost becomes per-token-type amounts (exact, never a split in
proportion): the attempt's exact cost of each token type is its own tokens x
its own unit price (price version of the event, deployment of the event, FX of
the month, in the billing currency). Prices per 1M tokens in currency units are
micro-units per token, so each exact amount is ``tokens x n / 10^S`` for an
integer ``n`` and one scale ``S`` for the month: integer arithmetic in DuckDB.
The ledger charged the attempt ``cost_micro``, the exact total rounded up once
(``pricing.rating``); the export checks that it is exactly that ceiling
(otherwise the book is not the one the attempt was priced with: an error naming
the attempt) and hands it out to the token types: each gets the floor of its
exact amount, and the micro-units the ledger rounded up (at most one per token
type with a fraction) go one each to the types with the largest fractions (ties:
``FOCUS_TYPES`` order). So every type's amount is within one micro-unit of its
own exact cost, a type with no tokens gets nothing, and an attempt's amounts add
up to its ledger cost exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal, localcontext
from pathlib import Path

import duckdb
import pyarrow as pa

from ledger.usage import TOKEN_TYPES
from pricing.book import FxTable, PriceBook
from pricing.errors import PricingError
from reconcile.focus.columns import EXACT, FOCUS_TYPES, ChargeLine, FocusError
from reconcile.rerate.sql import TIER

_N = len(FOCUS_TYPES)
_MAX_SCALE = 24  # tokens x n stays far inside HUGEINT (10^38) at this scale


@dataclass(frozen=True, slots=True)
class UnitPrice:
    """One deployment's price of one token type at one version: per 1M tokens, billing and book currency."""

    billing: Decimal
    book: Decimal
    book_currency: str


@dataclass(frozen=True, slots=True)
class Usage:
    """The month's usage lines and the ledger figures they reconcile with."""

    lines: list[ChargeLine]
    currency: str | None
    attempts: int  # attempt events in the window, each once
    ledger_micro: int  # what the ledger charged for them: the sum of their cost_micro
    exact_micro: Decimal  # the same attempts priced exactly, before the ledger's per-attempt rounding up


def unit_prices(book: PriceBook, fx: FxTable, pairs: Sequence[tuple[int, str]], currency: str,
                at: datetime) -> dict[tuple[int, str, str], UnitPrice]:
    """(version, deployment, token type) -> unit price, for every pair; a clear FocusError naming what is missing."""
    out: dict[tuple[int, str, str], UnitPrice] = {}
    for version, deployment in pairs:
        try:
            price = book.get(version).price(deployment)
            rate = fx.rate(price.currency, currency, at)
        except PricingError as exc:
            raise FocusError(f"cannot price deployment {deployment!r} at price version {version}: {exc}") from None
        for kind in FOCUS_TYPES:
            per_million = price.per_million(kind)
            with localcontext(EXACT):
                out[(version, deployment, kind)] = UnitPrice(per_million * rate, per_million, price.currency)
    return out


def _shift(value: Decimal | int | str, places: int) -> Decimal:
    """``value`` x 10^places, exactly (``Decimal.scaleb`` rounds to the context's precision)."""
    with localcontext(EXACT):
        return Decimal(value).scaleb(places)


def _scale(prices: Mapping[tuple[int, str, str], UnitPrice]) -> int:
    scale = max((max(0, -p.billing.as_tuple().exponent) for p in prices.values()), default=0)
    if scale > _MAX_SCALE:
        raise FocusError(f"unit prices need {scale} decimal places; at most {_MAX_SCALE} are supported")
    return scale


_ATTEMPT_COLUMNS = ("id", "request_id", "event_time", "team", "deployment", "provider", "account", "model", "region",
                    *(f"{kind}_tokens" for kind in TOKEN_TYPES), "cost_micro", "currency", "price_version",
                    "cost_centre", "tags", "service_tier", "cache_write_1h_tokens", "project", "error_code")
# The served tier, read from the event only where it names one (most events do not: no JSON parse for them).
_TIER = f"CASE WHEN type = 'request.attempted' THEN {TIER} END AS service_tier"
_ADMITTED_COLUMNS = ("request_id", "app", "business_unit", "key_id", "alias", "cost_centre", "tags")
_ONE_HOUR = ("CASE WHEN type = 'request.attempted' AND contains(event, '\"cache_write_1h\"') "
             "THEN TRY_CAST(json_extract(event, '$.usage.cache_write_1h') AS BIGINT) END AS cache_write_1h_tokens")
# The sub-account, read from the event only where it names one (``"project":null`` otherwise).
_PROJECT = ("CASE WHEN type = 'request.attempted' AND contains(event, '\"project\":\"') "
            "THEN json_extract_string(event, '$.project') END AS project")
_DERIVED = {"service_tier": _TIER, "cache_write_1h_tokens": _ONE_HOUR, "project": _PROJECT}
_COLUMNS = ("type", *(_DERIVED.get(c, c) for c in _ATTEMPT_COLUMNS),
            *(c for c in _ADMITTED_COLUMNS if c not in _ATTEMPT_COLUMNS))


def _events_sql(files: Sequence[Path], since: datetime, end: datetime) -> str:
    """Admitted and attempted events of [since, end) in ``files``, each id once (the first by partition, offset):
    one scan of the files for both."""
    paths = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in files) + "]"
    return (f"SELECT {', '.join(_COLUMNS)} FROM read_parquet({paths}, hive_partitioning = false) "
            f"WHERE type IN ('request.attempted', 'request.admitted') "
            f"AND event_time >= '{since.isoformat()}'::TIMESTAMPTZ AND event_time < '{end.isoformat()}'::TIMESTAMPTZ "
            f"QUALIFY row_number() OVER (PARTITION BY id ORDER BY log_partition, log_offset) = 1")


def _allocation_sql(scale: int) -> str:
    """Per attempt: exact numerators x_i (units of 10^-S micro), floors f_i, fractions r_i, the ledger's
    extra micro-units, and each type's amount m_i (floor + 1 for the largest fractions)."""
    d = f"CAST(1{'0' * scale} AS HUGEINT)"
    cols = [f"{kind}_tokens" for kind in FOCUS_TYPES]
    xs = ", ".join(f"CAST(coalesce(a.{c}, 0) AS HUGEINT) * coalesce(p.n{i}, 0) AS x{i}" for i, c in enumerate(cols))
    parts = ", ".join(f"x{i} // {d} AS f{i}, x{i} % {d} AS r{i}" for i in range(_N))
    ranks = []
    for i in range(_N):
        ahead = [f"(r{j} > r{i} OR (r{j} = r{i} AND {j} < {i}))::INT" for j in range(_N) if j != i]
        ranks.append(f"f{i} + (1 + {' + '.join(ahead)} <= extra)::INT AS m{i}")
    return f"""
        CREATE TEMP TABLE alloc AS
        WITH x AS (
            SELECT a.*, {xs} FROM att a LEFT JOIN prices p ON p.price_version = a.price_version
                AND p.deployment = a.price_key
        ), f AS (
            SELECT *, {parts}, {' + '.join(f'x{i}' for i in range(_N))} AS total FROM x
        ), e AS (
            SELECT *, CAST(cost_micro AS HUGEINT) - ({' + '.join(f'f{i}' for i in range(_N))}) AS extra,
                   CAST(cost_micro AS HUGEINT) * {d} >= total AND CAST(cost_micro AS HUGEINT) * {d} < total + {d}
                       AS is_ceiling
            FROM f
        )
        SELECT *, {', '.join(ranks)} FROM e"""


def _lines_sql() -> str:
    arms = " UNION ALL ".join(
        f"SELECT *, '{kind}' AS token_type, {kind}_tokens AS tokens, m{i} AS billed FROM alloc "
        f"WHERE {kind}_tokens > 0" for i, kind in enumerate(FOCUS_TYPES))
    dims = ("day, deployment, provider, account, model, region, token_type, price_version, a.team, "
            "d.app, d.business_unit, d.key_id, d.alias, coalesce(a.cost_centre, d.cost_centre), "
            "to_json(coalesce(a.tags, d.tags))::VARCHAR, price_key, service_tier, project, "
            "coalesce(error_code = 'hedge_lost', false)")
    return f"""
        SELECT {dims}, sum(tokens)::BIGINT, sum(billed)::BIGINT, count(DISTINCT a.request_id), count(*)
        FROM (SELECT *, CAST(event_time AS DATE) AS day FROM ({arms})) a
        LEFT JOIN adm d ON d.request_id = a.request_id
        GROUP BY ALL"""


def tag_pairs(text: str | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(json.loads(text).items())) if text and text != "null" else ()


def read_usage(files: Sequence[Path], start: datetime, end: datetime, book: PriceBook, fx: FxTable,
               currency: str | None = None) -> Usage:
    """The charge lines of the attempts in [start, end) in ``files`` (which also hold the day before ``start``,
    for admissions); ``currency`` (if given) must be the events' currency."""
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        if not files:
            return Usage([], currency, 0, 0, Decimal(0))
        con.execute(f"CREATE TEMP TABLE ev AS {_events_sql(files, start - timedelta(days=1), end)}")
        con.execute(f"CREATE TEMP TABLE att AS SELECT {', '.join(_ATTEMPT_COLUMNS)} FROM ev "
                    f"WHERE type = 'request.attempted' AND event_time >= '{start.isoformat()}'::TIMESTAMPTZ")
        seen = [c for (c,) in con.execute("SELECT DISTINCT currency FROM att WHERE currency IS NOT NULL "
                                          "ORDER BY 1").fetchall()]
        if len(seen) > 1 or (currency is not None and seen and seen != [currency]):
            raise FocusError(f"the attempts of the month are in {', '.join(seen)}; the billing currency is "
                             f"{currency or 'one currency'}: an export has one billing currency")
        billing = seen[0] if seen else currency
        tokens = " + ".join(f"coalesce({kind}_tokens, 0)" for kind in TOKEN_TYPES)
        # the one-hour writes are a line of their own: the cache_write line keeps the other writes
        con.execute("UPDATE att SET cache_write_tokens = cache_write_tokens - cache_write_1h_tokens "
                    "WHERE cache_write_1h_tokens > 0")
        _price_keys(con, book)
        pairs = con.execute(f"SELECT DISTINCT price_version, price_key FROM att WHERE {tokens} > 0 "
                            "ORDER BY 1, 2").fetchall()
        prices = unit_prices(book, fx, pairs, billing or "", start) if pairs else {}
        scale = _scale(prices)
        con.register("prices_in", pa.table({
            "price_version": [v for v, _ in pairs], "deployment": [d for _, d in pairs],
            **{f"n{i}": [str(int(_shift(prices[(v, d, kind)].billing, scale))) for v, d in pairs]
               for i, kind in enumerate(FOCUS_TYPES)}}))
        ns = ", ".join(f"CAST(n{i} AS HUGEINT) AS n{i}" for i in range(_N))
        con.execute(f"CREATE TEMP TABLE prices AS SELECT price_version, deployment, {ns} FROM prices_in")
        con.execute(f"CREATE TEMP TABLE adm AS SELECT {', '.join(_ADMITTED_COLUMNS)} FROM ev "
                    "WHERE type = 'request.admitted'")  # one per request: its id is request_id/admitted
        con.execute("DROP TABLE ev")
        con.execute(_allocation_sql(scale))
        _check_ledger(con, scale)
        count, ledger, total = con.execute("SELECT count(*), coalesce(sum(cost_micro), 0)::BIGINT, "
                                           "coalesce(sum(total), 0)::VARCHAR FROM alloc").fetchone()
        lines = [_line(row, prices, start.date()) for row in con.execute(_lines_sql()).fetchall()]
        return Usage(lines, billing, count, ledger, _shift(total, -scale))
    finally:
        con.close()


def _price_keys(con: duckdb.DuckDBPyConnection, book: PriceBook) -> None:
    """``att.price_key``: the price-book entry each attempt was priced at (its tier's, ``{deployment}@{tier}``,
    where its version has one, else the deployment's), as ``PriceVersion.served`` chose it."""
    tiered = con.execute("SELECT DISTINCT price_version, deployment, service_tier FROM att "
                         "WHERE service_tier IS NOT NULL").fetchall()
    keys = {}
    for version, deployment, tier in tiered:
        try:
            keys[(version, deployment, tier)] = book.get(version).served_key(deployment, tier)
        except PricingError:
            keys[(version, deployment, tier)] = deployment  # unpriced: unit_prices names the missing version
    con.register("tier_keys", pa.table({"price_version": [k[0] for k in keys], "deployment": [k[1] for k in keys],
                                        "service_tier": [k[2] for k in keys], "price_key": list(keys.values())},
                                       schema=pa.schema([("price_version", pa.int64()), ("deployment", pa.string()),
                                                         ("service_tier", pa.string()), ("price_key", pa.string())])))
    con.execute("CREATE TEMP TABLE att2 AS SELECT a.*, coalesce(k.price_key, a.deployment) AS price_key FROM att a "
                "LEFT JOIN tier_keys k ON k.price_version = a.price_version AND k.deployment = a.deployment "
                "AND k.service_tier = a.service_tier")
    con.execute("DROP TABLE att")
    con.execute("ALTER TABLE att2 RENAME TO att")


def _check_ledger(con: duckdb.DuckDBPyConnection, scale: int) -> None:
    """Every attempt's cost_micro must be the ceiling of its exact cost under the book given."""
    (count,) = con.execute("SELECT count(*) FROM alloc WHERE NOT is_ceiling").fetchone()
    if count:
        bad = con.execute("SELECT id, price_version, deployment, cost_micro, total::VARCHAR FROM alloc "
                          "WHERE NOT is_ceiling ORDER BY id LIMIT 5").fetchall()
        shown = "; ".join(f"{i} (deployment {d}, price version {v}): the ledger charged {c} micro-units, the "
                          f"book prices it at {_shift(t, -scale)}" for i, v, d, c, t in bad)
        raise FocusError(f"{count} attempt(s) were charged an amount the price book does not give, so the book "
                         f"is not the one they were priced with: {shown}")


def _line(row: tuple, prices: Mapping[tuple[int, str, str], UnitPrice], billing_month: date) -> ChargeLine:
    (day, deployment, provider, account, model, region, kind, version, team, app, bu, key_id, alias, centre,
     tags, key, tier, project, hedge_lost, tokens, billed, requests, attempts) = row
    price = prices[(version, key, kind)]
    return ChargeLine(
        charge_day=day, billing_month=billing_month, deployment=deployment, provider=provider, account=account,
        model=model, region=region, token_type=kind, price_version=version, team=team, app=app, business_unit=bu,
        key_id=key_id, alias=alias, cost_centre=centre, tags=tag_pairs(tags), tokens=tokens, billed_micro=billed,
        requests=requests, attempts=attempts, unit_price=price.billing, pricing_currency=price.book_currency,
        pricing_unit_price=price.book, service_tier=tier, project=project, hedge_lost=hedge_lost)
