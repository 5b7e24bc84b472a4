"""The I/O of one day's reconciliation: fetch each account's export, read our side from the archive.

Both halves end in plain values for ``reconcile.report.build_report``:
``fetch_exports`` gives the providers' ``UsageRow``/``CostRow`` for the day,
``our_side`` gives our ``OurUsage`` rows (in the budget currency, and again
priced in each provider's billing currency) from the archive through
``reconcile/sql/our_usage.sql``.

Bad input is a :class:`ReconcileInputError` naming what is wrong (an export
that does not parse, with the field or line; a day with no archive; an
attempt no price version can price); a provider that cannot be reached is an
``ExportFetchError``. An admin key travels only into the fetch helpers'
request headers: ``ExportPlan`` never shows it in its repr.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import duckdb

from pricing.book import FxTable, Price, PriceBook
from pricing.errors import PricingError
from reconcile.drift import OurUsage
from reconcile.errors import InputError
from reconcile.exports import (
    OPENAI_USAGE_KINDS,
    CostRow,
    ExportParseError,
    UsageRow,
    fetch,
    parse_anthropic_costs,
    parse_anthropic_usage,
    parse_openai_costs,
    parse_openai_usage,
    parse_simulator_export,
)
from reconcile.file_exports import FILE_SOURCES, read_file_export
from reconcile.our_usage import our_usage_rows, unattributed_expired
from streams.archive.read import ArchiveError, archive_files, read_archive

OUR_USAGE_SQL = Path(__file__).parent / "sql" / "our_usage.sql"


class ReconcileInputError(InputError):
    """The day cannot be reconciled as asked: the message says which account, field, line or day."""


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """Where one account's export comes from: ``source`` simulator | openai | anthropic, or a file source
    (``reconcile.file_exports``: aws | google | azure, read from ``path``/``cur_path``)."""

    account: str
    provider: str  # the name its rows carry (the deployments' ``provider``)
    source: str
    base_url: str | None = None  # None: the provider's own API
    admin_key: str | None = field(default=None, repr=False)
    path: str | None = None  # file sources: the local copy of the export (aws: the invocation logs)
    cur_path: str | None = None  # aws: the CUR 2.0 export's folder
    models: Mapping[str, str] = field(default_factory=dict)  # billing name -> our model id
    ours: tuple[str, ...] = ()  # the models our deployments of this account serve


async def fetch_exports(plans: Sequence[ExportPlan], day: date,
                        session: aiohttp.ClientSession) -> tuple[list[UsageRow], list[CostRow]]:
    """Each account's usage (and, where the provider reports it, cost) rows for ``day``."""
    usage: list[UsageRow] = []
    costs: list[CostRow] = []
    for plan in plans:
        u, c = await _fetch_one(plan, day, session)
        usage += u
        costs += c
    return usage, costs


async def _fetch_one(plan: ExportPlan, day: date, session: aiohttp.ClientSession
                     ) -> tuple[list[UsageRow], list[CostRow]]:
    what = "usage export"
    try:
        if plan.source in FILE_SOURCES:
            what = f"{plan.source} export"
            return await asyncio.to_thread(read_file_export, plan.source, plan.account, day, plan.path,
                                           plan.cur_path, plan.models, plan.ours)
        if plan.source == "simulator":
            body = await fetch.fetch_simulator_export(session, plan.base_url or "", plan.account, day)
            rows = [r for r in parse_simulator_export(body, plan.provider) if r.account == plan.account]
            return rows, []
        key = plan.admin_key or ""
        base = {"base_url": plan.base_url} if plan.base_url else {}
        if plan.source == "openai":
            usage = []
            for kind in OPENAI_USAGE_KINDS:  # every usage endpoint: a day of embeddings reconciles too
                what = f"{kind} usage report"
                usage += parse_openai_usage(await fetch.fetch_openai_usage(session, key, day, kind=kind, **base),
                                            plan.account, kind)
            what = "cost report"
            return usage, parse_openai_costs(await fetch.fetch_openai_costs(session, key, day, **base), plan.account)
        if plan.source == "anthropic":
            pages = await fetch.fetch_anthropic_usage(session, key, day, **base)
            usage = parse_anthropic_usage(pages, plan.account)
            what = "cost report"
            return usage, parse_anthropic_costs(await fetch.fetch_anthropic_costs(session, key, day, **base),
                                                plan.account)
    except ExportParseError as exc:
        raise ReconcileInputError(f"account {plan.account}: the {plan.source} {what} does not parse at "
                                  f"{exc.where}: {exc.problem}") from None
    raise ReconcileInputError(f"account {plan.account}: unknown export source {plan.source!r}")


@dataclass(frozen=True, slots=True)
class OurSide:
    """Our rows of the day: ``usage`` in the budget currency, ``money`` in each billed account's currency."""

    usage: list[OurUsage]
    money: list[OurUsage]
    unattributed_expired: dict[date, int]
    current_price_version: int | None


def our_side(archive_root: str | Path, day: date, book: PriceBook, fx: FxTable,
             money_currency: Mapping[str, str]) -> OurSide:
    """Our usage of ``day`` from the archive; expiries up to a day later still count on the day admitted.

    ``money_currency`` maps each account with a provider cost report to that report's currency."""
    require_archive(archive_root, day)
    try:
        table = read_archive(archive_root, day, day + timedelta(days=1))
    except ArchiveError as exc:
        raise ReconcileInputError(str(exc)) from None
    con = duckdb.connect()
    try:
        con.register("events", table)
        con.execute(OUR_USAGE_SQL.read_text())
        records = _records(con, "SELECT * FROM our_usage WHERE day = ?", day)
        loose = unattributed_expired(_records(con, "SELECT * FROM our_expired_unattributed WHERE day = ?", day))
    finally:
        con.close()
    at = datetime.combine(day, time(12), timezone.utc)

    def price_of(version: int, deployment: str, currency: str, tier: str | None = None) -> tuple[Price, Decimal]:
        try:
            price = book.get(version).served(deployment, tier)
            return price, fx.rate(price.currency, currency, at)
        except PricingError as exc:
            raise ReconcileInputError(f"our usage of {day.isoformat()} cannot be priced: {exc}") from None

    usage = our_usage_rows(records, price_of)
    billed = [{**r, "currency": money_currency[r["account"]]} for r in records if r["account"] in money_currency]
    return OurSide(usage, our_usage_rows(billed, price_of), loose, _version_of_day(book, day))


def require_archive(archive_root: str | Path, day: date) -> None:
    """A day with no archive file is bad input, refused before any provider is asked."""
    if not archive_files(archive_root, day, day):
        raise ReconcileInputError(f"no archive for {day.isoformat()} under {archive_root}: nothing was recorded "
                                  "that day, or the archive root is wrong (--archive)")


def _records(con: duckdb.DuckDBPyConnection, sql: str, *params: Any) -> list[dict[str, Any]]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _version_of_day(book: PriceBook, day: date) -> int | None:
    """The price version in force all day; None when versions changed during it (or none applies)."""
    start = datetime.combine(day, time.min, timezone.utc)
    try:
        first, last = book.in_force(start), book.in_force(start + timedelta(days=1, microseconds=-1))
    except PricingError:
        return None
    return first.version if first.version == last.version else None


def currencies(costs: Iterable[CostRow]) -> dict[str, str]:
    """Each account's billing currency as its cost rows give it (one per account, by the drift rules)."""
    return {c.account: c.currency for c in costs}
