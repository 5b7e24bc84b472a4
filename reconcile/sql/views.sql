-- farebox finance warehouse: named views over the Parquet archive (streams/archive.py, one row per event,
-- typed columns as streams/archive_schema.py defines them). Nothing here writes; every number a report shows
-- is a query over these views.
--
-- Open it with the plain DuckDB CLI, no farebox process running (from the repository root, where `make run`
-- keeps its archive in var/archive):
--
--     duckdb -cmd ".read reconcile/sql/views.sql"
--     duckdb -c ".read reconcile/sql/views.sql" -c "SELECT * FROM scope_balances"
--
-- Elsewhere, say where the archive is (and the budget time zone, if not Asia/Kolkata) before the views load:
--
--     duckdb -cmd "SET VARIABLE archive_root = '/srv/farebox/archive'" -cmd "SET VARIABLE budget_tz = 'UTC'" \
--            -cmd ".read reconcile/sql/views.sql"
--
-- (`-init` runs before `-cmd`, too early to set a variable.) Views bind again at every query, so
-- `SET VARIABLE archive_root = '...'` later in a session re-points them all. An empty archive has no files for
-- the views to bind to: loading them fails with "No files found that match the pattern".
--
-- Order and months, as the budget ledger (ledger/balances.py) defines them:
-- * log order is (log_partition, log_offset): `pos`. A request's events share one partition (keyed by team).
-- * an event id counts once: its first occurrence in log order.
-- * a request opens at its first admission; it closes at the first settlement or expiry delivered after that
--   admission. A close delivered before the admission, or after another close, changes nothing.
-- * `month` is the calendar month of the admission in budget_tz ("YYYY-MM"); a settlement is charged to the
--   month of its admission. `run:` scopes keep one balance for the whole run (balance_period 'run').
-- Money is integer micro-units of `currency`, never a float.

SET VARIABLE archive_root = coalesce(getvariable('archive_root'), 'var/archive');
SET VARIABLE budget_tz = coalesce(getvariable('budget_tz'), 'Asia/Kolkata');

-- archive_files: one row per archive file, with the archive schema version it declares (1: none declared).
-- Hourly files live under date=YYYY-MM-DD/hour=HH/, compacted daily files under date=YYYY-MM-DD/.
CREATE OR REPLACE VIEW archive_files AS
SELECT f.file_name AS file, f.num_rows, coalesce(try_cast(decode(k.value) AS INTEGER), 1) AS archive_schema
FROM parquet_file_metadata(getvariable('archive_root') || '/date=*/**/*.parquet') AS f
LEFT JOIN (
    SELECT file_name, value FROM parquet_kv_metadata(getvariable('archive_root') || '/date=*/**/*.parquet')
    WHERE decode(key) = 'farebox.archive_schema'
) AS k ON k.file_name = f.file_name;

-- archive_guard: one row, true when every file is of the schema these views read (2); otherwise the query
-- fails naming the first file that is not.
CREATE OR REPLACE VIEW archive_guard AS
SELECT coalesce(bool_and(CASE
    WHEN archive_schema = 2 THEN true
    WHEN archive_schema > 2 THEN error(file || ': archive schema ' || archive_schema
                                      || ' is newer than these views read (2); upgrade farebox to read it')
    ELSE error(file || ': archive schema ' || archive_schema
               || ' has no typed columns; archive the log again with this farebox') END), true) AS ok
FROM archive_files;

-- archive_rows: one row per archived row as written (duplicates included); pos is its place in log order.
CREATE OR REPLACE VIEW archive_rows AS
SELECT *, (log_partition::HUGEINT << 64) + log_offset AS pos
FROM read_parquet(getvariable('archive_root') || '/date=*/**/*.parquet', hive_partitioning = false)
WHERE (SELECT ok FROM archive_guard);

-- events: one row per event id: its first occurrence in log order.
CREATE OR REPLACE VIEW events AS
SELECT * FROM archive_rows
QUALIFY row_number() OVER (PARTITION BY id ORDER BY pos) = 1;

-- admissions: one row per admitted request: its first request.admitted, with its budget month and day.
CREATE OR REPLACE VIEW admissions AS
SELECT *, strftime(timezone(getvariable('budget_tz'), event_time), '%Y-%m') AS month,
       CAST(timezone(getvariable('budget_tz'), event_time) AS DATE) AS day
FROM archive_rows WHERE type = 'request.admitted'
QUALIFY row_number() OVER (PARTITION BY request_id ORDER BY pos) = 1;

