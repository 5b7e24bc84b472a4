"""A synthetic month of archived request events, generated column by column (never one Python object per event).

DuckDB computes each day's requests as vectors from ``range`` and ``hash``
(deterministic), pyarrow casts them to the archive's exact row
(``streams.archive.schema.SCHEMA``, with its ``farebox.archive_schema``
metadata) and writes one zstd Parquet file per UTC hour and day's batch, named
as ``streams.archive.write.ArchiveWriter`` names them. The month is October 2026 in
Kolkata (budget month ``2026-10``).

The mix, per request: 200 teams with skewed spend (team-000 most), 12
business units, 4 apps and 6 keys per team; aliases chat-default 55%
(two deployments), chat-fast 25%, chat-reasoning 10% (reasoning tokens),
embed-default 10%; 30% with cached input; 3% served after a failed first
attempt on another deployment (fallback); 1.5% failed upstream (settled 502,
cost 0); 2% settled above their hold (overrun); 1% never settled (hold expired,
charged in full); 0.5% still open. About 3.02 events per request. Money is
integer micro-INR from integer per-token prices, rounded up once.

The ``event`` column is a compact JSON of the main fields, sized like the
codec's; the size figure that counts is the real writer's (``measure``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pricing.book import FxTable, Price, PriceBook, PriceVersion
from streams.archive.manifest import Manifest, file_entry
from streams.archive.schema import SCHEMA

MONTH = "2026-10"
MONTH_START = datetime(2026, 9, 30, 18, 30, tzinfo=timezone.utc)  # 1 October, 00:00 in Kolkata
DAYS = 30
EVENTS_PER_REQUEST = 3.02

# alias, deployment, fallback deployment, provider, model, micro-INR per 1M tokens: input, cached, output
DEPLOYMENTS = """
SELECT * FROM (VALUES
  (0, 'chat-default',   'd-oai-mumbai',   'd-ant-mumbai', 'openai',    'gpt-mid',     176000000,  17600000,  880000000),
  (1, 'chat-default',   'd-ant-mumbai',   'd-oai-mumbai', 'anthropic', 'claude-mid',  264000000,  26400000, 1320000000),
  (2, 'chat-fast',      'd-oai-mini',     'd-ant-haiku',  'openai',    'gpt-mini',     13200000,   1320000,   52800000),
  (3, 'chat-reasoning', 'd-oai-reason',   'd-ant-mumbai', 'openai',    'gpt-reason',  880000000,  88000000, 3520000000),
  (4, 'embed-default',  'd-embed-mumbai', 'd-embed-hyd',  'openai',    'embed-small',   1760000,         0,          0)
) AS d(slot, alias, deployment, fallback_deployment, provider, model, p_in, p_cached, p_out)
"""

REQUESTS = """
WITH r AS (SELECT range AS i FROM range($lo, $hi)),
u AS (
    SELECT i, (hash(i, 1) % 1000003) / 1000003.0 AS u1, (hash(i, 2) % 1000003) / 1000003.0 AS u2,
           (hash(i, 3) % 1000003) / 1000003.0 AS u3, (hash(i, 4) % 1000003) / 1000003.0 AS u4,
           hash(i, 5) AS h5, hash(i, 6) AS h6, hash(i, 7) AS h7
    FROM r
), q AS (
    SELECT i, 'req-' || i AS rid, floor(200 * u1 * u1)::INT AS tn,
           CASE WHEN u2 < 0.33 THEN 0 WHEN u2 < 0.55 THEN 1 WHEN u2 < 0.80 THEN 2 WHEN u2 < 0.90 THEN 3 ELSE 4 END AS slot,
           CASE WHEN u3 < 0.005 THEN 'open' WHEN u3 < 0.015 THEN 'expired' WHEN u3 < 0.030 THEN 'failed'
                WHEN u3 < 0.060 THEN 'fallback' WHEN u3 < 0.080 THEN 'overrun' ELSE 'ok' END AS fate,
           CASE WHEN u3 >= 0.015 AND u3 < 0.030 THEN 0 ELSE 200 + h5 % 4000 END AS input,  -- failed: no usage
           CASE WHEN u4 < 0.30 THEN input // 4 ELSE 0 END AS cached, CASE WHEN input = 0 THEN 0 ELSE 20 + h6 % 800 END AS output, h7 % 5 AS app_n, h7 % 6 AS key_n, h5, h6,
           $start + to_microseconds(((i - $lo) * $span_us // ($hi - $lo) + h7 % 1000000)::BIGINT) AS t0
    FROM u
)
SELECT q.*, d.* EXCLUDE (slot), 'team-' || lpad(tn::VARCHAR, 3, '0') AS team, 'bu-' || (tn % 12) AS bu,
       'app-' || tn || '-' || app_n AS app, 'fb-prod-' || tn || '-' || key_n AS key_id,
       CASE WHEN d.alias = 'chat-reasoning' THEN output * 2 ELSE 0 END AS reasoning,
       CASE WHEN d.alias = 'embed-default' THEN 0 ELSE output END AS out_tokens,
       CASE WHEN fate = 'failed' THEN 0 ELSE
           (input * p_in + cached * p_cached + (output + reasoning) * p_out + 999999) // 1000000 END AS cost,
       CASE WHEN fate = 'overrun' THEN cost * 8 // 10 ELSE
           ((input + cached) * p_in + 1024 * 3 * p_out + 999999) // 1000000 END AS hold,
       300 + (h6 % 900) AS ttft, 1500 + (h5 % 6000) AS latency
FROM q JOIN d ON d.slot = q.slot
"""


def price_book() -> tuple[PriceBook, FxTable]:
    """Price version 1 of every deployment the month uses (INR per 1M tokens, so no FX): for the FOCUS export."""
    con = duckdb.connect()
    rows = con.execute(f"SELECT deployment, fallback_deployment, p_in, p_cached, p_out FROM ({DEPLOYMENTS})").fetchall()
    con.close()
    prices: dict[str, Price] = {}
    for deployment, _, p_in, p_cached, p_out in rows:
        prices[deployment] = Price(input=Decimal(p_in) / 1_000_000, cached_input=Decimal(p_cached) / 1_000_000,
                                   output=Decimal(p_out) / 1_000_000, currency="INR")
    for deployment, fallback, *_ in rows:  # failed first attempts cost 0 whatever their price
        prices.setdefault(fallback, prices[deployment])
    return PriceBook.of([PriceVersion(1, datetime(2026, 1, 1, tzinfo=timezone.utc), prices)]), FxTable()


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ"
    if pa.types.is_map(t):
        return "MAP(VARCHAR, VARCHAR)"
    return "STRUCT(scope VARCHAR, micro BIGINT)[]"


def _scopes(micro: str) -> str:
    return (f"[{{'scope': 'key:' || key_id, 'micro': {micro}}}, {{'scope': 'team:' || team, 'micro': {micro}}}, "
            f"{{'scope': 'bu:' || bu, 'micro': {micro}}}]")


_COMMON = {"schema": "1", "request_id": "rid", "key": "team", "team": "team", "log_partition": "0",
           "stored_at": "t0 + INTERVAL 2 SECOND", "currency": "'INR'"}
_KINDS = {  # event type -> (where, column expressions); every other column is NULL
    "admitted": ("true", {
        "type": "'request.admitted'", "schema": "2", "id": "rid || '/admitted'", "event_time": "t0",
        "log_offset": "i * 4", "key_id": "key_id", "business_unit": "bu", "app": "app", "alias": "alias",
        "data_class": "'internal'", "est_input_tokens": "input + cached", "max_output_tokens": "1024",
        "holds": _scopes("hold"), "price_version": "1", "pod": "'pod-' || (i % 3)", "stream": "i % 5 = 0"}),
    "failed_first": ("fate = 'fallback'", {
        "type": "'request.attempted'", "id": "rid || '/attempt/1'", "event_time": "t0 + INTERVAL 100 MILLISECOND",
        "log_offset": "i * 4 + 1", "attempt": "1", "deployment": "fallback_deployment", "provider": "provider",
        "account": "'acct-main'", "model": "model", "region": "'ap-south-1'", "outcome": "'unavailable'",
        "status": "503", "latency_ms": "120", "cost_micro": "0", "price_version": "1",
        "error_code": "'upstream_unavailable'", **{f"{k}_tokens": "0" for k in ("input", "cached_input", "cache_write",
                                                                                  "output", "reasoning")},
        "usage_source": "'provider'"}),
    "attempt": ("fate IN ('ok', 'overrun', 'failed', 'fallback')", {
        "type": "'request.attempted'", "id": "rid || '/attempt/' || (1 + (fate = 'fallback')::INT)",
        "event_time": "t0 + INTERVAL 200 MILLISECOND", "log_offset": "i * 4 + 2",
        "attempt": "1 + (fate = 'fallback')::INT", "deployment": "deployment", "provider": "provider",
        "account": "'acct-main'", "model": "model", "region": "'ap-south-1'",
        "outcome": "CASE WHEN fate = 'failed' THEN 'error' ELSE 'ok' END",
        "status": "CASE WHEN fate = 'failed' THEN 502 ELSE 200 END",
        "ttft_ms": "CASE WHEN fate = 'failed' THEN NULL ELSE ttft END", "latency_ms": "latency",
        "input_tokens": "input", "cached_input_tokens": "cached", "cache_write_tokens": "0",
        "output_tokens": "out_tokens", "reasoning_tokens": "reasoning", "usage_source": "'provider'",
        "cost_micro": "cost", "price_version": "1",
        "error_code": "CASE WHEN fate = 'failed' THEN 'upstream_error' END"}),
    "settled": ("fate IN ('ok', 'overrun', 'failed', 'fallback')", {
        "type": "'request.settled'", "id": "rid || '/settled'", "log_offset": "i * 4 + 3",
        "event_time": "t0 + to_microseconds((latency * 1000 + 250000)::BIGINT)",
        "status": "CASE WHEN fate = 'failed' THEN 502 ELSE 200 END", "attempts": "1 + (fate = 'fallback')::INT",
        "deployment": "deployment", "input_tokens": "input", "cached_input_tokens": "cached",
        "cache_write_tokens": "0", "output_tokens": "out_tokens", "reasoning_tokens": "reasoning",
        "usage_source": "'provider'", "cost_micro": "cost", "scope_costs": _scopes("cost"),
        "hold_released": _scopes("greatest(hold - cost, 0)"), "overrun_micro": "greatest(cost - hold, 0)",
        "cache_hit": "false", "latency_ms": "latency"}),
    "expired": ("fate = 'expired'", {
        "type": "'hold.expired'", "id": "rid || '/expired'", "event_time": "t0 + INTERVAL 900 SECOND",
        "log_offset": "i * 4 + 3", "scope_costs": _scopes("hold")}),
}


def events_sql() -> str:
    """One SELECT per event kind over ``req``, UNION ALL, every archive column in SCHEMA order."""
    parts = []
    for where, exprs in _KINDS.values():
        columns = {**_COMMON, **exprs}
        select = []
        for field in SCHEMA:
            if field.name == "event":
                select.append("json_object('type', type, 'id', id, 'time', event_time, 'request_id', request_id, "
                              "'team', team, 'alias', alias, 'deployment', deployment, 'usage', "
                              "json_object('input', input_tokens, 'output', output_tokens), 'cost_micro', "
                              "cost_micro, 'holds', holds, 'cost_by_scope', scope_costs)::VARCHAR AS event")
                continue
            expr = columns.get(field.name, "NULL")
            select.append(f"CAST({expr} AS {_duck_type(field.type)}) AS \"{field.name}\"")
        inner = ", ".join(select[:-1])
        parts.append(f"SELECT *, {select[-1]} FROM (SELECT {inner} FROM req WHERE {where})")
    return "\nUNION ALL\n".join(parts)


def generate(root: Path, events: int, *, days: int = DAYS) -> dict[str, float]:
    """Write about ``events`` events over ``days`` days under ``root``; returns requests, events, files, bytes."""
    requests = max(int(events / EVENTS_PER_REQUEST), days)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE TEMP VIEW d AS {DEPLOYMENTS}")
    sql = events_sql()
    total = files = size = 0
    manifest = Manifest(root)
    span_us = int(timedelta(days=1).total_seconds() * 1_000_000) - 1_000_000
    for day in range(days):
        lo, hi = requests * day // days, requests * (day + 1) // days
        start = MONTH_START + timedelta(days=day)
        con.execute(f"CREATE OR REPLACE TEMP TABLE req AS {REQUESTS}",
                    {"lo": lo, "hi": hi, "start": start, "span_us": span_us})
        con.execute(f"CREATE OR REPLACE TEMP TABLE ev AS SELECT * FROM ({sql}) ORDER BY log_offset")
        hours = con.execute("SELECT DISTINCT date_trunc('hour', event_time) AS h FROM ev ORDER BY h").fetchall()
        listed = []
        for (hour,) in hours:
            rows = con.sql("SELECT * FROM ev WHERE date_trunc('hour', event_time) = $h ORDER BY log_offset",
                           params={"h": hour})
            table = rows.to_arrow_table().cast(SCHEMA).replace_schema_metadata(SCHEMA.metadata)
            first, last = table.column("log_offset")[0].as_py(), table.column("log_offset")[-1].as_py()
            folder = root / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"part-0-{first:020d}-{last:020d}.parquet"
            pq.write_table(table, path, compression="zstd")
            listed.append(file_entry(manifest.relative(path), path.read_bytes(), table.num_rows))
            total += table.num_rows
            files += 1
            size += path.stat().st_size
        manifest.append("add", source="bench", files=listed)  # as the archiver lists what it wrote
    con.close()
    return {"requests": requests, "events": total, "files": files, "bytes": size}
