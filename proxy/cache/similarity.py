"""The semantic cache's arithmetic: unit vectors, cosine similarity, the hit rule, a vector's stored bytes.

Pure: no clock, no I/O. A vector is normalised once (``normalised``), when it
is stored and when it is looked up, so the cosine similarity of two vectors
is their dot product (``similarity``). Vectors are kept as float32
(``array('f')``): half a double's bytes, and the rounding (about 1e-7 per
component) is far below any threshold's resolution. A similarity is rounded to
``SCORE_DIGITS`` places, so two copies of one vector score exactly 1.0 (a
threshold of 1 then means "the same embedding", not "never").

The hit rule (``is_hit``) compares the similarity's exact binary value with
the alias's decimal threshold, so there is no float rounding of the threshold
to argue about; ``similarity_text`` rounds down to ``PLACES``, so a hit never
reads as below a threshold of at most that many places (config check allows
no more). The gateway (``proxy.cache.semantic``) and the benchmark
(``tests/proxy/privacy/bench_semantic.py``) call these same functions: the
threshold the benchmark measured is the threshold the gateway applies.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterable, Sequence
from decimal import ROUND_FLOOR, Decimal
from operator import mul
from typing import TypeVar

K = TypeVar("K")

# Chosen with ``make bench-privacy`` (all-MiniLM-L6-v2 on the labelled FAQ pairs in
# tests/proxy/privacy/semantic_pairs.json; README: Benchmarks): the lowest threshold, so the most hits, at
# which at most 1% of the hard negatives would be served another question's answer. Another embeddings
# model scores on another scale: measure it before choosing an alias's threshold.
DEFAULT_THRESHOLD = Decimal("0.93")
PLACES = 4  # decimal places of a threshold (config check) and of a reported similarity
SCORE_DIGITS = 6  # a similarity's places: float32 noise (~1e-7) rounds away
_QUANTUM = Decimal(1).scaleb(-PLACES)
_LITTLE = sys.byteorder == "little"


def normalised(values: Sequence[float]) -> array | None:
    """``values`` scaled to unit length, as float32; None for an empty, all-zero or non-finite vector."""
    if not values:
        return None
    try:
        norm = math.sqrt(math.fsum(v * v for v in values))
    except TypeError:  # not numbers
        return None
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return array("f", (v / norm for v in values))


def similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two unit vectors (their dot product), clamped to [-1, 1].

    Vectors of different lengths come from different models and never match: -1.0.
    """
    if len(a) != len(b):
        return -1.0
    return max(-1.0, min(1.0, round(sum(map(mul, a, b)), SCORE_DIGITS)))


def is_hit(score: float, threshold: Decimal) -> bool:
    """Whether a stored answer this similar may be served: ``score >= threshold``, compared exactly."""
    return Decimal(score) >= threshold


def best_match(query: Sequence[float], candidates: Iterable[tuple[K, Sequence[float]]]) -> tuple[K, float] | None:
    """The most similar candidate and its similarity (the first of equals); None when there is none."""
    best: tuple[K, float] | None = None
    for key, vector in candidates:
        score = similarity(query, vector)
        if best is None or score > best[1]:
            best = (key, score)
    return best


def similarity_text(score: float) -> str:
    """A similarity as the decimal string events and headers carry, rounded down to ``PLACES``."""
    return str(Decimal(score).quantize(_QUANTUM, rounding=ROUND_FLOOR))


def threshold_problem(raw: object) -> tuple[Decimal | None, str | None]:
    """A threshold as config gives it: (value, None), or (None, what is wrong)."""
    if not isinstance(raw, str):
        return None, f'must be a decimal string such as "{DEFAULT_THRESHOLD}" (quoted), got {raw!r}'
    try:
        value = Decimal(raw.strip())
    except ArithmeticError:
        return None, f"must be a decimal number, got {raw!r}"
    if not value.is_finite() or not 0 < value <= 1:
        return None, f"must be above 0 and at most 1, got {raw!r}"
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent < -PLACES:
        return None, f"must have at most {PLACES} decimal places, got {raw!r}"
    return value, None


def pack(vector: array) -> bytes:
    """A float32 vector's stored bytes (little-endian whatever the machine, so pods may differ)."""
    if _LITTLE:
        return vector.tobytes()
    swapped = array("f", vector)
    swapped.byteswap()
    return swapped.tobytes()


def unpack(raw: bytes) -> array:
    """The vector ``pack`` wrote; raises ValueError for bytes that are not whole float32s."""
    if len(raw) % 4:
        raise ValueError(f"{len(raw)} bytes are not a float32 vector")
    vector = array("f")
    vector.frombytes(raw)
    if not _LITTLE:
        vector.byteswap()
    return vector