-- closes: one row per closed request: the first request.settled or hold.expired after its admission, with
-- what the admission held (admitted_holds) and who it was for. cost_micro is what the request cost: the
-- settled cost, or for an expiry the largest hold it charged in full (as ledger/rollups.py counts it).
CREATE OR REPLACE VIEW closes AS
SELECT c.id, c.type, c.request_id, c.event_time, c.pos, a.pos AS admitted_pos, a.month, a.day,
       a.team, a.key_id, a.alias, a.holds AS admitted_holds,
       CASE WHEN c.type = 'request.settled' THEN c.status END AS final_status,
       c.attempts, c.deployment, c.input_tokens, c.cached_input_tokens, c.cache_write_tokens, c.output_tokens,
       c.reasoning_tokens, c.usage_source,
       CASE WHEN c.type = 'request.settled' THEN c.cost_micro
            ELSE coalesce(list_max(list_transform(c.scope_costs, lambda x: x.micro)), 0) END AS cost_micro,
       c.scope_costs, c.overrun_micro, c.cache_hit, c.latency_ms, c.currency
FROM archive_rows AS c JOIN admissions AS a ON a.request_id = c.request_id AND c.pos > a.pos
WHERE c.type IN ('request.settled', 'hold.expired')
QUALIFY row_number() OVER (PARTITION BY c.request_id ORDER BY c.pos) = 1;

-- attempts: one row per (request, attempt number): its first occurrence while the request was open (else its
-- first occurrence). while_open says whether the ledger's request state saw it (TTFT counts only those).
CREATE OR REPLACE VIEW attempts AS
SELECT t.* EXCLUDE (holds, scope_costs, hold_released, event),
       coalesce(t.pos > a.pos AND (c.pos IS NULL OR t.pos < c.pos), false) AS while_open
FROM archive_rows AS t
LEFT JOIN admissions AS a ON a.request_id = t.request_id
LEFT JOIN closes AS c ON c.request_id = t.request_id
WHERE t.type = 'request.attempted'
QUALIFY row_number() OVER (PARTITION BY t.request_id, t.attempt ORDER BY while_open DESC, t.pos) = 1;

-- requests: one row per admitted request: admission, attempts and close joined. state is open, settled or
-- expired. fallback: served (settled below 400) after more than one attempt or by a deployment other than the
-- first tried. hedge_micro and cache_saved_micro are 0 until hedging and a response cache exist.
CREATE OR REPLACE VIEW requests AS
WITH tries AS (
    SELECT request_id, count(*) AS tried, arg_min(deployment, attempt) AS first_deployment,
           coalesce(arg_max(model, attempt) FILTER (WHERE outcome = 'ok'), arg_max(model, attempt)) AS model,
           coalesce(arg_max(provider, attempt) FILTER (WHERE outcome = 'ok'), arg_max(provider, attempt)) AS provider,
           coalesce(arg_max(account, attempt) FILTER (WHERE outcome = 'ok'), arg_max(account, attempt)) AS account,
           coalesce(arg_max(region, attempt) FILTER (WHERE outcome = 'ok'), arg_max(region, attempt)) AS region,
           arg_max(ttft_ms, attempt) FILTER (WHERE outcome = 'ok') AS ttft_ms,
           coalesce(sum(ttft_ms) FILTER (WHERE while_open), 0) AS ttft_ms_sum,
           count(ttft_ms) FILTER (WHERE while_open) AS ttft_count
    FROM attempts GROUP BY request_id
)
SELECT a.request_id, a.month, a.day, a.event_time AS admitted_at, a.team, a.business_unit, a.app, a.key_id,
       a.run_id, a.cost_centre, a.tags, a.alias, a.data_class, a.pod, a.stream, a.price_version,
       a.est_input_tokens, a.max_output_tokens, a.holds,
       CASE c.type WHEN 'request.settled' THEN 'settled' WHEN 'hold.expired' THEN 'expired' ELSE 'open' END AS state,
       c.event_time AS closed_at, c.final_status, coalesce(c.attempts, t.tried, 0) AS attempts,
       t.first_deployment, c.deployment, t.model, t.provider, t.account, t.region,
       coalesce(c.input_tokens, 0) AS input_tokens, coalesce(c.cached_input_tokens, 0) AS cached_input_tokens,
       coalesce(c.cache_write_tokens, 0) AS cache_write_tokens, coalesce(c.output_tokens, 0) AS output_tokens,
       coalesce(c.reasoning_tokens, 0) AS reasoning_tokens, c.usage_source,
       coalesce(c.cost_micro, 0) AS cost_micro, c.scope_costs, coalesce(c.overrun_micro, 0) AS overrun_micro,
       coalesce(c.type = 'request.settled' AND c.final_status < 400, false) AS served,
       coalesce(c.type = 'request.settled' AND c.final_status < 400
                AND (c.attempts > 1 OR c.deployment IS DISTINCT FROM t.first_deployment), false) AS fallback,
       0::BIGINT AS hedge_micro, coalesce(c.cache_hit, false) AS cache_hit, 0::BIGINT AS cache_saved_micro,
       c.latency_ms, t.ttft_ms, coalesce(t.ttft_ms_sum, 0) AS ttft_ms_sum, coalesce(t.ttft_count, 0) AS ttft_count,
       a.currency
FROM admissions AS a
LEFT JOIN closes AS c ON c.request_id = a.request_id
LEFT JOIN tries AS t ON t.request_id = a.request_id;

