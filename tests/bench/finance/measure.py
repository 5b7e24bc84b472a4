"""The finance bench's measurements: archive throughput, showback time, FOCUS export time, sizes.

* Archive throughput goes through the real ``streams.archive.write.ArchiveWriter``
  (decode, typed row, zstd Parquet, fsync, rename) on a realistic subset of
  real events, in batches of 5,000 as ``archive_from_log`` writes them, median
  of 3: checked (every record validated by ``ledger.codec``, as the Kafka
  archiver does) and trusted (the embedded log's path). Encoding the events is
  not timed: the log already holds bytes.
* The per-request table compaction writes (``reconcile.request_table``) is
  built once for the month (one run; kept with the month).
* Showback is ``reconcile.showback.showback`` over the synthetic month through
  the views, opened fresh (cold) and again (warm), medians of 3, by team, and
  once by a wider grouping; optionally once cold over the raw events.
* FOCUS export calls ``reconcile.focus.export.export_focus`` when this build has it
  (another change brings it); its signature is matched by parameter name.
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ledger.codec import encode
from ledger.events import Event, HoldExpired, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from reconcile.request_table import usable_table
from reconcile.request_table_write import write_request_table
from reconcile.showback import showback
from reconcile.warehouse import Warehouse
from streams.archive.config import ArchiveSettings
from streams.archive.pool import DecodePool
from streams.archive.write import ArchiveWriter, Record, archive_from_log
from streams.sqlite_log import SqliteEventLog

ALIASES = (("chat-default", "d-oai-mumbai", "gpt-mid"), ("chat-default", "d-ant-mumbai", "claude-mid"),
           ("chat-fast", "d-oai-mini", "gpt-mini"), ("chat-reasoning", "d-oai-reason", "gpt-reason"),
           ("embed-default", "d-embed-mumbai", "embed-small"))
T0 = datetime(2026, 10, 14, 4, 0, tzinfo=timezone.utc)


def real_events(requests: int) -> list[Event]:
    """Request lives as the gateway logs them (admitted, attempts, settled; 1% expired), the bench's mix."""
    out: list[Event] = []
    for i in range(requests):
        tn = (i * 7919) % 200
        team, key = f"team-{tn:03d}", f"fb-prod-{tn}-{i % 6}"
        alias, deployment, model = ALIASES[i % len(ALIASES)]
        at = T0 + timedelta(milliseconds=3 * i)
        rid = f"bench-{i}"
        usage = TokenUsage(input=200 + (i * 37) % 4000, cached_input=(i % 3 == 0) * 300, output=20 + (i * 13) % 800,
                           reasoning=(alias == "chat-reasoning") * 400)
        cost = 1_000 + (i * 97) % 400_000
        hold = cost * (8 if i % 50 == 0 else 15) // 10
        scopes = {f"key:{key}": hold, f"team:{team}": hold, f"bu:bu-{tn % 12}": hold}
        out.append(RequestAdmitted(
            time=at, request_id=rid, team=team, key_id=key, business_unit=f"bu-{tn % 12}", app=f"app-{tn}-{i % 5}",
            run_id=None, alias=alias, data_class="internal", est_input_tokens=usage.input, max_output_tokens=1024,
            holds=scopes, currency="INR", price_version=1, pod=f"pod-{i % 3}", hold_ttl_s=900, stream=i % 5 == 0))
        if i % 100 == 0:
            out.append(HoldExpired(time=at + timedelta(seconds=900), request_id=rid, team=team, charged=scopes,
                                   currency="INR"))
            continue
        out.append(RequestAttempted(
            time=at + timedelta(milliseconds=200), request_id=rid, team=team, attempt=1, deployment=deployment,
            provider=deployment.split("-")[1], account="acct-main", model=model, region="ap-south-1", outcome="ok",
            status=200, ttft_ms=300 + i % 900, latency_ms=1_500 + i % 6_000, usage=usage, cost_micro=cost,
            currency="INR", price_version=1, error_code=None))
        out.append(RequestSettled(
            time=at + timedelta(seconds=2), request_id=rid, team=team, final_status=200, attempts=1,
            deployment=deployment, usage=usage, cost_micro=cost, currency="INR",
            cost_by_scope={s: cost for s in scopes}, hold_released={s: max(hold - cost, 0) for s in scopes},
            overrun_micro=max(cost - hold, 0), cache_hit=False, latency_ms=1_500 + i % 6_000))
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def archive_throughput(root: Path, events: int, batch: int = 5_000, runs: int = 3) -> dict[str, Any]:
    """Events/s through ``ArchiveWriter.write`` for about ``events`` real events, median of ``runs``: checked
    (each record decoded by ``ledger.codec``, the Kafka archiver's path) and trusted (the embedded log's path,
    records only our encoder wrote), in the writer's process; ``archive_from_log`` over an SQLite log (what
    ``farebox serve``'s archiver child runs: the log read, the state file written), alone and with a pool (as
    it decodes a backlog); and checked with a ``DecodePool`` of one process per core, as ``farebox archiver``
    runs by default (the pool started once, before the runs, as the long-running archiver starts it; its
    start is reported). Bytes per million."""
    evs = real_events(max(events // 3, 1))
    records = [Record(0, n + 1, encode(e)) for n, e in enumerate(evs)]
    out: dict[str, Any] = {"events": len(records), "runs": runs}

    def rate(label: str, trusted: bool, pool: DecodePool | None) -> int:
        rates = []
        for run in range(runs):
            folder = root / f"{label}-{run}"
            writer = ArchiveWriter(folder, "bench", pool)
            batches = [records[at:at + batch] for at in range(0, len(records), batch)]
            started = time.perf_counter()
            decoded = writer.decode(batches[0], trusted=trusted)
            for k, records_k in enumerate(batches):  # as the Kafka archiver does with a backlog: the next batch
                ahead = writer.decode(batches[k + 1], trusted=trusted) if k + 1 < len(batches) else None
                writer.write(records_k, trusted=trusted, decoded=decoded)  # decoded while this one is written
                decoded = ahead
            rates.append(len(records) / (time.perf_counter() - started))
        return round(statistics.median(rates))

    out["checked_events_per_s"] = rate("checked", False, None)
    out["trusted_events_per_s"] = rate("trusted", True, None)
    out["embedded_events_per_s"] = asyncio.run(embedded_rate(root, evs, runs, None))
    processes = ArchiveSettings().decoders()
    out["decode_processes"] = processes
    if processes:
        with DecodePool(processes) as pool:
            out["pool_start_s"] = round(pool.start(), 2)
            out["pooled_events_per_s"] = rate("pooled", False, pool)
            out["embedded_backlog_events_per_s"] = asyncio.run(embedded_rate(root, evs, runs, pool))
    else:
        out["pool_start_s"] = None
        out["pooled_events_per_s"] = out["checked_events_per_s"]
        out["embedded_backlog_events_per_s"] = out["embedded_events_per_s"]
    size = sum(p.stat().st_size for p in (root / "checked-0").glob("date=*/**/*.parquet"))
    out["events_per_s"] = out["pooled_events_per_s"]  # ``farebox archiver`` as it runs by default
    out["mb_per_million_events"] = round(size / len(records), 3)
    return out


async def embedded_rate(root: Path, events: list[Event], runs: int, pool: DecodePool | None) -> int:
    """Events/s of ``archive_from_log`` (``farebox serve``'s archiver child: read, and with a ``pool`` decode the
    next batch while one is written) over an SQLite log holding ``events``, median of ``runs`` (the log written
    once, untimed)."""
    path = root / "log" / "events.sqlite"
    if not path.exists():
        log = SqliteEventLog.open(path)
        for event in events:
            log.append(event)
        await log.close()
    rates = []
    for _ in range(runs):
        reader = SqliteEventLog.open(path, readonly=True)
        try:
            started = time.perf_counter()
            archived = await archive_from_log(reader, root / f"embedded-{time.monotonic_ns()}", pool=pool)
            rates.append(archived / (time.perf_counter() - started))
        finally:
            await reader.close()
    return round(statistics.median(rates))


def request_table(root: Path, tz: str = "Asia/Kolkata") -> dict[str, Any]:
    """Build the per-request table compaction writes (one run), unless one covering every file is there."""
    table = usable_table(root, tz)
    if table is not None and not table.fresh:
        return {"built": False, "mb": round(table.requests.stat().st_size / 1e6, 1)}
    started = time.perf_counter()
    path = write_request_table(root, tz)
    return {"built": True, "seconds": round(time.perf_counter() - started, 1),
            "mb": round(path.stat().st_size / 1e6, 1) if path else None}


def showback_times(root: Path, month: str, runs: int = 3, raw_cold: bool = False) -> dict[str, Any]:
    """Seconds to run the month's showback by team: cold (a fresh warehouse each time) and warm (again in the
    same one), medians of ``runs``, through the per-request table when it covers the archive; once by
    team,app,alias,model; and, with ``raw_cold``, once cold over the raw events (slow at 10M events)."""
    out: dict[str, Any] = {"runs": runs}
    opens, colds, warms = [], [], []
    for _ in range(runs):
        started = time.perf_counter()
        with Warehouse(root) as warehouse:
            opens.append(time.perf_counter() - started)
            out["request_table"] = warehouse.table is not None
            started = time.perf_counter()
            result = showback(warehouse, month, ["team"])
            colds.append(time.perf_counter() - started)
            started = time.perf_counter()
            showback(warehouse, month, ["team"])
            warms.append(time.perf_counter() - started)
    out["open_s"], out["by_team_cold_s"], out["by_team_warm_s"] = _median(opens), _median(colds), _median(warms)
    out["by_team_rows"] = len(result.rows)
    with Warehouse(root) as warehouse:
        started = time.perf_counter()
        wide = showback(warehouse, month, ["team", "app", "alias", "model"])
        out["by_team_app_alias_model_s"] = round(time.perf_counter() - started, 3)
        out["by_team_app_alias_model_rows"] = len(wide.rows)
        totals = warehouse.query("SELECT count(*), sum(cost_micro) FROM requests WHERE month = $m", {"m": month}).rows
        daily = warehouse.query("SELECT sum(requests), sum(cost_micro) FROM daily_cost WHERE month = $m",
                                {"m": month}).rows
        balances = warehouse.query("SELECT sum(settled_micro) FROM scope_balances WHERE scope LIKE 'team:%' "
                                   "AND balance_period = $m", {"m": month}).rows
        out["requests"], out["spend_micro"] = totals[0]
        out["daily_cost_agrees"] = tuple(daily[0]) == tuple(totals[0])
    if raw_cold:
        started = time.perf_counter()
        with Warehouse(root, request_table=False) as warehouse:
            showback(warehouse, month, ["team"])
            raw_balances = warehouse.query("SELECT sum(settled_micro) FROM scope_balances WHERE scope LIKE 'team:%' "
                                           "AND balance_period = $m", {"m": month}).rows
        out["raw_cold_s"] = round(time.perf_counter() - started, 3)
        out["raw_agrees"] = raw_balances == balances
    return out


def focus_export_time(root: Path, month: str, out_dir: Path, book: Any, fx: Any) -> dict[str, Any]:
    """Seconds for ``reconcile.focus.export.export_focus`` on the month (UTC), or why it was not measured."""
    try:
        from reconcile.focus.export import export_focus  # type: ignore[import-not-found]
    except ImportError as exc:
        return {"measured": False, "why": f"reconcile.focus.export.export_focus is not in this build ({exc})"}
    out = out_dir / "focus.parquet"
    values = {"root": root, "archive": root, "archive_root": root, "month": month, "tz": "Asia/Kolkata",
              "book": book, "fx": fx, "currency": "INR", "out": out, "path": out, "dest": out}
    kwargs, missing = {}, []
    for name, param in inspect.signature(export_focus).parameters.items():
        if name in values:
            kwargs[name] = values[name]
        elif param.default is inspect.Parameter.empty and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            missing.append(name)
    if missing:
        return {"measured": False, "why": f"export_focus needs {', '.join(missing)}, which the bench cannot supply"}
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        export_focus(**kwargs)
    except Exception as exc:  # noqa: BLE001 - another change's code: report, do not stop the bench
        return {"measured": False, "why": f"export_focus failed: {type(exc).__name__}: {exc}"}
    return {"measured": True, "seconds": round(time.perf_counter() - started, 3),
            "mb": round(out.stat().st_size / 1e6, 1) if out.exists() else None}
