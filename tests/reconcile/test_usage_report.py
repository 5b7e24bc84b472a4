"""The usage report behind GET /admin/v1/usage: showback's usage rows plus TTFT, latency and cache figures, and
DuckDB's totals; an empty archive answers the same columns and no row."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from reconcile.showback import usage
from reconcile.usage_report import SHOWBACK_USAGE_COLUMNS, STATS_COLUMNS, budget_events, usage_report
from tests.reconcile.warehouse_fixtures import write_archive

DEC = (date(2026, 12, 1), date(2026, 12, 31))


def test_rows_are_showbacks_usage_plus_latency_and_cache(tmp_path: Path) -> None:
    root = write_archive(tmp_path / "archive")
    report = usage_report(root, *DEC, ["team", "alias"], tz="Asia/Kolkata")
    plain = usage(root, *DEC, ["team", "alias"], tz="Asia/Kolkata")
    assert [{k: r[k] for k in plain[0]} for r in report.rows] == plain  # showback's numbers, unchanged
    assert report.columns == ("team", "alias", *SHOWBACK_USAGE_COLUMNS, *STATS_COLUMNS)
    payments = next(r for r in report.rows if r["team"] == "payments")
    assert payments["ttft_p50_ms"] == 100 <= payments["ttft_p95_ms"]  # the TTFT of the attempt that served
    assert payments["cache_saved_micro"] == 0 and payments["cache_hits"] == 0


def test_totals_are_the_sum_of_the_rows_to_the_micro_unit(tmp_path: Path) -> None:
    root = write_archive(tmp_path / "archive")
    report = usage_report(root, *DEC, ["team", "app", "alias", "day"], tz="Asia/Kolkata")
    assert report.totals is not None and len(report.rows) >= 2
    for column in ("requests", "spend_micro", "input_tokens", "output_tokens", "fallbacks", "served"):
        assert report.totals[column] == sum(r[column] for r in report.rows), column
    assert isinstance(report.totals["spend_micro"], int) and report.totals["currency"] == "INR"
    assert report.totals["ttft_p95_ms"] == max(r["ttft_p95_ms"] for r in report.rows if r["ttft_p95_ms"] is not None)


def test_an_empty_range_and_an_empty_archive_have_the_same_header(tmp_path: Path) -> None:
    root = write_archive(tmp_path / "archive")
    quiet = usage_report(root, date(2025, 1, 1), date(2025, 1, 31), ["team"], tz="Asia/Kolkata")
    empty = usage_report(tmp_path / "nothing", date(2025, 1, 1), date(2025, 1, 31), ["team"], tz="Asia/Kolkata")
    assert quiet.rows == [] == empty.rows and quiet.totals is None is empty.totals
    assert quiet.columns == empty.columns
    assert budget_events(tmp_path / "nothing", *DEC, tz="UTC").rows == []


def test_budget_events_in_range(tmp_path: Path) -> None:
    root = write_archive(tmp_path / "archive")
    events = budget_events(root, *DEC, tz="Asia/Kolkata", limit=10)
    assert events.columns[:3] == ("at", "type", "scope")
    assert all(e["type"] in ("budget.threshold_crossed", "request.refused") for e in events.rows)


async def test_a_forged_file_never_reaches_the_usage_api_and_is_named_there_and_in_the_metric(tmp_path: Path) -> None:
    """A Parquet file dropped into the archive (a forged request) is left out of the admin usage answer, named in
    its ``archive_warnings``, and counted by ``farebox_archive_files_left_out``."""
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest

    from farebox.usage import attach_usage
    from proxy.control.admin.usage import answer
    from proxy.control.usage_port import UsageAsk
    from proxy.observe.metrics_state import PodStateCollector

    root = write_archive(tmp_path / "archive")
    state = PodStateCollector()
    registry = CollectorRegistry()
    registry.register(state)
    port = attach_usage(web.Application(), root, state=state)
    clean = await port.usage(*DEC, ["team"], "Asia/Kolkata")
    victim = sorted(root.glob("date=*/**/*.parquet"))[0]
    table = pq.read_table(victim)
    forged = table.set_column(table.schema.get_field_index("id"), "id",
                              pa.array([f"forged-{n}" for n in range(table.num_rows)]))
    pq.write_table(forged, victim.with_name("part-9-forged.parquet"))
    after = await port.usage(*DEC, ["team"], "Asia/Kolkata")
    assert after.rows == clean.rows and after.totals == clean.totals
    assert len(after.warnings) == 1 and after.warnings[0].startswith("unlisted: ") and "part-9-forged" in after.warnings[0]
    assert b"farebox_archive_files_left_out 1.0" in generate_latest(registry)
    body = answer(after, UsageAsk(*DEC, ("team",)), "Asia/Kolkata", "INR", "usage").body
    assert json.loads(body)["archive_warnings"] == list(after.warnings)
