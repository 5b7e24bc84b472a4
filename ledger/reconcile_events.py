"""The audit record of one daily reconciliation against the providers' usage exports.

``ReconcileReported`` is appended by ``farebox reconcile`` after it wrote its
report. Its id is ``reconcile/{day}/{accounts digest}/{content hash prefix}``:
the same day, account set and figures give the same id, so re-running an
unchanged reconciliation appends nothing (the log dedupes by id), while a
re-run whose figures changed (late usage, a fixed price) is a new event, a
new version of that day's report; the latest by time is the one in force.
It carries no money and no provider key, only counts and the content hash of
the report file (``reconcile.report.content_hash``) so an auditor can match
the event with the file. The ledger folds ignore it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

from ledger.envelope import Event, non_empty, non_negative


def accounts_digest(accounts: str) -> str:
    """12 hex characters naming a comma-separated account set in ids (any length of set, one length of id)."""
    return hashlib.sha256(accounts.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileReported(Event):
    """One reconciliation of ``day`` (UTC, ``YYYY-MM-DD``) over ``accounts`` (sorted, comma-separated).

    ``rows`` compared keys, ``flagged`` of them beyond ``threshold_percent``
    (a decimal string); ``content_hash`` is the sha256 of the report's content.
    """

    type: ClassVar[str] = "reconcile.reported"

    day: str
    accounts: str
    content_hash: str
    rows: int
    flagged: int
    threshold_percent: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        for name in ("day", "accounts", "content_hash", "threshold_percent"):
            non_empty(self, name, getattr(self, name))
        non_negative(self, "rows", self.rows)
        non_negative(self, "flagged", self.flagged)

    @property
    def id(self) -> str:
        return f"reconcile/{self.day}/{accounts_digest(self.accounts)}/{self.content_hash[:16]}"
