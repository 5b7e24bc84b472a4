"""``request.refused``: what admission saw when it refused a request on money (``fb.requests``, keyed by team).

A refused request sends nothing upstream and holds nothing, so it changes no
balance (``Ledger.apply`` ignores it); it exists so the archive records every
admission *attempt*, not only the admitted ones, and a budget what-if can
replay the refusals as well as the admissions.

It carries the request's identity (key, team, business unit, app, run,
alias), its estimates, the hold it asked for on every budget scope it touches
(the same map ``RequestAdmitted.holds`` would have carried: scopes innermost
first, the same amount on each), the price version the hold was priced at,
and why it was refused: ``error_code`` (one of ``REFUSAL_CODES``) and
``scope``, the first short scope (None for the per-request cap, which is not a
scope's). Money is integer micro-units of ``currency``. Schema 2 adds the
allocation an admission would have carried: ``cost_centre`` and the caller's
``tags`` (schema 1 is read as neither).

The id is ``{request_id}/refused/{time in epoch microseconds}``: deterministic
(a producer retry of the same event has the same id), and a client that
retries a refused ``x-request-id`` makes one event per attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import ClassVar

from ledger.envelope import freeze_scope_map, non_empty, non_negative
from ledger.errors import InvalidEvent
from ledger.request_events import RequestEvent

REFUSAL_CODES = frozenset({"budget_exhausted", "budget_reserved", "run_calls_exhausted", "request_cost_cap_exceeded"})
"""The money refusals: a scope's budget spent, a scope's budget held by requests in flight past the
request's wait, an agent run's call cap, the per-request worst-case cap."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRefused(RequestEvent):
    """Admission refused the request on money; nothing was held or sent upstream."""

    type: ClassVar[str] = "request.refused"
    schema: ClassVar[int] = 2

    key_id: str
    business_unit: str
    app: str
    run_id: str | None
    alias: str
    est_input_tokens: int
    max_output_tokens: int
    holds: Mapping[str, int]
    currency: str
    price_version: int
    pod: str
    error_code: str
    scope: str | None
    cost_centre: str | None = None  # as on request.admitted: the app's, else the team's
    tags: Mapping[str, str] = field(default_factory=dict)  # the caller's x-fb-tags

    def __post_init__(self) -> None:
        RequestEvent.__post_init__(self)
        for name in ("est_input_tokens", "max_output_tokens", "price_version"):
            non_negative(self, name, getattr(self, name))
        freeze_scope_map(self, "holds")
        if self.error_code not in REFUSAL_CODES:
            raise InvalidEvent(f"{self.type}.error_code {self.error_code!r} is not one of {sorted(REFUSAL_CODES)}")
        if self.scope is None:
            if self.error_code != "request_cost_cap_exceeded":
                raise InvalidEvent(f"{self.type}: a {self.error_code} refusal names its scope")
        else:
            non_empty(self, "scope", self.scope)
            if self.scope not in self.holds:
                raise InvalidEvent(f"{self.type}.scope {self.scope!r} is not one of the scopes in holds")
        if self.cost_centre is not None:
            non_empty(self, "cost_centre", self.cost_centre)
        for tag in self.tags:
            non_empty(self, "tags", tag)
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))

    @property
    def id(self) -> str:
        delta = self.time - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return f"{self.request_id}/refused/{micros}"
