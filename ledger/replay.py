"""What replay compares: scope balances rebuilt from events, against the live ledger, field by field.

Pure (no clock, no I/O). ``fold`` is the embedded ledger's fold (``ledger.balances.Ledger``) over events in
order; ``balance_differences`` compares two such folds (embedded mode: the archive's against the log's);
``projection_differences`` compares balances rebuilt by the worker's fold (``ledger.splitting``) with the
projections a worker wrote (distributed mode: Redis rows as strings) for one budget period. Each names every
field that differs as one line, in scope order; no line means the two sides agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from zoneinfo import ZoneInfo

from ledger.balances import Ledger, ScopeBalance
from ledger.events import Event
from ledger.leases import ScopeLedger

FIELDS = ("settled", "held", "overrun", "requests")


def fold(events: Iterable[Event], tz: ZoneInfo) -> dict[tuple[str, str], ScopeBalance]:
    """Every (scope, balance period) of the ledger folded from ``events`` in order."""
    ledger = Ledger(tz)
    for event in events:
        ledger.apply(event)
    return ledger.balances()


def balance_differences(archive: dict[tuple[str, str], ScopeBalance], live: dict[tuple[str, str], ScopeBalance]) -> list[str]:
    """One line per field that differs, every (scope, period) of either side, in order."""
    empty = ScopeBalance()
    out = []
    for scope, period in sorted(archive.keys() | live.keys()):
        mine, theirs = archive.get((scope, period), empty), live.get((scope, period), empty)
        for name in FIELDS:
            if getattr(mine, name) != getattr(theirs, name):
                out.append(f"{scope} {period} {name}: archive {getattr(mine, name)} != live {getattr(theirs, name)}")
    return out


def projection_differences(rebuilt: dict[str, ScopeLedger], live: dict[str, dict[str, str]], period: str) -> list[str]:
    out = []
    for scope in sorted(rebuilt.keys() | live.keys()):
        state = rebuilt.get(scope)
        totals = state.periods.get(period) if state else None
        row = live.get(scope, {})
        if row and row.get("period") != period:
            row = {}
        for name in FIELDS:
            mine = getattr(totals, name) if totals else 0
            theirs = int(row.get(name, 0) or 0)
            if mine != theirs:
                out.append(f"{scope} {period} {name}: replay {mine} != live {theirs}")
    return out
