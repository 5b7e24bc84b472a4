"""The warehouse and the ledger agree on every random event stream (issue 12, "Done means").

For streams with duplicates, expiries, overruns, settlements after expiries
and out-of-order delivery, archived to Parquet in random batches (sometimes
with a compacted daily copy of the same rows):

* ``scope_balances`` (re-rating corrections included) equals the budget ledger's fold (``ledger.balances.Ledger``)
  for every scope and balance period: settled, held, overrun and requests;
* ``minute_rollups`` equals what ``ledger/rollups.py`` derives from the same
  events through the request processor's split (``ledger.splitting.split``),
  the definition distributed mode's worker uses;

and all of it again, with the same spend per month and team, once the
per-request table (``reconcile.request_table``) is built over the same files.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.balances import Ledger
from ledger.events import Event
from ledger.rollups import COUNTERS, merge
from ledger.splitting import split
from reconcile.request_table_write import write_request_table
from reconcile.warehouse import Warehouse
from tests.reconcile.warehouse_streams import IST, archive_stream, delivery

ROLLUP_SQL = f"""SELECT team, key_id, alias, deployment, minute, {', '.join(COUNTERS)}
                 FROM minute_rollups"""


def fold_balances(events: list[Event]) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    ledger = Ledger(IST)
    for event in events:
        ledger.apply(event)
    return {key: (b.settled, b.held, b.overrun, b.requests) for key, b in ledger.balances().items()}


def fold_rollups(events: list[Event]) -> dict[tuple[str, ...], dict[str, int]]:
    states: dict = {}
    totals: dict[tuple[str, ...], dict[str, int]] = {}
    for event in events:
        result = split(event, states.get(event.request_id), IST)
        if result.state is not None:
            states[event.request_id] = result.state
        if result.rollup is not None:
            r = result.rollup
            key = (r.team, r.key_id, r.alias, r.deployment, r.minute)
            totals[key] = merge(totals.get(key), r.counts)
    return totals


def warehouse_balances(warehouse: Warehouse) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    rows = warehouse.query("SELECT scope, balance_period, settled_micro, held_micro, overrun_micro, requests "
                           "FROM scope_balances").rows
    return {(scope, period): tuple(values) for scope, period, *values in rows}


def warehouse_rollups(warehouse: Warehouse) -> dict[tuple[str, ...], dict[str, int]]:
    return {tuple(row[:5]): dict(zip(COUNTERS, row[5:])) for row in warehouse.query(ROLLUP_SQL).rows}


def warehouse_spend(warehouse: Warehouse) -> list[tuple]:
    return warehouse.query("SELECT month, team, sum(cost_micro + corrected_micro) FROM requests "
                           "GROUP BY ALL ORDER BY ALL").rows


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=delivery(), batch_sizes=st.lists(st.integers(1, 12), max_size=6), compact=st.booleans(),
       table_after=st.integers(1, 4))
def test_warehouse_equals_the_ledger_fold_and_the_rollups(events: list[Event], batch_sizes: list[int],
                                                          compact: bool, table_after: int) -> None:
    """Both paths: the raw events, then the per-request table built after ``table_after`` batches (the rest,
    and any compacted copy, are files it does not cover), then the table built over every file."""
    with TemporaryDirectory() as tmp:
        archive_stream(Path(tmp), events, batch_sizes=batch_sizes, compact=compact,
                       between=(table_after, lambda: write_request_table(tmp, "Asia/Kolkata")))
        balances, rollups = fold_balances(events), fold_rollups(events)
        with Warehouse(tmp, tz="Asia/Kolkata", threads=1, request_table=False) as warehouse:
            assert warehouse.table is None
            assert warehouse_balances(warehouse) == balances
            assert warehouse_rollups(warehouse) == rollups
            spend = warehouse_spend(warehouse)
        for build in (False, True):
            if build:
                assert write_request_table(tmp, "Asia/Kolkata") is not None
            with Warehouse(tmp, tz="Asia/Kolkata", threads=1) as warehouse:
                assert warehouse.table is not None and (not build or not warehouse.table.fresh)
                assert warehouse_balances(warehouse) == balances
                assert warehouse_rollups(warehouse) == rollups
                assert warehouse_spend(warehouse) == spend