-- ledger_entries: one row per (request, scope) movement of the budget ledger: a 'hold' at admission, then a
-- 'settlement' or an 'expiry' that releases the hold, charges the cost and records any overrun (charge above
-- the hold: estimator error, never hidden). month is the admission's; balance_period is 'run' for run: scopes.
CREATE OR REPLACE VIEW ledger_entries AS
WITH released AS (
    SELECT request_id, u.h.scope AS scope, u.h.micro AS micro FROM closes, unnest(admitted_holds) AS u(h)
), charged AS (
    SELECT request_id, u.c.scope AS scope, u.c.micro AS micro FROM closes, unnest(scope_costs) AS u(c)
), moved AS (
    SELECT coalesce(r.request_id, c.request_id) AS request_id, coalesce(r.scope, c.scope) AS scope,
           coalesce(r.micro, 0)::BIGINT AS released_micro, coalesce(c.micro, 0)::BIGINT AS charged_micro
    FROM released AS r FULL JOIN charged AS c ON c.request_id = r.request_id AND c.scope = r.scope
)
SELECT 'hold' AS entry, a.id AS event_id, a.request_id, u.h.scope AS scope, a.month,
       CASE WHEN u.h.scope LIKE 'run:%' THEN 'run' ELSE a.month END AS balance_period, a.event_time AS at,
       a.team, u.h.micro::BIGINT AS hold_micro, 0::BIGINT AS released_micro, 0::BIGINT AS charged_micro,
       0::BIGINT AS overrun_micro, a.currency
FROM admissions AS a, unnest(a.holds) AS u(h)
UNION ALL
SELECT CASE c.type WHEN 'request.settled' THEN 'settlement' ELSE 'expiry' END, c.id, m.request_id, m.scope,
       c.month, CASE WHEN m.scope LIKE 'run:%' THEN 'run' ELSE c.month END, c.event_time, c.team, 0,
       m.released_micro, m.charged_micro, greatest(m.charged_micro - m.released_micro, 0), c.currency
FROM moved AS m JOIN closes AS c ON c.request_id = m.request_id;

-- scope_balances: one row per (scope, balance period): settled, held, overrun and admitted requests, as the
-- budget ledger's fold (ledger.balances.Ledger) and GET /admin/v1/budgets/{scope} report them.
CREATE OR REPLACE VIEW scope_balances AS
SELECT scope, balance_period, sum(charged_micro)::BIGINT AS settled_micro,
       (sum(hold_micro) - sum(released_micro))::BIGINT AS held_micro, sum(overrun_micro)::BIGINT AS overrun_micro,
       count(*) FILTER (WHERE entry = 'hold') AS requests, any_value(currency) AS currency
FROM ledger_entries GROUP BY scope, balance_period;

-- minute_rollups: one row per team x key x alias x deployment x minute (UTC, of the close), the same counts as
-- ledger/rollups.py derives from the same events: every closed request once; tokens and cost of settlements;
-- an expiry counts as an error with deployment '-'; TTFT of the attempts seen while the request was open.
CREATE OR REPLACE VIEW minute_rollups AS
SELECT c.team, c.key_id, c.alias,
       CASE WHEN c.type = 'request.settled' THEN coalesce(c.deployment, '-') ELSE '-' END AS deployment,
       strftime(timezone('UTC', c.event_time), '%Y-%m-%dT%H:%M') AS minute,
       count(*) AS requests,
       sum(coalesce(c.input_tokens, 0))::BIGINT AS input, sum(coalesce(c.cached_input_tokens, 0))::BIGINT AS cached_input,
       sum(coalesce(c.cache_write_tokens, 0))::BIGINT AS cache_write, sum(coalesce(c.output_tokens, 0))::BIGINT AS output,
       sum(coalesce(c.reasoning_tokens, 0))::BIGINT AS reasoning, sum(c.cost_micro)::BIGINT AS cost_micro,
       count(*) FILTER (WHERE c.type = 'hold.expired' OR c.final_status >= 400) AS errors,
       sum(coalesce(r.ttft_ms_sum, 0))::BIGINT AS ttft_ms_sum, sum(coalesce(r.ttft_count, 0))::BIGINT AS ttft_count
FROM closes AS c JOIN requests AS r ON r.request_id = c.request_id
GROUP BY ALL;

-- daily_cost: one row per admission day (budget_tz) x team x app x alias x deployment x model: requests,
-- tokens and cost, so a month's days add up to its showback.
CREATE OR REPLACE VIEW daily_cost AS
SELECT day, month, team, business_unit, app, cost_centre, alias, deployment, provider, model, currency,
       count(*) AS requests, count(*) FILTER (WHERE state <> 'open') AS closed,
       sum(input_tokens)::BIGINT AS input_tokens, sum(cached_input_tokens)::BIGINT AS cached_input_tokens,
       sum(cache_write_tokens)::BIGINT AS cache_write_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       sum(reasoning_tokens)::BIGINT AS reasoning_tokens, sum(cost_micro)::BIGINT AS cost_micro
FROM requests GROUP BY ALL;
