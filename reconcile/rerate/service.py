"""Re-rating on request (``POST /admin/v1/rerate``): one at a time, and never correcting a request twice.

One re-rate at a time per pod (a lock), so two posts never number the same request's chain twice. What a
re-rate must not correct again is what the archive holds plus what is not archived yet: what ``unarchived``
returns (embedded mode: the corrections in the SQLite log after the archiver's offset, as ``farebox rerate``
reads them) and the corrections this service appended itself. So posting the same re-rate twice computes
the same chain tip and appends nothing the second time; the log dedupes ids besides.

Raises ``RerateError`` (``reconcile.rerate.reprice``) for a re-rate that cannot be done as asked; the
composition root maps it to the admin API's refusal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

from ledger.events import Event, RatingCorrected
from pricing.book import FxTable, PriceBook

Append = Callable[[Sequence[Event]], Awaitable[None]]


class Rerating:
    """Re-rating over the archive at ``archive``; ``unarchived`` lists corrections the archive lacks yet."""

    def __init__(self, archive: Path, unarchived: Callable[[], Awaitable[list[RatingCorrected]]]) -> None:
        self.archive = archive
        self.unarchived = unarchived
        self._lock = asyncio.Lock()
        self._appended: dict[str, RatingCorrected] = {}  # by id; corrections are rare admin acts, kept whole

    async def rerate(self, start: date, end: date, book: PriceBook, fx: FxTable, version: int, *, now: datetime,
                     reason: str, append: Append | None) -> tuple[dict[str, Any], list[Event]]:
        """The re-rate's report and its corrections, appended through ``append`` unless a dry run (None)."""
        from reconcile.rerate.archive import plan_rerate  # DuckDB and pyarrow: loaded at the first re-rating
        from reconcile.rerate.reprice import report_json

        async with self._lock:
            pending = {e.id: e for e in await self.unarchived()}
            pending.update(self._appended)
            result = await asyncio.to_thread(plan_rerate, self.archive, start, end, book, fx, version, now=now,
                                             pending=list(pending.values()), reason=reason)
            if append is not None and result.corrections:
                await append(result.corrections)
                self._appended.update((c.id, c) for c in result.corrections)
            return report_json(result, applied=append is not None), list(result.corrections)
