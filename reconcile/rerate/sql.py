"""Re-rating in DuckDB, for a month of archive at once: ``pricing.rate`` as exact integer SQL.

``pricing.rating.rate`` charges ``ceil(sum_k tokens_k x price_k x fx)``
micro-units, where ``price_k`` is the price per 1M tokens (fallbacks
resolved by ``Price.per_million``) and ``fx`` the month's rate, in exact
Decimal. Here every price of the version is scaled to an integer ``P_k =
price_k x 10^s`` and every FX rate to ``F = fx x 10^t`` (``s``, ``t``: the most
decimal places any of them has, so both scalings are exact), and SQL computes
``ceil(sum_k tokens_k x P_k x F / 10^(s+t))`` in HUGEINT (128-bit) integers:
the same number to the micro-unit, with one rounding, up. ``price_tables``
refuses a book whose scaled figures could overflow 128 bits.

``rerate_lines`` is the report of ``reconcile.rerate.reprice.rerate`` (per team x
deployment x UTC day of attempts: requests, attempts, old and new cost) for
the requests admitted on [start, end], straight over the warehouse views,
with the same rules: only requests whose settlement the ledger charged, with
attempts at one price version adding up to it, are re-rated; an attempt with
no tokens costs 0; an attempt whose deployment has no price, or whose FX rate
is missing, fails the whole query (nothing half-rated). A request that already
has ``rating.corrected`` events is left to the exact chain of ``farebox
rerate`` and counted as such.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

import duckdb
import pyarrow as pa

from ledger.usage import TOKEN_TYPES
from pricing.book import PRICED_TYPES, TIER_SEP, FxTable, PriceVersion
from reconcile.rerate.reprice import DiffLine, RerateError
from reconcile.warehouse import Warehouse, WarehouseError

PRICED = tuple(k for k in PRICED_TYPES if k in TOKEN_TYPES) + ("cache_write_1h",)  # the price columns
_MAX_SCALED = 10**24  # x tokens (< 10^12) stays below HUGEINT's 1.7 x 10^38 with room for the sum


def _places(values: Iterable[Decimal]) -> int:
    return max((max(0, -v.as_tuple().exponent) for v in values if v.is_finite()), default=0)  # type: ignore[operator]


def _scaled(value: Decimal, places: int) -> int:
    scaled = value.scaleb(places)
    if scaled != scaled.to_integral_value() or abs(scaled) >= _MAX_SCALED:
        raise RerateError(f"the price or FX figure {value} is too precise or too large to rate in SQL",
                          "price_version")
    return int(scaled)


@dataclass(frozen=True, slots=True)
class PriceTables:
    """A version's prices and the FX table as scaled integers: what the SQL joins against."""

    prices: pa.Table  # deployment, currency, p_input, p_cached_input, p_cache_write, p_output, p_reasoning
    fx: pa.Table  # from_ccy, to_ccy, month (YYYY-MM), f
    price_places: int  # s
    fx_places: int  # t

    @property
    def one_fx(self) -> int:
        return 10**self.fx_places

    @property
    def denominator(self) -> int:
        return 10 ** (self.price_places + self.fx_places)


def price_tables(version: PriceVersion, fx: FxTable) -> PriceTables:
    """Scale ``version``'s prices (per 1M tokens, fallbacks resolved) and every FX rate to exact integers."""
    per = {dep: {k: p.per_million(k) for k in PRICED} for dep, p in version.prices.items()}
    s = _places(v for row in per.values() for v in row.values())
    rates = dict(fx.rates)
    t = _places(rates.values())
    prices = {"deployment": list(per), "currency": [version.prices[d].currency for d in per]}
    for k in PRICED:
        prices[f"p_{k}"] = [str(_scaled(per[d][k], s)) for d in per]
    fx_cols = {"from_ccy": [k[0] for k in rates], "to_ccy": [k[1] for k in rates], "month": [k[2] for k in rates],
               "f": [str(_scaled(v, t)) for v in rates.values()]}
    return PriceTables(pa.table(prices), pa.table(fx_cols), s, t)


