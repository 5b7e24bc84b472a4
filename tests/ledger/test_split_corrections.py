"""Re-rating corrections in the distributed ledger's pure split: the same money as the embedded fold."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_builders import IST, T0, correct
from test_ledger_properties import Run, ops

from ledger.retention import ClosedRequests, forget_due
from ledger.scope_entries import ScopeEntry
from ledger.scope_ledger import ScopeLedger
from ledger.splitting import rebuild_balances, split

TEAM, KEY = "team:payments", "key:k1"


def _money(ledgers: dict[str, ScopeLedger]) -> dict[tuple[str, str], tuple[int, int, int, int, int]]:
    return {(scope, p): (t.settled, t.held, t.overrun, t.requests, t.corrected)
            for scope, ledger in ledgers.items() for p, t in ledger.periods.items()}


@settings(max_examples=150, deadline=None)
@given(ops, st.randoms(use_true_random=False))
def test_split_folds_corrections_like_the_embedded_ledger(operations, rnd):
    run = Run()
    for op in operations:
        run.step(op)
    embedded = {key: (b.settled, b.held, b.overrun, b.requests, b.corrected)
                for key, b in run.ledger.balances().items()}
    assert _money(rebuild_balances(run.log, IST)) == embedded
    # out of order (a correction read before its settlement) and twice: the same money
    log = [e for e in run.log if e.type != "rating.corrected"]
    for fix in [e for e in run.log if e.type == "rating.corrected"]:
        start = next(i for i, e in enumerate(log) if e.id == f"{fix.request_id}/admitted") + 1
        log.insert(rnd.randint(start, len(log)), fix)
        log.insert(rnd.randint(start, len(log)), fix)
    assert _money(rebuild_balances(log, IST)) == embedded


def test_a_correction_of_a_forgotten_request_applies_once_and_is_remembered_past_it():
    fix = correct("r1", {TEAM: 900, KEY: 900}, {TEAM: 90, KEY: 90}, admitted_at=T0, at=T0 + timedelta(days=20))
    first = split(fix, None, IST, "0", 41)  # the request's state went with retention long ago
    assert [(e.kind, e.scope, e.period, e.charge) for e in first.entries] == [
        ("correct", KEY, "2026-10", -810), ("correct", TEAM, "2026-10", -810)]
    assert first.state == {"s": "closed", "at": "2026-10-23T10:00:00.000000Z", "fix": [1], "src": "0"}
    assert split(fix, first.state, IST, "0", 97).entries == []  # a second --apply: nothing
    # retention counts from the correction: indexed under the admission it is kept, not deleted
    table = {"r1": first.state}
    index = ClosedRequests(retention_s=3600)
    index.closed("r1", T0.timestamp())
    index.observe((T0 + timedelta(days=1)).timestamp(), (T0 + timedelta(days=30)).timestamp())
    assert forget_due(table, index, "0", 10) == 0 and "r1" in table


def test_a_scope_ledger_applies_a_correct_entry_once():
    ledger = ScopeLedger(TEAM)
    entry = ScopeEntry("correct", TEAM, "r1/rerate/1", "r1", "2026-10", 0, -810, None, T0, "0", 5)
    assert ledger.apply_entry(entry) and not ledger.apply_entry(entry)
    assert (ledger.periods["2026-10"].settled, ledger.periods["2026-10"].corrected) == (-810, -810)
    assert ScopeEntry.from_row(TEAM, entry.to_row()) == entry
    assert ScopeLedger.from_dict(ledger.to_dict()) == ledger
