"""Event codec: JSON bytes on the wire (orjson), strict on the way in.

Wire shape (one flat object)::

    {"type": "request.settled", "schema": 1, "id": "r-1/settled",
     "time": "2026-10-03T10:15:02.123456Z", "request_id": "r-1", "key": "payments",
     ...the event's own fields}

Money is integer micro-units, times are UTC ISO-8601 with microseconds and
"Z", usage is ``TokenUsage.to_dict()``. ``decode`` dispatches on
(type, schema); a schema bump registers the old reader here as an upcaster so
archived events stay readable. The envelope's ``id`` and ``key`` are derived,
and decode checks them against the derived values.

Upcasters (``_UPCASTERS``), each from one schema to the next:

* ``request.admitted`` 1 -> 2: ``leases`` = {} (funded by no lease: embedded mode);
* ``request.admitted`` 2 -> 3: ``cost_centre`` = None, ``tags`` = {}, ``retry_of`` = None (no allocation, not a retry);
* ``request.refused`` 1 -> 2: ``cost_centre`` = None, ``tags`` = {};
* ``lease.returned`` 1 -> 2: ``funded_micro`` = 0 (no admission of it still on the way);
* ``lease.requested`` 1 -> 2: ``least_micro`` = 0 (one request's hold: the whole amount);
* ``request.settled`` 1 -> 2: ``cache_saved_micro`` = 0 (no response cache saved anything);
* ``request.settled`` 2 -> 3: ``cache_kind`` = "exact" for a hit, else None (the only cache there was),
  ``cache_similarity`` = None.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from types import NoneType, UnionType
from typing import Any

import orjson

from ledger.errors import CodecError, InvalidEvent, UnknownEventType
from ledger.events import EVENT_TYPES, Event
from ledger.usage import TOKEN_TYPES, USAGE_SOURCES, TokenUsage

_ENVELOPE = ("type", "schema", "id", "time", "request_id", "key")


def format_time(at: datetime) -> str:
    """UTC ISO-8601 with microseconds and "Z": 2026-10-03T10:15:02.123456Z."""
    at = at.astimezone(timezone.utc)
    return (
        f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}:{at.minute:02d}:"
        f"{at.second:02d}.{at.microsecond:06d}Z"
    )


def parse_time(text: object) -> datetime:
    if not isinstance(text, str) or len(text) != 27 or text[-1] != "Z" or text[19] != ".":
        raise CodecError(f"time must look like 2026-10-03T10:15:02.123456Z, got {text!r}")
    try:
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise CodecError(f"bad time {text!r}: {exc}") from None


# --- per-field converters, derived once from each class's type hints ----------------

_ToWire = Callable[[Any], Any]
_FromWire = Callable[[Any], Any]


def _usage_from_wire(value: Any) -> TokenUsage:
    if not isinstance(value, dict) or set(value) - {"cache_write_1h", "service_tier"} != {*TOKEN_TYPES, "source"}:
        raise CodecError(f"usage must be an object of exactly {TOKEN_TYPES} and 'source' (and 'cache_write_1h' "
                         f"when not 0, 'service_tier' when not standard), got {value!r}")
    for kind in TOKEN_TYPES:
        _expect_int(value[kind], f"usage.{kind}")
    if "cache_write_1h" in value:
        _expect_int(value["cache_write_1h"], "usage.cache_write_1h")
    if "service_tier" in value and not isinstance(value["service_tier"], str):
        raise CodecError(f"usage.service_tier must be a string, got {value['service_tier']!r}")
    if value["source"] not in USAGE_SOURCES:
        raise CodecError(f"usage.source must be one of {USAGE_SOURCES}, got {value['source']!r}")
    return TokenUsage.from_dict(value)


def _expect_int(value: Any, name: str) -> int:
    if type(value) is int:  # the common case, exactly as below (a bool's type is not int)
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(f"{name} must be an integer, got {value!r}")
    return value


def _micro_map_from_wire(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise CodecError(f"expected an object of scope -> micro-units, got {value!r}")
    for scope, micro in value.items():
        _expect_int(micro, f"[{scope}]")
    return value


def _str_map_from_wire(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise CodecError(f"expected an object of scope -> id, got {value!r}")
    for scope, text in value.items():
        if not isinstance(text, str):
            raise CodecError(f"[{scope}] must be a string, got {text!r}")
    return value


def _checker(kind: type, name: str) -> _FromWire:
    """The check of one plain field, specialised once per field (``int`` never accepts a bool)."""
    if kind is int:
        return lambda value: value if type(value) is int else _expect_int(value, name)

    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise CodecError(f"{name} must be {kind.__name__}, got {value!r}")
        return value

    return lambda value: value if type(value) is kind else check(value)


def _converters(hint: Any, name: str) -> tuple[_ToWire | None, _FromWire]:
    """(to_wire or None for identity, from_wire) for one field's type hint."""
    args = typing.get_args(hint)
    if isinstance(hint, UnionType) and NoneType in args:
        (inner,) = [a for a in args if a is not NoneType]
        to_wire, from_wire = _converters(inner, name)
        to_opt = (lambda v: None if v is None else to_wire(v)) if to_wire else None
        return to_opt, lambda v: None if v is None else from_wire(v)
    if hint is datetime:
        return format_time, parse_time
    if hint is TokenUsage:
        return TokenUsage.to_dict, _usage_from_wire
    if typing.get_origin(hint) is Mapping:
        return dict, _str_map_from_wire if typing.get_args(hint)[1] is str else _micro_map_from_wire
    if hint in (str, int, bool):
        return None, _checker(hint, name)
    raise TypeError(f"codec has no converter for {name}: {hint!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Schema:
    cls: type[Event]
    names: tuple[str, ...]
    expected: frozenset[str]  # the wire object's keys: the envelope and every field
    to_wire: tuple[tuple[str, _ToWire | None], ...]
    from_wire: tuple[tuple[str, _FromWire], ...]


def _schema_of(cls: type[Event]) -> _Schema:
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    pairs = {name: _converters(hints[name], f"{cls.type}.{name}") for name in fields}
    return _Schema(
        cls=cls,
        names=tuple(fields),
        expected=frozenset({*_ENVELOPE, *fields}),
        to_wire=tuple((name, pairs[name][0]) for name in fields if name != "request_id"),
        from_wire=tuple((name, pairs[name][1]) for name in fields),
    )


_BY_CLASS: dict[type[Event], _Schema] = {cls: _schema_of(cls) for cls in EVENT_TYPES}
_READERS: dict[tuple[str, int], _Schema] = {(cls.type, cls.schema): s for cls, s in _BY_CLASS.items()}
_UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("request.admitted", 1): lambda d: {**d, "schema": 2, "leases": {}},
    ("request.admitted", 2): lambda d: {**d, "schema": 3, "cost_centre": None, "tags": {}, "retry_of": None},
    ("request.admitted", 3): lambda d: {
        **d, "schema": 4, "privacy_kinds": {}, "privacy_action": "allow", "privacy_policy_version": 0,
        "privacy_policy_hash": "", "prompt_hash": "", "privacy_scan_skipped": False,
    },
    ("request.admitted", 4): lambda d: {**d, "schema": 5, "api": "chat"},  # before surfaces: chat (or embeddings)
    ("request.refused", 1): lambda d: {**d, "schema": 2, "cost_centre": None, "tags": {}},
    ("lease.returned", 1): lambda d: {**d, "schema": 2, "funded_micro": 0},
    ("lease.requested", 1): lambda d: {**d, "schema": 2, "least_micro": 0},
    ("request.attempted", 1): lambda d: {**d, "schema": 2, "usage_received": None},
    ("request.attempted", 2): lambda d: {**d, "schema": 3, "project": None},
    ("request.settled", 1): lambda d: {**d, "schema": 2, "cache_saved_micro": 0},
    ("request.settled", 2): lambda d: {**d, "schema": 3, "cache_kind": "exact" if d.get("cache_hit") is True else None,
                                       "cache_similarity": None},
}


