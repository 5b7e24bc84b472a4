"""Event schemas: the system of record.

Every event is a frozen dataclass with a common envelope:

* ``id``: deterministic (derived from request/lease id or config version), so
  every consumer can dedupe and every producer can retry;
* ``type`` and ``schema``: class constants; ``schema`` starts at 1 and is bumped
  for any change to a type's fields (the codec keeps readers for old schemas);
* ``time``: a timezone-aware instant, normalised to UTC;
* ``request_id``: the request the event belongs to (None for lease and config
  events; for a budget notice, the request that crossed the threshold);
* ``key``: the Kafka partition key: the team for request events, the scope
  for lease events and budget notices, None for config events.

Money is integer micro-units of the named currency, never a float. Usage is
a ``pricing.usage.TokenUsage`` (the shared, pure value type; on the wire its
``to_dict()``): the one farebox import ``ledger`` allows itself. Scope ids
are strings like ``"key:fb-dev-1a2b"``, ``"team:payments"``, ``"bu:retail"``,
``"run:abc"``. Encoding lives in ``ledger.codec``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import ClassVar

from ledger.errors import InvalidEvent
from pricing.usage import TOKEN_TYPES, TokenUsage

ATTEMPT_OUTCOMES = frozenset(
    {"ok", "rate_limited", "unavailable", "rejected", "timeout", "client_closed", "interrupted", "auth_failed", "error"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """The envelope every event shares; subclasses define ``type`` and ``id``."""

    type: ClassVar[str]
    schema: ClassVar[int] = 1

    time: datetime

    def __post_init__(self) -> None:
        t = self.time
        if not isinstance(t, datetime) or t.tzinfo is None or t.utcoffset() is None:
            raise InvalidEvent(f"{self.type}: time must be a timezone-aware datetime, got {t!r}")
        if t.tzinfo is not timezone.utc:
            object.__setattr__(self, "time", t.astimezone(timezone.utc))

    @property
    def id(self) -> str:
        raise NotImplementedError

    @property
    def request_id(self) -> str | None:
        return None

    @property
    def key(self) -> str | None:
        return None


def _freeze(event: Event, name: str) -> None:
    """Replace a dict field by a read-only copy, checking it maps scope -> micro-units."""
    value = getattr(event, name)
    for scope, micro in value.items():
        if not isinstance(scope, str) or not scope:
            raise InvalidEvent(f"{event.type}.{name}: scope ids must be non-empty strings, got {scope!r}")
        _non_negative(event, f"{name}[{scope}]", micro)
    object.__setattr__(event, name, MappingProxyType(dict(value)))


def _check_usage(event: Event, name: str) -> None:
    value = getattr(event, name)
    if not isinstance(value, TokenUsage):
        raise InvalidEvent(f"{event.type}.{name} must be a TokenUsage, got {type(value).__name__}")
    for kind in TOKEN_TYPES:
        _non_negative(event, f"{name}.{kind}", getattr(value, kind))
    if value.source not in ("provider", "estimated"):
        raise InvalidEvent(f"{event.type}.{name}.source must be provider or estimated, got {value.source!r}")


def _non_negative(event: Event, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidEvent(f"{event.type}.{name} must be a non-negative int, got {value!r}")


def _non_empty(event: Event, name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{event.type}.{name} must be a non-empty string, got {value!r}")


# --- request events (fb.requests, keyed by team) ----------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEvent(Event):
    """An event of one request's life; ``team`` is its partition key."""

    request_id: str  # type: ignore[assignment]  # a field here, a property on Event
    team: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _non_empty(self, "request_id", self.request_id)
        _non_empty(self, "team", self.team)

    @property
    def key(self) -> str:
        return self.team


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAdmitted(RequestEvent):
    """Admission passed: the request holds money on every scope it touches."""

    type: ClassVar[str] = "request.admitted"
    schema: ClassVar[int] = 2  # 2: ``leases`` (schema 1 is read as funded by no lease)

    key_id: str
    business_unit: str
    app: str
    run_id: str | None
    alias: str
    data_class: str
    est_input_tokens: int
    max_output_tokens: int
    holds: Mapping[str, int]
    currency: str
    price_version: int
    pod: str
    hold_ttl_s: int
    stream: bool
    leases: Mapping[str, str] = field(default_factory=dict)  # scope -> lease id that funds its hold (distributed mode)

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        for name in ("est_input_tokens", "max_output_tokens", "price_version", "hold_ttl_s"):
            _non_negative(self, name, getattr(self, name))
        _freeze(self, "holds")
        for scope, lease_id in self.leases.items():
            if scope not in self.holds:
                raise InvalidEvent(f"{self.type}.leases[{scope}]: the scope has no hold")
            _non_empty(self, f"leases[{scope}]", lease_id)
        object.__setattr__(self, "leases", MappingProxyType(dict(self.leases)))

    @property
    def id(self) -> str:
        return f"{self.request_id}/admitted"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAttempted(RequestEvent):
    """One try at one deployment, with provider-reported usage priced at ``price_version``."""

    type: ClassVar[str] = "request.attempted"

    attempt: int
    deployment: str
    provider: str
    account: str
    model: str
    region: str
    outcome: str
    status: int
    ttft_ms: int | None
    latency_ms: int
    usage: TokenUsage
    cost_micro: int
    currency: str
    price_version: int
    error_code: str | None

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise InvalidEvent(f"{self.type}.attempt counts from 1, got {self.attempt!r}")
        if self.outcome not in ATTEMPT_OUTCOMES:
            raise InvalidEvent(f"{self.type}.outcome {self.outcome!r} is not one of {sorted(ATTEMPT_OUTCOMES)}")
        for name in ("status", "latency_ms", "cost_micro", "price_version"):
            _non_negative(self, name, getattr(self, name))
        if self.ttft_ms is not None:
            _non_negative(self, "ttft_ms", self.ttft_ms)
        _check_usage(self, "usage")

    @property
    def id(self) -> str:
        return f"{self.request_id}/attempt/{self.attempt}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSettled(RequestEvent):
    """The hold is replaced by the actual cost; ``final_status`` is the HTTP status the client got."""

    type: ClassVar[str] = "request.settled"

    final_status: int
    attempts: int
    deployment: str | None
    usage: TokenUsage
    cost_micro: int
    currency: str
    cost_by_scope: Mapping[str, int]
    hold_released: Mapping[str, int]
    overrun_micro: int
    cache_hit: bool
    latency_ms: int

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        for name in ("final_status", "attempts", "cost_micro", "overrun_micro", "latency_ms"):
            _non_negative(self, name, getattr(self, name))
        _check_usage(self, "usage")
        _freeze(self, "cost_by_scope")
        _freeze(self, "hold_released")

    @property
    def id(self) -> str:
        return f"{self.request_id}/settled"


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldExpired(RequestEvent):
    """A hold never settled within its TTL (pod died): charged in full on each scope."""

    type: ClassVar[str] = "hold.expired"

    charged: Mapping[str, int]
    currency: str

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        _freeze(self, "charged")

    @property
    def id(self) -> str:
        return f"{self.request_id}/expired"


