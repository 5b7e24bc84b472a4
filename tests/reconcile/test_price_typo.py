"""The price-typo story, end to end through a real gateway and simulator.

1. price version 2 has sim-openai-mumbai's output price 10x too high;
2. traffic runs (the gateway prices it at version 2);
3. version 3 fixes the price;
4. ``farebox rerate --price-version 3 --apply`` (while the gateway keeps serving and writing the same log);
5. the ledger folded from the log and the FOCUS Correction rows are right to the micro-unit, and a second
   ``--apply`` appends nothing.
"""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import openai
import pytest

from farebox.cli import main
from farebox.config_reader import read_snapshot
from farebox.settings import load_settings
from ledger.balances import Ledger
from ledger.events import RatingCorrected, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.notices import ConfigPublished
from ledger.periods import period_of
from pricing.rating import rate
from streams.archive.manifest import file_lock
from streams.archive.write import archive_from_log
from streams.checkpoints import CheckpointStore
from streams.sqlite_log import SqliteEventLog
from tests.harness import ROOT, read_events, running_stack
from tests.reconcile.rerate_fixtures import TYPO, price_spec

pytestmark = pytest.mark.e2e


def _publish(config: Path, spec: str) -> None:
    subprocess.run([sys.executable, "-m", "farebox", "prices", "add", "--config", str(config), "--spec", spec,
                    "--allow-large-change"], cwd=ROOT, check=True, capture_output=True)


def _archive(state: Path, log_path: Path) -> None:
    async def run() -> None:
        log = SqliteEventLog.open(log_path, readonly=True)
        try:
            with file_lock(state / "archive" / "_state" / "log.lock"):  # the serving gateway archives too
                await archive_from_log(log, state / "archive")
        finally:
            await log.close()

    asyncio.run(run())


def _wait_settled_on_version(log_path: Path, version: int, timeout: float = 30) -> None:
    """Until the serving gateway has recorded ``config.published`` for config ``version`` (it polls the
    config database, so that event lands a poll after the CLI's change) and every admitted request is
    settled: from then on only the CLI appends to the log."""
    deadline = time.monotonic() + timeout
    while True:
        events = read_events(log_path)
        live = any(isinstance(e, ConfigPublished) and e.version == version for e in events)
        open_ = {e.request_id for e in events if isinstance(e, RequestAdmitted)} - \
            {e.request_id for e in events if isinstance(e, RequestSettled)}
        if live and not open_:
            return
        assert time.monotonic() < deadline, f"version {version} live: {live}; requests not settled: {open_}"
        time.sleep(0.1)


def _rerate(config: Path, day: str, *extra: str) -> int:
    return main(["rerate", "--config", str(config), "--from", day, "--to", day, "--price-version", "3", *extra])


