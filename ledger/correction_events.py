"""``rating.corrected``: a settled request re-priced under another price version (re-rating).

A correction is the one way settled money changes after settlement. It never
edits the original events: it says "this request was charged ``old_*`` at
``old_price_version``; under ``price_version`` it costs ``new``", per scope
and per attempt, and the ledger folds the difference ``new - old`` into the
month of the request's admission (``admitted_at``, placed in the ledger's
zone, so the fold needs no other event to find it).

Chains: corrections of one request are numbered from 1 (``sequence``) and
each is relative to the cost the previous one left: the n-th correction's
``old_*`` is the (n-1)-th's ``new`` (the original charge for n = 1). Re-rating
v2 -> v3 and then v3 -> v4 folds (v3 - v2) + (v4 - v3) = v4 - v2. The id
``{request_id}/rerate/{sequence}`` is deterministic from the history the
re-rate read, so applying the same re-rate twice appends the same ids and the
second changes nothing; going back to an earlier version is just the next
number in the chain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import ClassVar

from ledger.envelope import freeze_scope_map, non_empty, non_negative
from ledger.errors import InvalidEvent
from ledger.request_events import RequestEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class RatingCorrected(RequestEvent):
    """A settled request re-priced: old and new cost per scope and per attempt (see the module docstring).

    ``attempt_costs`` / ``old_attempt_costs`` map the attempt number (as a string,
    ``"1"``) to its cost in micro-units; ``cost_micro`` is their sum."""

    type: ClassVar[str] = "rating.corrected"

    sequence: int
    admitted_at: datetime
    currency: str
    old_price_version: int
    price_version: int
    old_cost_micro: int
    cost_micro: int
    old_cost_by_scope: Mapping[str, int]
    cost_by_scope: Mapping[str, int]
    old_attempt_costs: Mapping[str, int]
    attempt_costs: Mapping[str, int]
    reason: str

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        if isinstance(self.sequence, bool) or not isinstance(self.sequence, int) or self.sequence < 1:
            raise InvalidEvent(f"{self.type}.sequence counts from 1, got {self.sequence!r}")
        at = self.admitted_at
        if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
            raise InvalidEvent(f"{self.type}.admitted_at must be a timezone-aware datetime, got {at!r}")
        object.__setattr__(self, "admitted_at", at.astimezone(timezone.utc))
        non_empty(self, "currency", self.currency)
        for name in ("old_price_version", "price_version", "old_cost_micro", "cost_micro"):
            non_negative(self, name, getattr(self, name))
        for name in ("old_cost_by_scope", "cost_by_scope", "old_attempt_costs", "attempt_costs"):
            freeze_scope_map(self, name)
        for name in ("old_attempt_costs", "attempt_costs"):
            costs = getattr(self, name)
            for n in costs:
                if not n.isdigit() or n != str(int(n)) or int(n) < 1:
                    raise InvalidEvent(f"{self.type}.{name}: keys are attempt numbers from 1, got {n!r}")
        if self.old_attempt_costs.keys() != self.attempt_costs.keys():
            raise InvalidEvent(f"{self.type}: old_attempt_costs and attempt_costs must name the same attempts")
        if sum(self.old_attempt_costs.values()) != self.old_cost_micro or \
                sum(self.attempt_costs.values()) != self.cost_micro:
            raise InvalidEvent(f"{self.type}: cost_micro and old_cost_micro must be the sums of the attempt costs")

    @property
    def id(self) -> str:
        return f"{self.request_id}/rerate/{self.sequence}"

    def deltas(self) -> dict[str, int]:
        """Per scope, what the correction adds to the settled money (negative when the price fell)."""
        return {scope: self.cost_by_scope.get(scope, 0) - self.old_cost_by_scope.get(scope, 0)
                for scope in sorted(self.cost_by_scope.keys() | self.old_cost_by_scope.keys())}
