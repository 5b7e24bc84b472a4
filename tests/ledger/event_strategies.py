"""Hypothesis strategies for every event type, derived from the dataclass type hints.

A new field on an event is covered automatically; a field of a new *kind*
fails loudly here until a strategy is added.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from datetime import datetime, timezone
from types import NoneType, UnionType

from hypothesis import strategies as st

from ledger.events import ATTEMPT_OUTCOMES, EVENT_TYPES, Event
from ledger.notices import ROLLOUT_ACTIONS
from ledger.usage import TokenUsage

text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
ints = st.integers(0, 2**63 - 1)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(timezone.utc)
)
usages = st.builds(
    TokenUsage,
    input=ints,
    cached_input=ints,
    cache_write=ints,
    output=ints,
    reasoning=ints,
    source=st.sampled_from(["provider", "estimated"]),
)
scopes = st.builds(
    lambda kind, name: f"{kind}:{name}", st.sampled_from(["key", "team", "bu", "run"]), text
)
micro_maps = st.dictionaries(scopes, ints, max_size=4)

_SPECIAL = {
    "attempt": st.integers(1, 1000),
    "outcome": st.sampled_from(sorted(ATTEMPT_OUTCOMES)),
    "period": st.builds(lambda y, m: f"{y:04d}-{m:02d}", st.integers(2000, 2199), st.integers(1, 12)),
    "threshold_pct": st.integers(1, 100),
    "sequence": st.integers(1, 1000),
}


def _for_hint(hint: object) -> st.SearchStrategy:
    if isinstance(hint, UnionType) and NoneType in typing.get_args(hint):
        (inner,) = [a for a in typing.get_args(hint) if a is not NoneType]
        return st.none() | _for_hint(inner)
    if typing.get_origin(hint) is Mapping:
        return st.dictionaries(scopes, text, max_size=4) if typing.get_args(hint)[1] is str else micro_maps
    table = {str: text, int: ints, bool: st.booleans(), datetime: times, TokenUsage: usages}
    return table[hint]  # type: ignore[index]


def events_of(cls: type[Event]) -> st.SearchStrategy[Event]:
    hints = typing.get_type_hints(cls)
    kwargs = {
        f.name: _SPECIAL[f.name] if f.name in _SPECIAL else _for_hint(hints[f.name])
        for f in dataclasses.fields(cls)
    }
    if cls.type == "lease.granted":
        kwargs["expires_at"] = times
    if cls.type == "config.rollout":
        kwargs["action"] = st.sampled_from(ROLLOUT_ACTIONS)
        kwargs["stage_pct"] = st.integers(0, 100)
    if cls.type == "archive.head":  # a SHA-256 in lower-case hex
        kwargs["head"] = st.binary(min_size=32, max_size=32).map(bytes.hex)
    if cls.type == "request.admitted":  # a lease funds a scope's hold: only scopes with a hold
        kwargs.pop("leases")
        return st.builds(cls, **kwargs).flatmap(
            lambda e: st.dictionaries(st.sampled_from(sorted(e.holds)), text, max_size=4).map(
                lambda leases: dataclasses.replace(e, leases=leases)) if e.holds else st.just(e))
    if cls.type == "request.refused":  # a code, and the short scope among the holds (none for the cap)
        kwargs.pop("error_code"), kwargs.pop("scope")
        return st.builds(cls, error_code=st.just("request_cost_cap_exceeded"), scope=st.none(), **kwargs) | (
            st.builds(cls, error_code=st.just("request_cost_cap_exceeded"), scope=st.none(), **kwargs).filter(
                lambda e: bool(e.holds)).flatmap(lambda e: st.builds(
                    dataclasses.replace, st.just(e), error_code=st.sampled_from(["budget_exhausted",
                                                                                 "run_calls_exhausted"]),
                    scope=st.sampled_from(sorted(e.holds)))))
    if cls.type == "request.settled":  # a hit names its cache; only a semantic hit has a similarity
        kwargs.pop("cache_hit"), kwargs.pop("cache_kind"), kwargs.pop("cache_similarity")
        kinds = st.sampled_from([(False, None, None), (True, "exact", None)]) | st.tuples(
            st.just(True), st.just("semantic"), st.decimals(0, 1, places=4).map(str))
        return kinds.flatmap(lambda k: st.builds(cls, cache_hit=st.just(k[0]), cache_kind=st.just(k[1]),
                                                 cache_similarity=st.just(k[2]), **kwargs))
    if cls.type == "rating.corrected":  # attempt maps name the same attempts; the totals are their sums
        return st.builds(_corrected, st.just(cls), st.fixed_dictionaries(
            {k: v for k, v in kwargs.items() if not k.endswith(("attempt_costs", "cost_micro"))}),
            st.dictionaries(st.integers(1, 20).map(str), st.tuples(ints_small, ints_small), max_size=4))
    return st.builds(cls, **kwargs)


ints_small = st.integers(0, 2**40)


def _corrected(cls: type[Event], kwargs: dict, costs: dict) -> Event:
    old = {n: a for n, (a, _) in costs.items()}
    new = {n: b for n, (_, b) in costs.items()}
    return cls(**kwargs, old_attempt_costs=old, attempt_costs=new, old_cost_micro=sum(old.values()),
                      cost_micro=sum(new.values()))


any_event = st.one_of([events_of(cls) for cls in EVENT_TYPES])