# --- the codec --------------------------------------------------------------------


def to_dict(event: Event) -> dict[str, Any]:
    """The wire object of an event (what ``encode`` serialises)."""
    try:
        schema = _BY_CLASS[type(event)]
    except KeyError:
        raise UnknownEventType(f"{type(event).__name__} is not a registered event type") from None
    out: dict[str, Any] = {
        "type": event.type,
        "schema": event.schema,
        "id": event.id,
        "time": format_time(event.time),
        "request_id": event.request_id,
        "key": event.key,
    }
    for name, to_wire in schema.to_wire:
        if name == "time":
            continue
        value = getattr(event, name)
        out[name] = value if to_wire is None else to_wire(value)
    return out


def encode(event: Event) -> bytes:
    """Serialise an event to JSON bytes."""
    return orjson.dumps(to_dict(event))


def from_dict(data: Any) -> Event:
    """Build an event from its wire object, strictly: no missing, extra or mistyped fields."""
    if not isinstance(data, dict):
        raise CodecError(f"an event must be a JSON object, got {type(data).__name__}")
    kind, version = data.get("type"), data.get("schema")
    while type(version) is int and (kind, version) in _UPCASTERS:  # never a bool: True == 1 as a dict key
        data = _UPCASTERS[(kind, version)](data)  # type: ignore[index]
        version = data["schema"]
    readable = isinstance(kind, str) and isinstance(version, int) and not isinstance(version, bool)
    schema = _READERS.get((kind, version)) if readable else None  # type: ignore[arg-type]
    if schema is None:
        known = sorted(f"{t}@{s}" for t, s in [*_READERS, *_UPCASTERS])
        raise UnknownEventType(f"cannot read event type {kind!r} schema {version!r}; this build reads {known}")
    expected = schema.expected
    if data.keys() != expected:
        missing = expected - data.keys()
        extra = data.keys() - expected
        raise CodecError(f"{kind}@{version}: missing fields {sorted(missing)}, unexpected {sorted(extra)}")
    kwargs = {name: from_wire(data[name]) for name, from_wire in schema.from_wire}
    try:
        event = schema.cls(**kwargs)
    except (InvalidEvent, TypeError) as exc:
        raise CodecError(f"{kind}@{version}: {exc}") from exc
    if data["id"] != event.id or data["key"] != event.key or data["request_id"] != event.request_id:
        raise CodecError(
            f"{kind}: envelope does not match the payload (id {data['id']!r} vs {event.id!r}, "
            f"key {data['key']!r} vs {event.key!r})"
        )
    return event


def decode(data: bytes | str) -> Event:
    """Parse JSON bytes into an event; a clear ``CodecError`` for anything else."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"event is not valid JSON: {exc}") from None
    return from_dict(obj)
