"""Events outside a request's or a lease's life: budget threshold notices and the config audit.

``BudgetThresholdCrossed`` (``fb.scope-entries``, keyed by scope) is emitted
once per scope and period; ``ConfigPublished`` (``fb.config``) once per
snapshot version; ``ConfigRollout`` (``fb.config``) once per step of a config canary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ledger.envelope import Event, non_empty, non_negative
from ledger.errors import InvalidEvent


def _check_period(event: Event, name: str, value: object) -> None:
    """A calendar month "YYYY-MM" (the budget period, in the configured zone)."""
    ok = (
        isinstance(value, str)
        and len(value) == 7
        and value[4] == "-"
        and value[:4].isdigit()
        and value[5:].isdigit()
        and 1 <= int(value[5:]) <= 12
    )
    if not ok:
        raise InvalidEvent(f"{event.type}.{name} must be a month like 2026-10, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetThresholdCrossed(Event):
    """A scope's settled + held passed its soft threshold in ``period``: emitted once per scope and period.

    ``spent_micro`` is settled + held at the crossing, including the hold of
    ``request_id``, the request whose admission crossed it. Traffic is not
    affected; refusals at the hard limit are 429s, not events.
    """

    type: ClassVar[str] = "budget.threshold_crossed"

    request_id: str  # type: ignore[assignment]  # a field here, a property on Event
    scope: str
    period: str
    limit_micro: int
    spent_micro: int
    threshold_pct: int
    currency: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        non_empty(self, "request_id", self.request_id)
        non_empty(self, "scope", self.scope)
        _check_period(self, "period", self.period)
        non_negative(self, "limit_micro", self.limit_micro)
        non_negative(self, "spent_micro", self.spent_micro)
        pct = self.threshold_pct
        if isinstance(pct, bool) or not isinstance(pct, int) or not 1 <= pct <= 100:
            raise InvalidEvent(f"{self.type}.threshold_pct must be an int in 1..100, got {pct!r}")

    @property
    def id(self) -> str:
        return f"{self.scope}/{self.period}/soft"

    @property
    def key(self) -> str:
        return self.scope


# --- config audit (fb.config) -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigPublished(Event):
    """A config snapshot was published (audit of admin changes)."""

    type: ClassVar[str] = "config.published"

    version: int
    content_hash: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        non_negative(self, "version", self.version)
        non_empty(self, "content_hash", self.content_hash)

    @property
    def id(self) -> str:
        return f"config/{self.version}"


ROLLOUT_ACTIONS = ("start", "widen", "complete", "rollback", "pause", "resume")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRollout(Event):
    """A config canary moved (``proxy.control.rollout``): started on a candidate version, widened to a stage,
    completed, rolled back (by its thresholds or by hand), paused or resumed; ``reason`` says why."""

    type: ClassVar[str] = "config.rollout"

    rollout_id: int
    action: str  # one of ROLLOUT_ACTIONS
    stage_pct: int  # the share of requests (or 100 for a pod slice) the candidate has after this step
    version: int  # the config version the candidate is (after a rollback: the version that reverted it)
    reason: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        non_negative(self, "rollout_id", self.rollout_id)
        non_negative(self, "version", self.version)
        non_empty(self, "reason", self.reason)
        if self.action not in ROLLOUT_ACTIONS:
            raise InvalidEvent(f"{self.type}.action must be one of {', '.join(ROLLOUT_ACTIONS)}, got {self.action!r}")
        pct = self.stage_pct
        if isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct <= 100:
            raise InvalidEvent(f"{self.type}.stage_pct must be an int in 0..100, got {pct!r}")

    @property
    def id(self) -> str:
        return f"rollout/{self.rollout_id}/{self.action}/{self.stage_pct}/{self.version}"
