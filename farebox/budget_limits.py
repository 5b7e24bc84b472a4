"""What a ledger processor decides with: the budget limits, followed from the config database, and the
lease policy from the settings.

Both ledger processors use it: the Faust worker (``farebox.worker``) and the owner of
``farebox serve --workers N`` (``farebox.workers``). The limits are the config database's head snapshot,
re-read every poll; when the database cannot be read the last good snapshot stays in force.
"""

from __future__ import annotations

import asyncio
import logging

from farebox.control import open_config_db
from farebox.settings import Settings
from ledger.leases import LeasePolicy
from proxy.control.errors import ControlUnavailable
from proxy.snapshot import Snapshot

log = logging.getLogger("farebox")


def lease_policy(settings: Settings) -> LeasePolicy:
    d = settings.distributed
    return LeasePolicy(share=d.lease_share, last_pct=d.lease_last_pct, max_slice_micro=d.lease_max_slice_micro,
                       ttl_s=d.lease_ttl_s, expiry_grace_s=d.lease_expiry_grace_s)


class Limits:
    """The snapshot whose budgets a processor enforces. ``required``: a database unreachable at start is an
    error (``ControlUnavailable``); otherwise the config file's snapshot serves until the database answers."""

    def __init__(self, settings: Settings, *, required: bool = False) -> None:
        self.settings = settings
        self.snapshot: Snapshot = settings.snapshot
        try:
            self.db = open_config_db(settings)
            self.load()
        except ControlUnavailable:
            if required:
                raise
            self.db = None
            log.warning("config database %s unreachable: budget limits from the config file", settings.safe_db_url)

    def load(self) -> None:
        """Take the database's head if it is newer than the snapshot in force."""
        from proxy.control.document import compile_document

        if self.db is None:
            return
        head = self.db.head()
        if head is not None and head[0] != getattr(self.snapshot, "version", None):
            self.snapshot = compile_document(self.db.document(head[0]), head[0])

    async def refresh(self) -> None:
        """``load`` off the event loop; an unreadable database keeps the last good limits."""
        try:
            await asyncio.to_thread(self.load)
        except Exception:  # noqa: BLE001 - keep the last good limits
            log.warning("config database unreachable; keeping the last good limits", exc_info=True)

    async def follow(self) -> None:
        while True:
            await asyncio.sleep(max(self.settings.poll_interval_s, 1.0))
            await self.refresh()

    def limit_for(self, scope: str) -> int | None:
        limit = self.snapshot.budgets.limit_for(scope)
        return None if limit is None else limit.limit_micro

    def soft_pct_for(self, scope: str) -> int:
        limit = self.snapshot.budgets.limit_for(scope)
        return 80 if limit is None else limit.soft_pct

    def currency(self) -> str:
        return self.snapshot.currency
