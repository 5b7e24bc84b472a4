"""The pod's ``proxy.ports.Rerater``: ``reconcile``'s re-rating over the archive, for ``POST /admin/v1/rerate``.

One re-rate at a time per pod (a lock), so two posts never number the same
request's chain twice. What a re-rate must not correct again is what the
archive holds plus what is not archived yet: in embedded mode the
corrections in the SQLite log after the archiver's offset (as ``farebox
rerate`` reads them), and in both modes the corrections this pod appended
itself. So posting the same re-rate twice computes the same chain tip and
appends nothing the second time; the log dedupes ids besides.
"""

from __future__ import annotations

import asyncio
from datetime import date, datetime
from typing import Any

from farebox.cli.rerate import unarchived
from farebox.settings import Settings
from ledger.events import Event, RatingCorrected
from pricing.book import FxTable, PriceBook
from proxy.ports import Append, RerateRefused


class ArchiveRerater:
    """Implements ``proxy.ports.Rerater`` over the archive at ``settings.archive_root``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.archive = settings.archive_root
        self._lock = asyncio.Lock()
        self._appended: dict[str, RatingCorrected] = {}  # by id; corrections are rare admin acts, kept whole

    async def rerate(self, start: date, end: date, book: PriceBook, fx: FxTable, version: int, *, now: datetime,
                     reason: str, append: Append | None) -> tuple[dict[str, Any], list[Event]]:
        from reconcile.rerate.archive import plan_rerate
        from reconcile.rerate.reprice import (  # DuckDB and pyarrow: loaded at the first re-rating
            RerateError,
            report_json,
        )

        async with self._lock:
            pending = {e.id: e for e in await unarchived(self.settings, self.archive)}
            pending.update(self._appended)
            try:
                result = await asyncio.to_thread(plan_rerate, self.archive, start, end, book, fx, version, now=now,
                                                 pending=list(pending.values()), reason=reason)
            except RerateError as exc:
                raise RerateRefused(str(exc), exc.field) from None
            if append is not None and result.corrections:
                await append(result.corrections)
                self._appended.update((c.id, c) for c in result.corrections)
            return report_json(result, applied=append is not None), list(result.corrections)
