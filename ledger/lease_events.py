"""Lease events (``fb.scope-entries``, keyed by scope): a slice of a scope's budget between processor and pod.

A pod requests, the ledger processor grants (committed the moment it is
granted), the pod returns what it did not spend, or the processor expires a
lease its pod never returned. ``id`` is ``{lease_id}/{verb}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import ClassVar

from ledger.envelope import Event, non_empty, non_negative
from ledger.errors import InvalidEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseEvent(Event):
    """A slice of a scope's budget moving between the ledger processor and a pod."""

    verb: ClassVar[str]

    lease_id: str
    scope: str
    pod: str
    amount_micro: int
    expires_at: datetime | None

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        non_empty(self, "lease_id", self.lease_id)
        non_empty(self, "scope", self.scope)
        non_negative(self, "amount_micro", self.amount_micro)
        at = self.expires_at
        if at is not None:
            if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
                raise InvalidEvent(f"{self.type}.expires_at must be timezone-aware, got {at!r}")
            object.__setattr__(self, "expires_at", at.astimezone(timezone.utc))

    @property
    def id(self) -> str:
        return f"{self.lease_id}/{self.verb}"

    @property
    def key(self) -> str:
        return self.scope


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRequested(LeaseEvent):
    """A pod asks for ``amount_micro``; ``expires_at`` is the expiry it would like (optional).

    A pod batches: ``amount_micro`` is the sum of the holds of the requests
    waiting on this scope, ``least_micro`` the smallest of them (0: the same as
    ``amount_micro``). A grant below ``least_micro`` could fund none of them, so
    the processor refuses (grants 0) only when not even ``least_micro`` is left.
    """

    type: ClassVar[str] = "lease.requested"
    schema: ClassVar[int] = 2  # 2: ``least_micro`` (schema 1 is read with least_micro 0)
    verb: ClassVar[str] = "requested"

    least_micro: int = 0

    def __post_init__(self) -> None:
        LeaseEvent.__post_init__(self)
        non_negative(self, "least_micro", self.least_micro)

    @property
    def least(self) -> int:
        """The smallest grant that funds at least one waiting request (never above the amount)."""
        return min(self.least_micro, self.amount_micro) if self.least_micro else self.amount_micro


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseGranted(LeaseEvent):
    """The processor granted ``amount_micro`` (counted as committed now) until ``expires_at``."""

    type: ClassVar[str] = "lease.granted"
    verb: ClassVar[str] = "granted"

    def __post_init__(self) -> None:
        LeaseEvent.__post_init__(self)
        if self.expires_at is None:
            raise InvalidEvent(f"{self.type}.expires_at is required: every granted lease expires")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseReturned(LeaseEvent):
    """A pod gives back the unspent ``amount_micro`` of a lease, as it saw it.

    ``funded_micro`` is the sum of the holds of every request the pod admitted
    on the lease: the ledger keeps at most that much minus the funded holds it
    has already seen reserved (never more than the lease has left:
    ``ledger.leases``), until those admissions arrive (they travel through
    ``fb.requests``, this event does not, so it may overtake them).
    """

    type: ClassVar[str] = "lease.returned"
    schema: ClassVar[int] = 2  # 2: ``funded_micro`` (schema 1 is read with funded_micro 0)
    verb: ClassVar[str] = "returned"

    funded_micro: int = 0

    def __post_init__(self) -> None:
        LeaseEvent.__post_init__(self)
        non_negative(self, "funded_micro", self.funded_micro)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseExpired(LeaseEvent):
    """The processor closed a lease its pod never returned; ``amount_micro`` is what it released."""

    type: ClassVar[str] = "lease.expired"
    verb: ClassVar[str] = "expired"
