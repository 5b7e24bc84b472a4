"""Budget periods: calendar months in the configured time zone, as "YYYY-MM".

Key, team and business-unit budgets are monthly; the month is the calendar
month *in the configured zone* (default Asia/Kolkata), so 2026-11-30T19:00Z is
already December in Kolkata. Agent-run budgets (``run:`` scopes) are per run,
not per month: their balances live under the single pseudo-period
``RUN_PERIOD`` whatever month the calls fall in (see ``balance_period``).

The zone is always passed in; nothing here reads a clock or the settings.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

RUN_PERIOD = "run"
"""Where ``run:`` scopes keep their balance: a run's caps span its whole life."""


def period_of(at: datetime, tz: ZoneInfo) -> str:
    """The budget month ("YYYY-MM") that the aware instant ``at`` falls in, in zone ``tz``."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"period_of needs a timezone-aware datetime, got {at!r}")
    local = at.astimezone(tz)
    return f"{local.year:04d}-{local.month:02d}"


def previous_period(period: str) -> str:
    """The month before ``period``: previous_period("2026-01") == "2025-12"."""
    year, month = int(period[:4]), int(period[5:7])
    return f"{year - 1:04d}-12" if month == 1 else f"{year:04d}-{month - 1:02d}"


def balance_period(scope: str, period: str) -> str:
    """The period a scope's balance is kept under: ``RUN_PERIOD`` for runs, else the month."""
    return RUN_PERIOD if scope.startswith("run:") else period