# --- lease events (fb.scope-entries, keyed by scope) -------------------------------


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
        _non_empty(self, "lease_id", self.lease_id)
        _non_empty(self, "scope", self.scope)
        _non_negative(self, "amount_micro", self.amount_micro)
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
        _non_negative(self, "least_micro", self.least_micro)

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
        _non_negative(self, "funded_micro", self.funded_micro)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseExpired(LeaseEvent):
    """The processor closed a lease its pod never returned; ``amount_micro`` is what it released."""

    type: ClassVar[str] = "lease.expired"
    verb: ClassVar[str] = "expired"


# --- budget notices (fb.scope-entries, keyed by scope) ------------------------------


def _check_period(event: Event, name: str, value: object) -> None:
    """A calendar month "YYYY-MM" (the budget period, in the configured zone)."""
    ok = (
        isinstance(value, str)
        and len(value) == 7
        and value[4] == "-"
        and value[:4].isdigit()
        and value[5:].isdigit()
        and 1 <= int(value[5:]) <= 12
    )
    if not ok:
        raise InvalidEvent(f"{event.type}.{name} must be a month like 2026-10, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetThresholdCrossed(Event):
    """A scope's settled + held passed its soft threshold in ``period``: emitted once per scope and period.

    ``spent_micro`` is settled + held at the crossing, including the hold of
    ``request_id``, the request whose admission crossed it. Traffic is not
    affected; refusals at the hard limit are 429s, not events.
    """

    type: ClassVar[str] = "budget.threshold_crossed"

    request_id: str  # type: ignore[assignment]  # a field here, a property on Event
    scope: str
    period: str
    limit_micro: int
    spent_micro: int
    threshold_pct: int
    currency: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _non_empty(self, "request_id", self.request_id)
        _non_empty(self, "scope", self.scope)
        _check_period(self, "period", self.period)
        _non_negative(self, "limit_micro", self.limit_micro)
        _non_negative(self, "spent_micro", self.spent_micro)
        pct = self.threshold_pct
        if isinstance(pct, bool) or not isinstance(pct, int) or not 1 <= pct <= 100:
            raise InvalidEvent(f"{self.type}.threshold_pct must be an int in 1..100, got {pct!r}")

    @property
    def id(self) -> str:
        return f"{self.scope}/{self.period}/soft"

    @property
    def key(self) -> str:
        return self.scope


# --- config audit (fb.config) -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigPublished(Event):
    """A config snapshot was published (audit of admin changes)."""

    type: ClassVar[str] = "config.published"

    version: int
    content_hash: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _non_negative(self, "version", self.version)
        _non_empty(self, "content_hash", self.content_hash)

    @property
    def id(self) -> str:
        return f"config/{self.version}"


EVENT_TYPES: tuple[type[Event], ...] = (
    RequestAdmitted,
    RequestAttempted,
    RequestSettled,
    HoldExpired,
    LeaseRequested,
    LeaseGranted,
    LeaseReturned,
    LeaseExpired,
    ConfigPublished,
    BudgetThresholdCrossed,
)
