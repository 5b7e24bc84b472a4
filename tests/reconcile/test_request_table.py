"""The per-request table: listed in the manifest, used only while it describes the files present, same answers."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from ledger.codec import encode
from reconcile.request_table import SUMMARY_DIR, usable_table
from reconcile.request_table_write import write_request_table
from reconcile.warehouse import Warehouse
from streams.archive.compact import compact
from streams.archive.manifest import verify
from streams.archive.write import ArchiveWriter, Record
from tests.reconcile.warehouse_fixtures import month_events, write_archive

ANSWERS = ("SELECT scope, balance_period, settled_micro, held_micro, overrun_micro, requests FROM scope_balances "
           "ORDER BY ALL", "SELECT * FROM daily_cost ORDER BY ALL", "SELECT * FROM minute_rollups ORDER BY ALL")


def _answers(root: Path, **kw: object) -> list[list[tuple]]:
    with Warehouse(root, **kw) as warehouse:  # type: ignore[arg-type]
        return [warehouse.query(sql).rows for sql in ANSWERS]


def test_the_table_is_listed_verified_and_gives_the_raw_answers(tmp_path: Path) -> None:
    events = month_events()
    root = write_archive(tmp_path / "archive", events[:-3])
    path = write_request_table(root, "Asia/Kolkata")
    assert path is not None and path.parent.name == SUMMARY_DIR
    assert verify(root).intact
    assert not list(root.glob(f"date=*/**/{SUMMARY_DIR}*"))  # outside the date= folders the views glob
    with Warehouse(root) as warehouse:
        assert warehouse.table is not None and not warehouse.table.fresh
    assert _answers(root) == _answers(root, request_table=False)
    assert usable_table(root, "UTC") is None  # computed in another budget zone: not used

    ArchiveWriter(root, "log").write([Record(0, len(events) + n, encode(e)) for n, e in enumerate(events[-3:])])
    with Warehouse(root) as warehouse:  # a newer batch: its requests are recomputed from the raw events
        assert warehouse.table is not None and len(warehouse.table.fresh) >= 1
    assert _answers(root) == _answers(root, request_table=False)

    compact(root, before=date(2027, 1, 1))  # its sources replaced: the raw events answer until it is rebuilt
    assert usable_table(root, "Asia/Kolkata") is None
    assert _answers(root) == _answers(root, request_table=False)
    assert write_request_table(root, "Asia/Kolkata") is not None
    assert len(list((root / SUMMARY_DIR).glob("*.parquet"))) == 3  # the previous table removed, in the manifest
    assert verify(root).intact

    table = usable_table(root, "Asia/Kolkata")
    assert table is not None
    data = bytearray(table.entries.read_bytes())
    data[len(data) // 2] ^= 0xFF
    table.entries.write_bytes(bytes(data))
    assert any(str(table.entries.relative_to(root)) in p and p.startswith("changed") for p in verify(root).problems)