def new_cost_sql(tables: PriceTables, a: str = "a", p: str = "p", f: str = "f", currency: str = "currency",
                 one_hour: bool = True) -> str:
    """The SQL expression of ``pricing.rate`` for attempt ``a`` joined to price ``p`` and FX ``f`` (see above);
    ``one_hour``: ``a`` has ``cache_write_1h_tokens`` (the one-hour part of its cache writes, priced at
    ``p_cache_write_1h`` instead of ``p_cache_write``)."""
    tokens = " + ".join(f"coalesce({a}.{k}_tokens, 0)::HUGEINT * {p}.p_{k}::HUGEINT" for k in TOKEN_TYPES)
    if one_hour:
        tokens += (f" + coalesce({a}.cache_write_1h_tokens, 0)::HUGEINT * ({p}.p_cache_write_1h::HUGEINT"
                   f" - {p}.p_cache_write::HUGEINT)")
    any_tokens = " OR ".join(f"coalesce({a}.{k}_tokens, 0) <> 0" for k in TOKEN_TYPES)
    den = tables.denominator
    fx = f"CASE WHEN {p}.currency = {currency} THEN {tables.one_fx}::HUGEINT ELSE {f}.f::HUGEINT END"
    return (f"CASE WHEN NOT ({any_tokens}) THEN 0::BIGINT "
            f"WHEN {p}.deployment IS NULL THEN error('cannot price attempt ' || {a}.id || ': deployment ' "
            f"|| {a}.deployment || ' has no price in this version') "
            f"WHEN {p}.currency <> {currency} AND {f}.f IS NULL THEN error('no FX rate ' || {p}.currency || '->' "
            f"|| {currency} || ' for ' || strftime(timezone('UTC', {a}.event_time), '%Y-%m')) "
            f"ELSE ((({tokens}) * {fx} + ({den}::HUGEINT - 1)) // {den}::HUGEINT)::BIGINT END")


TIER = ("CASE WHEN contains(event, '\"service_tier\"') THEN json_extract_string(event, '$.usage.service_tier') END")


def price_join(e: str, currency: str) -> str:
    """The joins ``new_cost_sql`` reads: attempt ``e``'s price ``p`` (``rr_prices``: its served tier's,
    ``{deployment}@{tier}``, when the version has one, else the deployment's, as ``PriceVersion.served``) and
    FX ``f`` (``rr_fx``)."""
    return (f"LEFT JOIN rr_prices AS pt ON {e}.service_tier IS NOT NULL "
            f"AND pt.deployment = {e}.deployment || '{TIER_SEP}' || {e}.service_tier "
            f"LEFT JOIN rr_prices AS p ON p.deployment = coalesce(pt.deployment, {e}.deployment) "
            f"LEFT JOIN rr_fx AS f ON f.from_ccy = p.currency AND f.to_ccy = {currency} "
            f"AND f.month = strftime(timezone('UTC', {e}.event_time), '%Y-%m')")


def rate_attempts(con: duckdb.DuckDBPyConnection, attempts: pa.Table, version: PriceVersion, fx: FxTable,
                  currency: str) -> list[int]:
    """``new_cost_sql`` over a table of attempts (id, deployment, event_time, <type>_tokens), in its order."""
    tables = price_tables(version, fx)
    con.register("rr_prices", tables.prices)
    con.register("rr_fx", tables.fx)
    con.register("rr_attempts", attempts)
    one_hour = "cache_write_1h_tokens" in attempts.column_names
    source = ("rr_attempts" if "service_tier" in attempts.column_names
              else "(SELECT *, NULL::VARCHAR AS service_tier FROM rr_attempts)")  # served tiers, when given
    sql = (f"SELECT {new_cost_sql(tables, 'e', currency='$currency', one_hour=one_hour)} FROM {source} AS e "
           f"{price_join('e', '$currency')} ORDER BY e.id")
    return [row[0] for row in con.execute(sql, {"currency": currency}).fetchall()]


