"""The semantic cache's arithmetic: unit vectors, cosine similarity, the exact hit rule, stored bytes."""

from __future__ import annotations

import math
from array import array
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.cache.similarity import (
    DEFAULT_THRESHOLD,
    best_match,
    is_hit,
    normalised,
    pack,
    similarity,
    similarity_text,
    threshold_problem,
    unpack,
)

components = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


def test_normalised_is_unit_length_float32_and_refuses_what_has_no_direction() -> None:
    v = normalised([3.0, 4.0])
    assert v is not None and v.typecode == "f" and list(v) == pytest.approx([0.6, 0.8])
    for bad in ([], [0.0, 0.0], [1.0, math.inf], [1.0, math.nan], ["a", "b"]):
        assert normalised(bad) is None  # type: ignore[arg-type]


@given(st.lists(components, min_size=1, max_size=64).filter(lambda v: any(abs(x) > 1e-3 for x in v)))
def test_a_vector_scores_exactly_one_against_itself_so_a_threshold_of_one_can_hit(values: list[float]) -> None:
    v = normalised(values)
    assert v is not None
    assert similarity(v, v) == 1.0 and is_hit(similarity(v, v), Decimal("1"))


def test_similarity_is_the_cosine_and_vectors_of_two_models_never_match() -> None:
    x, y = normalised([1.0, 0.0]), normalised([0.0, 2.0])
    assert x is not None and y is not None
    assert similarity(x, y) == 0.0
    assert similarity(x, normalised([-5.0, 0.0])) == -1.0  # type: ignore[arg-type]
    assert similarity(normalised([1.0, 1.0]), x) == pytest.approx(math.sqrt(0.5), abs=1e-6)  # type: ignore[arg-type]
    assert similarity(x, normalised([1.0, 0.0, 0.0])) == -1.0  # type: ignore[arg-type]


def test_best_match_is_the_most_similar_first_of_equals_and_none_of_nothing() -> None:
    q = normalised([1.0, 0.1])
    assert q is not None
    cands = [("far", normalised([0.0, 1.0])), ("near", normalised([1.0, 0.0])), ("twin", normalised([1.0, 0.0]))]
    found = best_match(q, cands)  # type: ignore[arg-type]
    assert found is not None and found[0] == "near" and found[1] == pytest.approx(1 / math.sqrt(1.01), abs=1e-6)
    assert best_match(q, []) is None


def test_the_hit_rule_compares_the_exact_value_with_the_decimal_threshold() -> None:
    t = Decimal("0.92")
    assert is_hit(0.92, t)  # the double nearest 0.92 is 0.92000000000000003996...
    assert not is_hit(math.nextafter(0.92, 0) - 1e-16, t)
    assert not is_hit(0.9199999999999999, t)
    assert is_hit(1.0, Decimal("1")) and not is_hit(0.99999, Decimal("1"))


@given(st.floats(-1, 1), st.integers(1, 10_000).map(lambda n: Decimal(n).scaleb(-4)))
def test_a_reported_similarity_is_below_the_threshold_exactly_when_it_is_no_hit(score: float, t: Decimal) -> None:
    assert is_hit(score, t) == (Decimal(similarity_text(score)) >= t)


def test_similarity_text_rounds_down_to_four_places() -> None:
    assert similarity_text(0.97319) == "0.9731"
    assert similarity_text(1.0) == "1.0000"
    assert similarity_text(0.0) == "0.0000"


@pytest.mark.parametrize("raw, problem", [
    ("0.92", None), ("1", None), (" 0.5 ", None), ("0.9250", None), ("0.92500", None),
    (0.92, "quoted"), (None, "quoted"), ("abc", "decimal number"), ("0", "above 0"), ("1.01", "above 0"),
    ("-0.5", "above 0"), ("NaN", "above 0"), ("0.92501", "4 decimal places"),
])
def test_a_threshold_is_a_quoted_decimal_in_zero_one_with_at_most_four_places(raw: object, problem: str | None) -> None:
    value, why = threshold_problem(raw)
    if problem is None:
        assert why is None and value == Decimal(str(raw).strip())
    else:
        assert value is None and why is not None and problem in why


def test_the_default_threshold_is_itself_valid() -> None:
    assert threshold_problem(str(DEFAULT_THRESHOLD)) == (DEFAULT_THRESHOLD, None)


def test_stored_bytes_round_trip_and_refuse_a_torn_vector() -> None:
    v = normalised([0.1 * i for i in range(1, 257)])
    assert v is not None
    raw = pack(v)
    assert len(raw) == 4 * 256 and unpack(raw) == v
    assert raw[:4] == array("f", [v[0]]).tobytes()  # little-endian on this machine
    with pytest.raises(ValueError):
        unpack(raw[:-1])
