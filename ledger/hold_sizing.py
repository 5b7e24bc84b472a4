"""Right-sized holds: how much of a request's worst case to hold, given what is in flight. Pure.

A request's *worst case* ``w`` prices its output cap; its *learned* hold
``h <= w`` prices the output its key and alias really use
(``ledger.output_sketch``). Holding ``h`` lets more requests run at once;
the price is *exposure*: ``w - h`` that no hold backs. If such a request
really uses its cap, the difference is an overrun, recorded at settlement as
always, and may carry the scope past its limit (overshoot).

``size_hold`` holds ``h`` on a scope only while all of these stay true after
the hold, else the full ``w``:

* the scope is not in its last stretch: what is left to hold
  (limit - settled - held - h) is at least ``last_bp`` of the limit;
* the unbacked exposure of this key's requests in flight on the scope is at
  most ``key_exposure_bp`` of the limit: a key whose outputs suddenly max
  out overshoots by at most that (its next requests already hold the full
  cap: the learner answers with its recent maximum);
* the unbacked exposure of all requests in flight on the scope is at most
  ``scope_exposure_bp`` of the limit (a bound for correlated failures).

Every figure is in basis points of the limit (1% = 100 bp); money is integer
micro-units. One amount is held on every scope (the largest any scope asks
for), as ``request.admitted`` carries one hold per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BP = 10_000


@dataclass(frozen=True, slots=True)
class Sizing:
    key_exposure_bp: int = 100
    scope_exposure_bp: int = 500
    last_bp: int = 500

    def __post_init__(self) -> None:
        for name in ("key_exposure_bp", "scope_exposure_bp", "last_bp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= BP:
                raise ValueError(f"{name} must be an int of basis points in 0..{BP}, got {value!r}")


@dataclass(frozen=True, slots=True)
class ScopeRoom:
    """One limited scope as admission sees it: its limit, settled and held money, and unbacked exposure."""

    limit: int
    settled: int
    held: int
    exposure: int  # sum of (worst - hold) over requests in flight on the scope
    key_exposure: int  # the same, over this request's key only

    @property
    def available(self) -> int:
        return self.limit - self.settled - self.held


def size_hold(worst: int, learned: int, rooms: Mapping[str, ScopeRoom], sizing: Sizing) -> int:
    """The hold to ask for: ``learned`` when every limited scope allows it, else ``worst``."""
    if learned >= worst:
        return worst
    extra = worst - learned
    for room in rooms.values():
        if (room.available - learned) * BP < room.limit * sizing.last_bp:
            return worst
        if (room.key_exposure + extra) * BP > room.limit * sizing.key_exposure_bp:
            return worst
        if (room.exposure + extra) * BP > room.limit * sizing.scope_exposure_bp:
            return worst
    return learned


def capped_last_hold(worst: int, estimate: int, rooms: Mapping[str, ScopeRoom], sizing: Sizing) -> int | None:
    """The last request a scope can pay for: with nothing held anywhere and at least ``estimate`` left,
    hold what is left (the tightest scope) when the unbacked rest fits ``key_exposure_bp``; else None.

    Without it, the money left after the final settlement, more than the request's estimate but less
    than its worst case, could never be spent, and ``budget_exhausted`` would come early."""
    if not rooms or any(room.held for room in rooms.values()):
        return None
    left = min(room.available for room in rooms.values())
    if left < estimate or left >= worst:
        return None
    for room in rooms.values():
        if (room.key_exposure + worst - left) * BP > room.limit * sizing.key_exposure_bp:
            return None
    return left
