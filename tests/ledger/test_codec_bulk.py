"""``ledger.codec_bulk.vouches`` never accepts what ``ledger.codec.from_dict`` refuses, and does vouch for the
request events as the gateway writes them (else the archiver's fast path would silently never run)."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_builders import admit, attempt, expire, settle
from wire_mutations import PALETTE, mutated

from ledger import codec, envelope, request_events
from ledger.codec import from_dict, to_dict
from ledger.codec_bulk import MIRRORED, vouches
from ledger.errors import LedgerError
from ledger.events import EVENT_TYPES, HoldExpired, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from tests.ledger.event_strategies import any_event, events_of

HOT = (RequestAdmitted, RequestAttempted, RequestSettled, HoldExpired)

# What the rules mirror: the codec's read path and the hot classes' own checks (their whole class bodies).
MIRRORED_SOURCES = (
    codec.from_dict, codec.parse_time, codec._usage_from_wire, codec._expect_int, codec._micro_map_from_wire,
    codec._str_map_from_wire, codec._checker, codec._converters,
    envelope.Event, envelope.freeze_scope_map, envelope.check_usage, envelope.non_negative, envelope.non_empty,
    request_events.RequestEvent, *HOT, TokenUsage,
)


def mirrored_digest() -> str:
    digest = hashlib.sha256()
    for obj in MIRRORED_SOURCES:
        digest.update(inspect.getsource(obj).encode())
    return digest.hexdigest()


def test_the_rules_were_checked_against_the_current_sources():
    assert mirrored_digest() == MIRRORED, (
        "ledger.codec_bulk mirrors code that changed: re-read its rules against ledger.codec's read path and "
        f"the request events' __post_init__, then set MIRRORED = {mirrored_digest()!r}")


def reads(wire: Any) -> bool:
    try:
        from_dict(wire)
    except (LedgerError, ValueError, KeyError, TypeError):
        return False
    return True


def columns_of(wires: list[dict]) -> dict[str, tuple]:
    fields = tuple(wires[0])
    assert all(tuple(w) == fields for w in wires)
    return {f: tuple(w[f] for w in wires) for f in fields}


def assert_never_weaker(wires: list[Any]) -> None:
    """For every group of like wire objects: vouched -> every one reads."""
    groups: dict[tuple, list[dict]] = {}
    for wire in wires:
        if isinstance(wire, dict):
            groups.setdefault(tuple(wire), []).append(wire)
    for group in groups.values():
        if vouches(columns_of(group)):
            assert all(reads(w) for w in group), [w for w in group if not reads(w)]


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(HOT).flatmap(lambda cls: st.lists(events_of(cls), min_size=1, max_size=6)))
def test_it_vouches_for_valid_request_events(events):
    groups: dict[tuple, list[dict]] = {}
    for wire in map(to_dict, events):
        groups.setdefault(tuple(wire), []).append(wire)
    assert all(vouches(columns_of(group)) for group in groups.values())


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(any_event)
def test_other_event_types_are_left_to_from_dict(event):
    if type(event) not in HOT:
        assert not vouches(columns_of([to_dict(event)]))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(HOT).flatmap(lambda cls: st.lists(events_of(cls), min_size=1, max_size=4)), st.data())
def test_a_mutated_record_is_never_vouched_for_unless_it_reads(events, data):
    wires = [to_dict(e) for e in events]
    victim = data.draw(st.integers(0, len(wires) - 1))
    field = data.draw(st.sampled_from(sorted(wires[victim])))
    how = data.draw(st.sampled_from(["set", "rederive", "rederive", "nested", "drop", "add"]))
    value = data.draw(st.sampled_from(PALETTE) | st.text(max_size=3) | st.integers(-3, 3))
    wires[victim] = mutated(wires[victim], how, field, value)
    assert_never_weaker(wires)


@pytest.mark.parametrize("cls", HOT)
def test_each_check_of_a_field_is_made(cls):
    """Every field of every hot type, set to every palette value: vouched -> reads (no sampling)."""
    wire = to_dict(next(e for e in _examples() if type(e) is cls))
    for field in wire:
        for value in PALETTE:
            for how in ("set", "rederive", "nested"):
                assert_never_weaker([mutated(wire, how, field, value)])
        assert_never_weaker([mutated(wire, "drop", field, None)])
    if cls is RequestAdmitted:  # a lease for a scope without a hold; a lease id that is empty
        assert_never_weaker([{**wire, "leases": {"team:nobody": "l-1"}}])
        assert_never_weaker([{**wire, "leases": {sorted(wire["holds"])[0]: ""}}])


def _examples() -> list:
    holds = {"key:k1": 5_000, "team:payments": 5_000, "bu:retail": 5_000}
    admitted = dataclasses.replace(admit("r-1", holds), leases={"team:payments": "l-1"}, tags={"env": "prod"},
                                   cost_centre="CC-1", retry_of="r-0", privacy_kinds={"email": 2})
    return [admitted, attempt("r-1", 4_000), settle("r-1", {s: 4_000 for s in holds}, holds),
            expire("r-2", holds)]


def test_mixed_or_odd_groups_are_not_vouched_for():
    wire = to_dict(_examples()[1])  # an attempt
    assert vouches(columns_of([wire]))
    assert not vouches(columns_of([{**wire, "schema": True}]))  # a bool schema would find schema 1's rule
    assert not vouches(columns_of([wire, {**wire, "type": "request.settled"}]))
    assert not vouches(columns_of([{**wire, "type": ["request.attempted"]}]))
    assert not vouches(columns_of([{**wire, "schema": 99}]))
    assert not vouches({})
    assert {cls.type for cls in EVENT_TYPES} >= {cls.type for cls in HOT}
