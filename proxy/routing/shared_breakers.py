"""Circuit breakers shared between pods: what one pod tells the others, and how they apply it. Pure.

In distributed mode a pod that opens a deployment's circuit tells the other
pods, so they skip the deployment at once instead of each paying
``min_requests`` failures to find out; a pod whose probes close it tells them
too. The transport (Redis: a key per deployment holding the current open, plus
a pub/sub message per transition) is ``breaker_sync.py``; this module holds
the decisions, with both clocks passed in:

* ``Notice``: one transition (deployment, ``open``/``closed``, pod, wall-clock
  time, for an open its wall-clock end and cooldown). Wall-clock because pods'
  monotonic clocks are unrelated; converted to this pod's breaker clock on
  arrival (``to_local``). Clock skew between machines shifts an open's end by
  the skew, which is small next to a cooldown.
* ``outgoing``: this pod's own transitions since the last call, found by
  comparing each breaker's ``changes`` counter with what was last told (the
  sync loop calls it a few times a second, never the request path).
* ``apply``: a notice from another pod into the local breaker
  (``Breaker.open_remote`` / ``close_remote``). Remote transitions do not
  count as this pod's own, so they are never told again. A remote open ends
  ``probe_grace_s`` later here than on the pod that opened it: that pod goes
  half-open first and probes; if its probe succeeds, its close reaches the
  others before their own cooldown ends (one probe for the fleet, not one per
  pod); if it fails, its new open extends theirs. Should the opener die, the
  others probe after the grace.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import orjson

from proxy.routing.breaker import CLOSED, OPEN, Breaker


@dataclass(frozen=True)
class Notice:
    deployment: str
    state: str  # "open" | "closed"
    pod: str
    at: float  # wall clock (epoch seconds) of the transition
    until: float = 0.0  # wall clock end of an open
    cooldown_s: float = 0.0

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    def ttl_ms(self) -> int:
        """How long the notice stays worth reading (an open: until it ends, plus a second)."""
        return max(int((self.until - self.at) * 1000) + 1000, 1000)


def decode(raw: bytes | str) -> Notice | None:
    """The notice, or None if the bytes are not one (another version's message, garbage)."""
    try:
        body = orjson.loads(raw)
        notice = Notice(str(body["deployment"]), str(body["state"]), str(body["pod"]), float(body["at"]),
                        float(body.get("until", 0.0)), float(body.get("cooldown_s", 0.0)))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    return notice if notice.state in (OPEN, CLOSED) else None


def to_local(wall: float, now_wall: float, now_local: float) -> float:
    """A wall-clock time on the breaker clock (``now_local`` and ``now_wall`` read together)."""
    return now_local + (wall - now_wall)


def notice_of(dep_id: str, breaker: Breaker, pod: str, now_wall: float, now_local: float) -> Notice | None:
    """The breaker's current open or closed state as a notice (None while half-open: probing is local)."""
    if breaker.state == OPEN:
        return Notice(dep_id, OPEN, pod, now_wall, now_wall + (breaker.open_until - now_local), breaker.cooldown_s)
    if breaker.state == CLOSED:
        return Notice(dep_id, CLOSED, pod, now_wall)
    return None


def outgoing(breakers: Mapping[str, Breaker], told: dict[str, int], pod: str, now_wall: float,
             now_local: float) -> list[Notice]:
    """Notices for this pod's own transitions since the last call; updates ``told`` (deployment -> changes).

    Only the state now is told: two transitions between calls (open, then a
    probe's close) are one notice. A breaker first seen closed says nothing.
    """
    out: list[Notice] = []
    for dep_id, breaker in breakers.items():
        seen = told.get(dep_id, 0)
        if breaker.changes == seen:
            continue
        told[dep_id] = breaker.changes
        notice = notice_of(dep_id, breaker, pod, now_wall, now_local)
        if notice is not None:
            out.append(notice)
    return out


def apply(breaker: Breaker, notice: Notice, pod: str, now_wall: float, now_local: float,
          probe_grace_s: float = 0.0) -> bool:
    """Apply another pod's notice to the local breaker; True if it changed. Our own notices are ignored.

    An open ends ``probe_grace_s`` after the opener's end (see the module docstring)."""
    if notice.pod == pod:
        return False
    if notice.state == OPEN:
        until = to_local(notice.until, now_wall, now_local) + probe_grace_s
        return breaker.open_remote(now_local, until, notice.cooldown_s)
    return breaker.close_remote(to_local(notice.at, now_wall, now_local))


def describe(notice: Notice) -> dict[str, Any]:
    """For logs and /health: the notice without the clock arithmetic."""
    out: dict[str, Any] = {"deployment": notice.deployment, "state": notice.state, "pod": notice.pod}
    if notice.state == OPEN:
        out["for_s"] = round(notice.until - notice.at, 3)
    return out
