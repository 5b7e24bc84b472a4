"""Checking many wire objects at once: whether ``ledger.codec.from_dict`` reads every one of them.

``vouches(columns)`` looks at a group of wire objects that have the same keys
in the same order, given as columns (field -> the group's values, in one
order), and answers True only when ``from_dict`` would read every one of them:
the codec's field checks and the event's own ``__post_init__`` checks, applied
a column at a time with builtins (``min``, ``all``, a set of types) instead of
one event object per record. False means "not sure", never "refused": the
caller runs ``from_dict`` on each of that group for the verdict and its
message. So this can make a bulk read cheaper, never accept what ``from_dict``
refuses, nor change why a record is refused.

Only the request events the archiver reads in bulk have rules (``_RULES``:
admitted, attempted, settled, expired, current schemas); any other type or
schema is never vouched for. The type checks come from each class's type hints,
as the codec's own converters do (a new field is checked by type without
touching this file); the value checks mirror the classes' ``__post_init__``.
``MIRRORED`` is the SHA-256 of the sources the rules mirror (listed in
``tests/ledger/test_codec_bulk.py``, which fails when any of them changes):
after changing one, re-read the rules below against it, then update ``MIRRORED``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from itertools import chain, repeat
from operator import add, contains, itemgetter
from types import NoneType, UnionType
from typing import Any

from ledger.codec import _UPCASTERS
from ledger.events import ATTEMPT_OUTCOMES, Event, HoldExpired, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.request_events import CACHE_KINDS
from ledger.usage import TOKEN_TYPES, USAGE_SOURCES, TokenUsage

MIRRORED = "281f6636b5d57691ee22bda8dd0c069d5ef046b4a5a12f536798a008803743bf"

Columns = Mapping[str, Sequence[Any]]
_USAGE_KEYS = frozenset({*TOKEN_TYPES, "source"})
_USAGE_FIELDS = itemgetter(*TOKEN_TYPES, "source")
_SOURCES = frozenset(USAGE_SOURCES)
_BEFORE_Z = itemgetter(slice(0, 26))


def _all_of(kinds: set[type]) -> Callable[[Sequence[Any]], bool]:
    return lambda values: set(map(type, values)) <= kinds


def _times(values: Sequence[Any]) -> bool:
    """``parse_time`` of each: 27 characters, "." at 19 and "Z" at the end, the first 26 an ISO date and time."""
    if not values:
        return True
    if set(map(type, values)) != {str} or set(map(len, values)) != {27}:
        return False
    if set(map(itemgetter(26), values)) != {"Z"} or set(map(itemgetter(19), values)) != {"."}:
        return False
    try:
        return all(map(datetime.fromisoformat, map(_BEFORE_Z, values)))  # a datetime is always true
    except ValueError:
        return False


def _counts(values: Sequence[Any]) -> bool:
    """Token counts and micro-units: ints (never a bool), none negative, all within 64 bits."""
    return set(map(type, values)) <= {int} and (not values or (min(values) >= 0 and max(values) < 2**63))


def _usages(values: Sequence[Any]) -> bool:
    """``_usage_from_wire`` and ``check_usage``: exactly the token types and source, counts >= 0, a known source
    (a usage carrying ``cache_write_1h`` or ``service_tier`` is never vouched for: the per-event path checks them)."""
    if set(map(type, values)) != {dict} or not all(u.keys() == _USAGE_KEYS for u in values):
        return False
    *counts, sources = zip(*map(_USAGE_FIELDS, values))
    return all(map(_counts, counts)) and set(sources) <= _SOURCES


def _maps_of(kind: type) -> Callable[[Sequence[Any]], bool]:
    """The codec's map checks: objects whose values are all ``kind`` (JSON keys are always strings)."""
    kinds = {kind}
    return lambda values: set(map(type, values)) <= {dict} and set(
        map(type, chain.from_iterable(map(dict.values, values)))) <= kinds


def _column_check(hint: Any) -> Callable[[Sequence[Any]], bool]:
    """The codec's check of one field (``ledger.codec._converters``), for a whole column."""
    args = typing.get_args(hint)
    if isinstance(hint, UnionType) and NoneType in args:
        (inner,) = [a for a in args if a is not NoneType]
        check = _column_check(inner)
        return lambda values: check([v for v in values if v is not None])
    if hint is datetime:
        return _times
    if hint is TokenUsage:
        return _usages
    if typing.get_origin(hint) is Mapping:
        return _maps_of(args[1])
    if hint in (str, int, bool):
        return _all_of({hint})
    raise TypeError(f"no bulk check for {hint!r}")


# --- the value checks of __post_init__, a column at a time (the types are checked first) ---------------


def _non_empty(values: Sequence[str]) -> bool:
    return all(values)


def _some_non_empty(values: Sequence[str | None]) -> bool:
    return "" not in values