def test_a_price_typo_is_fixed_by_rerating_to_the_micro_unit(tmp_path, capsys):
    with running_stack(tmp_path / "stack", aliases="chat-openai,chat-anthropic") as stack:
        settings = load_settings(stack.config)
        v1 = read_snapshot(settings).price_book.latest
        assert v1.version == 1
        _publish(stack.config, price_spec(v1.prices, 10))  # version 2: the typo
        client = openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0)
        versions = []
        deadline = time.monotonic() + 15
        while versions.count(2) < 12 and time.monotonic() < deadline:
            for model in ("chat-openai", "chat-anthropic"):
                resp = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                      extra_headers={"x-sim-output-tokens": "317"})
                versions.append(resp.model_extra["x_farebox"]["price_version"])
        assert versions.count(2) >= 12, versions
        _publish(stack.config, price_spec(v1.prices, 1))  # version 3: the fix

        state, log_path = settings.state_dir, stack.events_path
        _wait_settled_on_version(log_path, read_snapshot(settings).version)
        _archive(state, log_path)
        day = datetime.now(timezone.utc).date().isoformat()
        before = len(read_events(log_path))

        assert _rerate(stack.config, day) == 0  # the dry run appends nothing
        dry = capsys.readouterr()
        assert "dry run" in dry.err and TYPO in dry.out
        assert len(read_events(log_path)) == before

        assert _rerate(stack.config, day, "--apply", "--format", "json") == 0
        report = json.loads(capsys.readouterr().out)
        events = read_events(log_path)
        fixes = [e for e in events if isinstance(e, RatingCorrected)]
        assert fixes and len(events) == before + len(fixes)

        # a second --apply (archive not caught up yet, then caught up) appends nothing
        assert _rerate(stack.config, day, "--apply") == 0
        assert "nothing to append" in capsys.readouterr().err
        _archive(state, log_path)
        assert _rerate(stack.config, day, "--apply") == 0
        assert len(read_events(log_path)) == len(events)

    # the corrections: every typo'd attempt re-priced at version 3 (== version 1's prices), nothing else
    snapshot = read_snapshot(settings)
    v3 = snapshot.price_book.get(3)
    attempts = [e for e in events if isinstance(e, RequestAttempted)]
    expected: dict[str, int] = {}
    for a in attempts:
        price = v3.price(a.deployment)
        expected[a.request_id] = expected.get(a.request_id, 0) + rate(
            a.usage, price, snapshot.fx.rate(price.currency, snapshot.currency, a.time))
    typo = {a.request_id for a in attempts if a.price_version == 2 and a.deployment == TYPO}
    assert {f.request_id for f in fixes} == typo
    for fix in fixes:
        assert (fix.old_price_version, fix.price_version, fix.cost_micro) == (2, 3, expected[fix.request_id])
        assert fix.old_cost_micro > 9 * fix.cost_micro  # the output price was 10x
    assert sum(r["diff_micro"] for r in report) == sum(f.cost_micro - f.old_cost_micro for f in fixes) < 0

    # the ledger folded from the log: every settled request costs its version-3 price
    tz = ZoneInfo(snapshot.budgets.timezone)
    ledger = Ledger(tz)
    for event in events:
        ledger.apply(event)
    settled = {e.request_id: e for e in events if isinstance(e, RequestSettled)}
    admitted = {e.request_id: e for e in events if isinstance(e, RequestAdmitted)}
    period = period_of(next(iter(admitted.values())).time, tz)
    balance = ledger.balance("team:platform", period)
    assert balance.settled == sum(expected[rid] if rid in typo else s.cost_micro for rid, s in settled.items())
    assert balance.corrected == sum(f.cost_micro - f.old_cost_micro for f in fixes)
    # the gateway, serving while the CLI appended, folded them too: its checkpoint at shutdown agrees
    store = CheckpointStore(f"{log_path}.checkpoints")
    try:
        offset, blob = asyncio.run(store.latest())
    finally:
        store.close()
    assert offset == len(events)
    assert Ledger.from_bytes(blob).balance("team:platform", period) == balance

    # FOCUS: the corrections bill in the first open month after the charge, reversal + corrected rows
    charge_month = datetime.fromisoformat(day).date().replace(day=1)
    billing = (charge_month.replace(day=28) + (datetime(2000, 1, 5) - datetime(2000, 1, 1))).replace(day=1)
    out = tmp_path / "focus.csv"
    assert main(["export", "focus", "--config", str(stack.config), "--month", billing.strftime("%Y-%m"),
                 "--out", str(out)]) == 0
    with open(out, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["ChargeClass"] == "Correction"]
    net = sum(Decimal(r["BilledCost"]) for r in rows) * 1_000_000
    assert net == sum(f.cost_micro - f.old_cost_micro for f in fixes)
    reversal = -sum(Decimal(r["BilledCost"]) for r in rows if Decimal(r["BilledCost"]) < 0) * 1_000_000
    assert reversal == sum(f.old_cost_micro for f in fixes)  # exactly what the typo'd usage rows billed
