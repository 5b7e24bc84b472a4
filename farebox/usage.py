"""The usage query port's adapter: the admin usage API answered from the Parquet archive (``reconcile``).

``WarehouseUsage`` implements ``proxy.control.usage_port.UsageQuery`` over
``reconcile.usage_report``. Each query runs in a worker thread (DuckDB never
blocks the event loop). In embedded mode ``catch_up`` first archives what
the SQLite log holds beyond the archive (the in-process archiver's pass, so
the page sees the request just served); in distributed mode the archiver
consumer keeps the archive and there is nothing to wait for.

Warehouse failures become the proxy's errors here, at the boundary: a bad
column or range is a 400, an unreadable archive a 503 naming the file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from proxy.control.usage_port import USAGE, UsageTable, UsageUnavailable
from reconcile.dimensions import USAGE_DIMENSIONS

if TYPE_CHECKING:
    from proxy.observe.metrics_state import PodStateCollector
    from reconcile.usage_report import UsageReport

# reconcile (DuckDB, pyarrow) is imported at the first query, not when a pod starts: most pods never get one.


def _table(report: UsageReport) -> UsageTable:
    return UsageTable(report.columns, report.rows, report.totals, report.warnings)


class WarehouseUsage:
    """Usage and budget events from the archive at ``root``; ``catch_up`` (if any) runs before each query."""

    dimensions = USAGE_DIMENSIONS

    def __init__(self, root: Path, catch_up: Callable[[], Awaitable[object]] | None = None) -> None:
        self.root = root
        self.catch_up = catch_up
        self.left_out = 0  # archive files the last answer left out (the farebox_archive_files_left_out gauge)

    def _seen(self, table: UsageTable) -> UsageTable:
        self.left_out = sum(1 for w in table.warnings if not w.startswith(("missing:", "the manifest")))
        return table

    async def _fresh(self) -> None:
        if self.catch_up is not None:
            await self.catch_up()

    async def usage(self, start: date, end: date, by: Sequence[str], tz: str) -> UsageTable:
        from reconcile.usage_report import usage_report
        from reconcile.warehouse import WarehouseError

        await self._fresh()
        try:
            return self._seen(_table(await asyncio.to_thread(usage_report, self.root, start, end, by, tz=tz)))
        except WarehouseError as exc:
            raise UsageUnavailable(f"The usage warehouse cannot answer: {exc}") from None

    async def budget_events(self, start: date, end: date, tz: str, limit: int) -> UsageTable:
        from reconcile.usage_report import budget_events
        from reconcile.warehouse import WarehouseError

        await self._fresh()
        try:
            return self._seen(_table(await asyncio.to_thread(budget_events, self.root, start, end, tz=tz,
                                                             limit=limit)))
        except WarehouseError as exc:
            raise UsageUnavailable(f"The usage warehouse cannot answer: {exc}") from None


def attach_usage(app: web.Application, root: Path, catch_up: Callable[[], Awaitable[object]] | None = None, *,
                 state: PodStateCollector | None = None) -> WarehouseUsage:
    """Wire the port into a gateway app (``GET /admin/v1/usage`` answers 501 without it), and its count of
    left-out archive files into the pod's gauges."""
    port = WarehouseUsage(root, catch_up)
    app[USAGE] = port
    if state is not None:
        state.archive_left_out = lambda: port.left_out
    return port