def _scope_maps(values: Sequence[dict[str, Any]]) -> bool:
    """``freeze_scope_map`` (and the privacy counts): non-empty keys, values >= 0."""
    return not any(map(contains, values, repeat(""))) and _counts(list(chain.from_iterable(map(dict.values, values))))


def _envelope(c: Columns, ids: Sequence[str]) -> bool:
    """``from_dict``'s last check: the envelope's id and key are the ones the payload derives."""
    return tuple(c["id"]) == tuple(ids) and tuple(c["key"]) == tuple(c["team"])


def _request(c: Columns) -> bool:
    """``RequestEvent.__post_init__`` (``Event``'s time check holds for every time ``parse_time`` returns)."""
    return _non_empty(c["request_id"]) and _non_empty(c["team"])


def _admitted(c: Columns) -> bool:
    return (_request(c) and all(_counts(c[n]) for n in ("est_input_tokens", "max_output_tokens", "price_version",
                                                        "hold_ttl_s", "privacy_policy_version"))
            and _scope_maps(c["holds"]) and _scope_maps(c["privacy_kinds"])
            and all(leases.keys() <= holds.keys() and all(leases.values())
                    for leases, holds in zip(c["leases"], c["holds"]) if leases)
            and _some_non_empty(c["cost_centre"]) and _some_non_empty(c["retry_of"])
            and not any(map(contains, c["tags"], repeat("")))
            and _envelope(c, list(map(add, c["request_id"], repeat("/admitted")))))


def _attempted(c: Columns) -> bool:
    return (_request(c) and min(c["attempt"]) >= 1 and set(c["outcome"]) <= ATTEMPT_OUTCOMES
            and all(_counts(c[n]) for n in ("status", "latency_ms", "cost_micro", "price_version"))
            and _counts([v for v in c["ttft_ms"] if v is not None]) and _some_non_empty(c["project"])
            and _envelope(c, list(map("{}/attempt/{}".format, c["request_id"], c["attempt"]))))


def _cache_named(hit: Any, kind: Any, similarity: Any) -> bool:
    """The settled event's cache fields as ``__post_init__`` accepts them, with nothing for it to fill in
    (a hit naming no cache is read as ``exact``: such a row is left to ``from_dict``)."""
    return (kind in CACHE_KINDS if hit is True else kind is None) and (similarity is not None) == (kind == "semantic")


def _settled(c: Columns) -> bool:
    return (_request(c) and all(_counts(c[n]) for n in ("final_status", "attempts", "cost_micro", "overrun_micro",
                                                        "latency_ms", "cache_saved_micro"))
            and all(map(_cache_named, c["cache_hit"], c["cache_kind"], c["cache_similarity"]))
            and _scope_maps(c["cost_by_scope"]) and _scope_maps(c["hold_released"])
            and _envelope(c, list(map(add, c["request_id"], repeat("/settled")))))


def _expired(c: Columns) -> bool:
    return _request(c) and _scope_maps(c["charged"]) and _envelope(c, list(map(add, c["request_id"],
                                                                                 repeat("/expired"))))


@dataclasses.dataclass(frozen=True, slots=True)
class _Rule:
    expected: frozenset[str]  # the wire object's keys
    types: tuple[tuple[str, Callable[[Sequence[Any]], bool]], ...]  # field -> the codec's check of its column
    values: Callable[[Columns], bool]  # the class's own checks


def _rule(cls: type[Event], values: Callable[[Columns], bool]) -> _Rule:
    assert (cls.type, cls.schema) not in _UPCASTERS, f"{cls.type}@{cls.schema} is upcast: not a current schema"
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    return _Rule(frozenset({"type", "schema", "id", "time", "request_id", "key", *fields}),
                 tuple((name, _column_check(hints[name])) for name in fields), values)


_RULES: dict[tuple[str, int], _Rule] = {
    (cls.type, cls.schema): _rule(cls, values)
    for cls, values in ((RequestAdmitted, _admitted), (RequestAttempted, _attempted), (RequestSettled, _settled),
                        (HoldExpired, _expired))
}


def vouches(columns: Columns) -> bool:
    """True only if ``ledger.codec.from_dict`` reads every wire object of a group (one shape: the same keys
    in the same order) given as ``columns``; False: check each with ``from_dict``."""
    try:
        kinds, schemas = set(columns.get("type", ())), set(columns.get("schema", ()))
        if len(kinds) != 1 or len(schemas) != 1 or set(map(type, columns["schema"])) != {int}:
            return False  # mixed, missing, or a bool (which would find its int's rule)
        rule = _RULES.get((next(iter(kinds)), next(iter(schemas))))
        if rule is None or columns.keys() != rule.expected:
            return False
        return all(check(columns[name]) for name, check in rule.types) and rule.values(columns)
    except TypeError:  # an unhashable value where a set is made of them: not sure
        return False
