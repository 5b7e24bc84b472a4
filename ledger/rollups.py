"""Per-minute rollups: team × key × alias × deployment × minute.

One row per closed request (settled or expired), at the minute of its
settlement (UTC): requests, tokens by type, cost, errors (final status >= 400,
or expired), and TTFT (sum and count of the attempts that reported one), so
a dashboard can add rows without reading events. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.events import Event, RequestSettled
from pricing.usage import TOKEN_TYPES

COUNTERS = ("requests", *TOKEN_TYPES, "cost_micro", "errors", "ttft_ms_sum", "ttft_count")


@dataclass(frozen=True, slots=True)
class Rollup:
    team: str
    key_id: str
    alias: str
    deployment: str
    minute: str  # "2026-10-03T10:15" UTC
    counts: dict[str, int]

    @property
    def key(self) -> str:
        return "|".join((self.team, self.key_id, self.alias, self.deployment, self.minute))


def rollup_of(state: dict[str, Any], event: Event) -> Rollup:
    """The row one closed request adds (``state`` is its open request state from ``ledger.splitting``)."""
    t = event.time
    minute = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}"
    counts = dict.fromkeys(COUNTERS, 0)
    counts["requests"] = 1
    ttfts = [ms for _, ms in state.get("ttft", [])]
    counts["ttft_ms_sum"], counts["ttft_count"] = sum(ttfts), len(ttfts)
    if isinstance(event, RequestSettled):
        for kind in TOKEN_TYPES:
            counts[kind] = getattr(event.usage, kind)
        counts["cost_micro"] = event.cost_micro
        counts["errors"] = int(event.final_status >= 400)
        deployment = event.deployment or "-"
    else:  # expired: charged in full, counted as an error
        counts["cost_micro"] = max(event.charged.values(), default=0)  # type: ignore[attr-defined]
        counts["errors"] = 1
        deployment = "-"
    return Rollup(state["team"], state["key"], state["alias"], deployment, minute, counts)


def merge(total: dict[str, int] | None, row: dict[str, int]) -> dict[str, int]:
    out = dict(total or dict.fromkeys(COUNTERS, 0))
    for name, value in row.items():
        out[name] = out.get(name, 0) + value
    return out
