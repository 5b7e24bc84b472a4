"""Request events (``fb.requests``, keyed by team): admitted, attempted, settled, expired.

Every admitted request ends settled or expired. Holds, charges and costs are
integer micro-units of ``currency``; usage is a ``ledger.usage.TokenUsage``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from ledger.envelope import Event, check_usage, freeze_scope_map, non_empty, non_negative
from ledger.errors import InvalidEvent
from ledger.usage import TokenUsage

# The tags farebox sets itself on a request's events (the caller's own may not start with ``fb.``)
BATCH_TAG = "fb.batch"  # the batch a line belongs to
PRIORITY_TAG = "fb.priority"  # "batch" for a request of the batch class
RESERVED_TAG = "fb.reserved"  # "1" on a batch line's hold, taken when its batch was admitted whole
VARIANT_TAG = "fb.variant"  # the variant of the alias's split that served the request
SHADOW_TAG = "fb.shadow"  # a shadow leg: the alias whose request it copies
CANARY_TAG = "fb.canary"  # a synthetic-canary probe: the deployment it checks

CACHE_KINDS = ("exact", "semantic")  # which response cache answered a hit
ATTEMPT_OUTCOMES = frozenset(
    {"ok", "rate_limited", "unavailable", "rejected", "timeout", "client_closed", "interrupted", "auth_failed", "error"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEvent(Event):
    """An event of one request's life; ``team`` is its partition key."""

    request_id: str  # type: ignore[assignment]  # a field here, a property on Event
    team: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        non_empty(self, "request_id", self.request_id)
        non_empty(self, "team", self.team)

    @property
    def key(self) -> str:
        return self.team


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAdmitted(RequestEvent):
    """Admission passed: the request holds money on every scope it touches."""

    type: ClassVar[str] = "request.admitted"
    schema: ClassVar[int] = 5  # 2: ``leases``; 3: ``cost_centre``, ``tags``, ``retry_of``; 4: privacy; 5: ``api``
    # (the codec upcasts)

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
    cost_centre: str | None = None  # the app's cost centre, else its team's (None: neither has one)
    tags: Mapping[str, str] = field(default_factory=dict)  # the caller's x-fb-tags, validated at the edge
    retry_of: str | None = None  # the request this one retries (a stream re-sent with the same Idempotency-Key)
    # What the privacy step did: kinds and counts found, never a value or a placeholder map.
    privacy_kinds: Mapping[str, int] = field(default_factory=dict)  # e.g. {"email": 2}
    privacy_action: str = "allow"  # for the first candidate: redact | allow
    privacy_policy_version: int = 0  # 0: written before the privacy step existed
    privacy_policy_hash: str = ""  # SHA-256 of the policy's canonical JSON
    prompt_hash: str = ""  # SHA-256 of the canonical JSON of the messages as the caller sent them
    privacy_scan_skipped: bool = False  # too large to scan; sent because its class fails open
    api: str = "chat"  # the client surface it came through: chat | responses | messages | embeddings

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        for name in ("est_input_tokens", "max_output_tokens", "price_version", "hold_ttl_s"):
            non_negative(self, name, getattr(self, name))
        freeze_scope_map(self, "holds")
        for scope, lease_id in self.leases.items():
            if scope not in self.holds:
                raise InvalidEvent(f"{self.type}.leases[{scope}]: the scope has no hold")
            non_empty(self, f"leases[{scope}]", lease_id)
        object.__setattr__(self, "leases", MappingProxyType(dict(self.leases)))
        if self.cost_centre is not None:
            non_empty(self, "cost_centre", self.cost_centre)
        for tag in self.tags:
            non_empty(self, "tags", tag)
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))
        for kind, count in self.privacy_kinds.items():
            non_empty(self, "privacy_kinds", kind)
            non_negative(self, f"privacy_kinds[{kind}]", count)
        object.__setattr__(self, "privacy_kinds", MappingProxyType(dict(self.privacy_kinds)))
        non_negative(self, "privacy_policy_version", self.privacy_policy_version)
        if self.retry_of is not None:
            non_empty(self, "retry_of", self.retry_of)

    @property
    def id(self) -> str:
        return f"{self.request_id}/admitted"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAttempted(RequestEvent):
    """One try at one deployment, with provider-reported usage priced at ``price_version``."""

    type: ClassVar[str] = "request.attempted"
    schema: ClassVar[int] = 3  # 2: ``usage_received``; 3: ``project`` (codec upcasts)

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
    # What the provider reported when it failed the usage boundary (``usage.source`` is then
    # ``provider_invalid`` and the counts are farebox's estimate); None otherwise.
    usage_received: str | None = None
    # The provider project (sub-account) under ``account`` the deployment bills to, where it names one: an
    # OpenAI project, an Anthropic workspace, an AWS member account, a Google Cloud project, an Azure subscription.
    project: str | None = None

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        if self.project is not None:
            non_empty(self, "project", self.project)
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise InvalidEvent(f"{self.type}.attempt counts from 1, got {self.attempt!r}")
        if self.outcome not in ATTEMPT_OUTCOMES:
            raise InvalidEvent(f"{self.type}.outcome {self.outcome!r} is not one of {sorted(ATTEMPT_OUTCOMES)}")
        for name in ("status", "latency_ms", "cost_micro", "price_version"):
            non_negative(self, name, getattr(self, name))
        if self.ttft_ms is not None:
            non_negative(self, "ttft_ms", self.ttft_ms)
        check_usage(self, "usage")

    @property
    def id(self) -> str:
        return f"{self.request_id}/attempt/{self.attempt}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSettled(RequestEvent):
    """The hold is replaced by the actual cost; ``final_status`` is the HTTP status the client got.

    A cache hit (``cache_hit``) has no attempt and costs 0; ``cache_saved_micro``
    is what the cached answer would have cost upstream (0 for every other request).
    ``cache_kind`` says which cache answered (``exact`` or ``semantic``; None
    exactly when it is no hit; a hit built without one is ``exact``) and a
    semantic hit's ``cache_similarity`` is the cosine similarity it was served
    at, a decimal string (e.g. "0.9731").
    """

    type: ClassVar[str] = "request.settled"
    schema: ClassVar[int] = 3  # 2: ``cache_saved_micro``; 3: ``cache_kind``, ``cache_similarity`` (codec upcasts)

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
    cache_saved_micro: int = 0
    cache_kind: str | None = None
    cache_similarity: str | None = None

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        for name in ("final_status", "attempts", "cost_micro", "overrun_micro", "latency_ms", "cache_saved_micro"):
            non_negative(self, name, getattr(self, name))
        if self.cache_hit and self.cache_kind is None:  # a hit that names no cache is the exact cache's
            object.__setattr__(self, "cache_kind", "exact")
        if self.cache_kind not in (CACHE_KINDS if self.cache_hit else (None,)):
            raise InvalidEvent(f"{self.type}: cache_kind {self.cache_kind!r} with cache_hit {self.cache_hit}")
        if (self.cache_similarity is not None) != (self.cache_kind == "semantic"):
            raise InvalidEvent(f"{self.type}: cache_similarity is set exactly for a semantic hit")
        check_usage(self, "usage")
        freeze_scope_map(self, "cost_by_scope")
        freeze_scope_map(self, "hold_released")

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
        freeze_scope_map(self, "charged")

    @property
    def id(self) -> str:
        return f"{self.request_id}/expired"
