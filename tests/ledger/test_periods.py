from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from ledger.periods import RUN_PERIOD, balance_period, period_of, previous_period

IST = ZoneInfo("Asia/Kolkata")


def test_month_is_the_calendar_month_in_the_configured_zone():
    assert period_of(datetime(2026, 11, 30, 19, 0, tzinfo=timezone.utc), IST) == "2026-12"
    assert period_of(datetime(2026, 11, 30, 18, 29, 59, 999999, tzinfo=timezone.utc), IST) == "2026-11"
    assert period_of(datetime(2026, 11, 30, 18, 30, tzinfo=timezone.utc), IST) == "2026-12"
    assert period_of(datetime(2026, 12, 31, 18, 30, tzinfo=timezone.utc), IST) == "2027-01"
    assert period_of(datetime(2026, 11, 30, 19, 0, tzinfo=timezone.utc), ZoneInfo("UTC")) == "2026-11"


def test_any_offset_of_the_same_instant_gives_the_same_month():
    at = datetime(2026, 12, 1, 0, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert period_of(at, IST) == "2026-12"
    assert period_of(at, ZoneInfo("America/New_York")) == "2026-11"


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="aware"):
        period_of(datetime(2026, 11, 30, 19, 0), IST)


def test_previous_period_and_run_scopes():
    assert previous_period("2026-01") == "2025-12"
    assert previous_period("2026-11") == "2026-10"
    assert balance_period("run:abc", "2026-11") == RUN_PERIOD
    assert balance_period("team:payments", "2026-11") == "2026-11"
