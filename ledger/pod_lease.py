"""A pod's view of one lease it holds: what it may still spend, and the return it sends."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ledger.lease_events import LeaseReturned


@dataclass(slots=True)
class PodLease:
    """What a pod may still spend of a grant: granted - (open holds + settled charges).

    A settlement below its hold gives the difference back (spent again); one
    above it (estimator error) takes more, and the balance may go negative.
    ``funded`` (the sum of holds ever funded) goes into the return so the
    ledger knows which admissions are still on their way.
    """

    lease_id: str
    scope: str
    granted: int
    expires_at: datetime
    spent: int = 0
    funded: int = 0
    open: dict[str, tuple[int, datetime | None]] = field(default_factory=dict)  # request -> hold, hold expiry

    @property
    def balance(self) -> int:
        return self.granted - self.spent

    def covers(self, hold: int, now: datetime, margin: timedelta = timedelta(0)) -> bool:
        return self.balance >= hold and now + margin < self.expires_at

    def fund(self, request_id: str, hold: int, hold_expires_at: datetime | None = None) -> None:
        self.open[request_id] = (hold, hold_expires_at)
        self.spent += hold
        self.funded += hold

    def settle(self, request_id: str, charge: int, now: datetime | None = None) -> bool:
        """Replace the hold by ``charge``; past the hold's expiry the ledger may have charged the whole
        hold (``hold.expired``), so the pod does too and never re-spends what it cannot know was released."""
        opened = self.open.pop(request_id, None)
        if opened is None:
            return False
        hold, expires_at = opened
        if expires_at is not None and now is not None and now >= expires_at:
            charge = max(charge, hold)
        self.spent += charge - hold
        return True

    def returned(self, now: datetime, pod: str) -> LeaseReturned:
        return LeaseReturned(time=now, lease_id=self.lease_id, scope=self.scope, pod=pod,
                             amount_micro=max(self.balance, 0), expires_at=self.expires_at, funded_micro=self.funded)
