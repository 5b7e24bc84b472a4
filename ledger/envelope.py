"""The envelope every event shares, and the field checks every event type uses.

An ``Event`` is a frozen dataclass with ``time`` (timezone-aware, normalised
to UTC), class constants ``type`` and ``schema``, and ``id`` / ``request_id`` /
``key`` derived from its payload (never set by hand). The checks raise
``InvalidEvent`` naming the type and field: money and token counts are
non-negative ints, scope maps are read-only ``scope -> micro-units``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import ClassVar

from ledger.errors import InvalidEvent
from ledger.usage import SERVICE_TIER, TOKEN_TYPES, USAGE_SOURCES, TokenUsage


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


def freeze_scope_map(event: Event, name: str) -> None:
    """Replace a dict field by a read-only copy, checking it maps scope -> micro-units."""
    value = getattr(event, name)
    for scope, micro in value.items():
        if not isinstance(scope, str) or not scope:
            raise InvalidEvent(f"{event.type}.{name}: scope ids must be non-empty strings, got {scope!r}")
        non_negative(event, f"{name}[{scope}]", micro)
    object.__setattr__(event, name, MappingProxyType(dict(value)))


def check_usage(event: Event, name: str) -> None:
    """A ``TokenUsage`` with non-negative counts and a known source."""
    value = getattr(event, name)
    if not isinstance(value, TokenUsage):
        raise InvalidEvent(f"{event.type}.{name} must be a TokenUsage, got {type(value).__name__}")
    for kind in TOKEN_TYPES:
        non_negative(event, f"{name}.{kind}", getattr(value, kind))
    non_negative(event, f"{name}.cache_write_1h", value.cache_write_1h)
    if value.cache_write_1h > value.cache_write:
        raise InvalidEvent(f"{event.type}.{name}.cache_write_1h ({value.cache_write_1h}) is more than its "
                           f"cache_write ({value.cache_write})")
    if value.source not in USAGE_SOURCES:
        raise InvalidEvent(f"{event.type}.{name}.source must be one of {USAGE_SOURCES}, got {value.source!r}")
    if value.service_tier is not None and (not isinstance(value.service_tier, str)
                                           or not SERVICE_TIER.match(value.service_tier)):
        raise InvalidEvent(f"{event.type}.{name}.service_tier must be a short lower-case name, got "
                           f"{value.service_tier!r}")


INT64_END = 2**63  # every count and amount must fit a signed 64-bit integer (the log's JSON, the archive)


def non_negative(event: Event, name: str, value: object) -> None:
    """An int in [0, 2**63) (not a bool): money in micro-units, token counts, versions. An event that
    could not be encoded or archived is refused here, at construction, before anything appends or folds it."""
    if type(value) is int and 0 <= value < INT64_END:  # the common case, exactly as below (a bool is no int)
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= INT64_END:
        raise InvalidEvent(f"{event.type}.{name} must be a non-negative int below 2**63, got {value!r}")


def non_empty(event: Event, name: str, value: object) -> None:
    """A non-empty string: ids, teams, scopes."""
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{event.type}.{name} must be a non-empty string, got {value!r}")

