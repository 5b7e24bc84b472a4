"""Admin API, usage: spend and traffic from the finance warehouse, in JSON or CSV.

    GET /admin/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD&by=team,app,alias,day[&format=csv]   finance, auditor
    GET /admin/v1/usage/budget-events?from=&to=&limit=                                  finance, auditor

Days are calendar days of ``budgets.timezone`` (as budget months are), both
ends included; the default range is this budget month so far. CSV comes with
``Accept: text/csv`` or ``format=csv``; a range with no data is a file with
its header alone. The numbers come only from the ``USAGE`` port
(``proxy.control.usage_port``), which the composition root wires to the
warehouse.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web

from proxy.control.admin.access import allowed
from proxy.control.usage_port import USAGE, UsageAsk, UsageQuery, UsageTable, money_strings, parse_usage_query
from proxy.errors import GatewayError
from proxy.runtime import RUNTIME


def _port(request: web.Request) -> UsageQuery:
    port = request.app.get(USAGE)
    if port is None:
        raise GatewayError("This pod has no finance warehouse for usage queries.", status=501,
                           code="usage_unavailable")
    return port


def _ask(request: web.Request, port: UsageQuery, *, need_by: bool) -> tuple[UsageAsk, str]:
    tz = request.app[RUNTIME].snapshot.budgets.timezone
    today = datetime.fromtimestamp(request.app[RUNTIME].clock(), ZoneInfo(tz)).date()
    ask = parse_usage_query(request.query, request.headers.get("Accept"), today, port.dimensions, need_by=need_by)
    return ask, tz


def to_csv(table: UsageTable) -> str:
    """Every row, exact: integers as written, missing values empty; the header even when there is no row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow(["" if row.get(c) is None else money_strings({c: row[c]})[c] for c in table.columns])
    return out.getvalue()


def answer(table: UsageTable, ask: UsageAsk, tz: str, currency: str, filename: str, **meta: Any) -> web.Response:
    if ask.fmt == "csv":
        return web.Response(text=to_csv(table), content_type="text/csv", charset="utf-8", headers={
            "Content-Disposition": f'attachment; filename="{filename}-{ask.start}-{ask.end}.csv"',
            "X-Farebox-Archive-Warnings": str(len(table.warnings))})
    body = {"object": "usage", "from": ask.start.isoformat(), "to": ask.end.isoformat(), "timezone": tz,
            "currency": currency, **meta, "columns": list(table.columns),
            "data": [money_strings(row) for row in table.rows], "archive_warnings": list(table.warnings)}
    if table.totals is not None:
        body["totals"] = money_strings(table.totals)
    return web.json_response(body)


async def get_usage(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    port = _port(request)
    ask, tz = _ask(request, port, need_by=True)
    table = await port.usage(ask.start, ask.end, ask.by, tz)
    currency = request.app[RUNTIME].snapshot.currency
    return answer(table, ask, tz, currency, "usage-" + "-".join(ask.by), by=list(ask.by))


async def get_budget_events(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    port = _port(request)
    ask, tz = _ask(request, port, need_by=False)
    table = await port.budget_events(ask.start, ask.end, tz, ask.limit)
    return answer(table, ask, tz, request.app[RUNTIME].snapshot.currency, "budget-events")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/usage", get_usage)
    app.router.add_get("/admin/v1/usage/budget-events", get_budget_events)