def _rerate_sql(tables: PriceTables) -> str:
    # One lean scan per event kind over the columns it needs (never the wide ``requests`` view): an event id
    # counts once (attempts grouped by request and number; admissions by request), and a request's close is its
    # first settlement or expiry in log order, as ``reconcile.rerate.archive.load_requests`` reads them.
    tokens = ", ".join(f"any_value({k}_tokens) AS {k}_tokens" for k in TOKEN_TYPES)
    return f"""
WITH q AS MATERIALIZED (
    SELECT request_id, any_value(team) AS team, any_value(currency) AS currency FROM archive_rows
    WHERE type = 'request.admitted' AND CAST(timezone('UTC', event_time) AS DATE) BETWEEN $start AND $end
    GROUP BY request_id
), cls AS MATERIALIZED (
    SELECT request_id, arg_min(type, pos) AS close_type, arg_min(cost_micro, pos) AS settled_cost
    FROM archive_rows WHERE type IN ('request.settled', 'hold.expired') AND request_id IN (SELECT request_id FROM q)
    GROUP BY request_id
), fixed AS MATERIALIZED (
    SELECT DISTINCT request_id FROM archive_rows WHERE type = 'rating.corrected'
), e AS MATERIALIZED (
    SELECT request_id, attempt, any_value(id) AS id, any_value(deployment) AS deployment,
           any_value(event_time) AS event_time, {tokens}, any_value(cost_micro) AS cost_micro,
           any_value(coalesce(TRY_CAST(json_extract(event, '$.usage.cache_write_1h') AS BIGINT), 0))
               AS cache_write_1h_tokens, any_value({TIER}) AS service_tier,
           any_value(price_version) AS price_version
    FROM archive_rows WHERE type = 'request.attempted' AND request_id IN (SELECT request_id FROM q)
    GROUP BY request_id, attempt
), a AS MATERIALIZED (
    SELECT e.request_id, e.attempt, e.deployment, CAST(timezone('UTC', e.event_time) AS DATE) AS day, q.team,
           q.currency, e.price_version, e.cost_micro AS old_micro, {new_cost_sql(tables, "e", currency="q.currency")}
           AS new_micro
    FROM e JOIN q ON q.request_id = e.request_id
    {price_join("e", "q.currency")}
), r AS MATERIALIZED (
    SELECT q.request_id, CASE
        WHEN fixed.request_id IS NOT NULL THEN 'corrected'
        WHEN cls.close_type IS DISTINCT FROM 'request.settled' THEN 'not_settled'
        WHEN count(a.attempt) = 0 THEN 'no_attempts'
        WHEN count(DISTINCT a.price_version) > 1 THEN 'mixed_versions'
        WHEN sum(a.old_micro) <> cls.settled_cost THEN 'inconsistent'
        ELSE 'ok' END AS verdict,
        coalesce(bool_or(a.new_micro <> a.old_micro), false) AS changes
    FROM q LEFT JOIN cls ON cls.request_id = q.request_id LEFT JOIN a ON a.request_id = q.request_id
    LEFT JOIN fixed ON fixed.request_id = q.request_id
    GROUP BY q.request_id, cls.close_type, cls.settled_cost, fixed.request_id
)
SELECT 'line' AS kind, a.team, a.deployment, a.day, a.currency, count(DISTINCT a.request_id) AS requests,
       count(*) AS attempts, sum(a.old_micro)::BIGINT AS old_micro, sum(a.new_micro)::BIGINT AS new_micro
FROM a JOIN r ON r.request_id = a.request_id AND r.verdict = 'ok'
GROUP BY ALL
UNION ALL
SELECT CASE WHEN verdict = 'ok' AND changes THEN 'correct' ELSE verdict END, NULL, NULL, NULL, NULL, count(*),
       NULL, NULL, NULL
FROM r GROUP BY ALL
"""


@dataclass(frozen=True, slots=True)
class SqlRerate:
    """The dry-run report of a re-rate computed in SQL; ``counts``: requests by verdict (``correct``: would get
    a correction, ``ok``: unchanged, else why left alone)."""

    version: int
    lines: list[DiffLine]
    counts: dict[str, int]

    @property
    def diff_micro(self) -> int:
        return sum(line.diff_micro for line in self.lines)


def rerate_lines(wh: Warehouse, start: date, end: date, version: PriceVersion, fx: FxTable) -> SqlRerate:
    """Re-price the requests admitted on the UTC days [start, end] under ``version``, in the warehouse."""
    if start > end:
        raise RerateError(f"--from {start} is after --to {end}")
    tables = price_tables(version, fx)
    wh.register("rr_prices", tables.prices)
    wh.register("rr_fx", tables.fx)
    try:
        rows = wh.query(_rerate_sql(tables), {"start": start, "end": end}).rows
    except WarehouseError as exc:
        raise RerateError(str(exc), "price_version" if "price" in str(exc) or "FX" in str(exc) else "from") from None
    lines = sorted((DiffLine(team, dep, day, ccy, req, att, old, new)
                    for kind, team, dep, day, ccy, req, att, old, new in rows if kind == "line"),
                   key=lambda d: (d.team, d.deployment, d.day, d.currency))
    counts = {kind: req for kind, _, _, _, _, req, *_ in rows if kind != "line"}
    return SqlRerate(version.version, lines, counts)
