-- farebox finance warehouse: named views over the Parquet archive (streams/archive/__init__.py, one row per event,
-- typed columns as streams/archive/schema.py defines them). Nothing here writes; every number a report shows
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
-- `SET VARIABLE archive_root = '...'` later in a session re-points them all. The plain CLI reads every file
-- under the archive's date folders; farebox (`farebox finance sql|shell`, reports, the admin API) sets
-- `archive_paths` to the list of files the manifest vouches for instead (streams/archive/vouch.py), so a file
-- dropped in or rewritten is never read there. An empty archive has no files for
-- the views to bind to: loading them fails with "No files found that match the pattern".
--
-- Order and months, as the budget ledger (ledger/balances.py) defines them:
-- * log order is (log_partition, log_offset): `pos`. A request's events share one partition (keyed by team).
-- * an event id counts once: its first occurrence in log order.
-- * a request opens at its first admission; it closes at the first settlement or expiry delivered after that
--   admission. A close delivered before the admission, or after another close, changes nothing. An expired
--   request settled later stays charged in full.
-- * `month` is the calendar month of the admission in budget_tz ("YYYY-MM"); a settlement is charged to the
--   month of its admission. `run:` scopes keep one balance for the whole run (balance_period 'run').
-- Money is integer micro-units of `currency`, never a float.

SET VARIABLE archive_root = coalesce(getvariable('archive_root'), 'var/archive');
SET VARIABLE budget_tz = coalesce(getvariable('budget_tz'), 'Asia/Kolkata');

-- archive_files: one row per archive file, with the archive schema version it declares (1: none declared).
-- Hourly files live under date=YYYY-MM-DD/hour=HH/, compacted daily files under date=YYYY-MM-DD/. (Every file
-- pyarrow writes has key-value metadata, so the files are those parquet_kv_metadata lists.)
CREATE OR REPLACE VIEW archive_files AS
SELECT file_name AS file,
       coalesce(max(try_cast(decode(value) AS INTEGER)) FILTER (WHERE decode(key) = 'farebox.archive_schema'), 1)
           AS archive_schema
FROM parquet_kv_metadata(coalesce(getvariable('archive_paths'), [getvariable('archive_root') || '/date=*/**/*.parquet']))
GROUP BY file_name;

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

-- archive_scan: one row per archived row as written (duplicates included), unchecked; pos is its place in log
-- order. Read archive_rows instead: the same rows behind archive_guard.
CREATE OR REPLACE VIEW archive_scan AS
SELECT *, (log_partition::HUGEINT << 64) + log_offset AS pos
FROM read_parquet(coalesce(getvariable('archive_paths'), [getvariable('archive_root') || '/date=*/**/*.parquet']),
                  hive_partitioning = false);

-- archive_rows: archive_scan, once archive_guard passes (farebox's Warehouse checks the guard once when it
-- opens and then reads archive_scan directly: reconcile/warehouse.py).
CREATE OR REPLACE VIEW archive_rows AS
SELECT * FROM archive_scan WHERE (SELECT ok FROM archive_guard);

-- events: one row per event id: its first occurrence in log order.
CREATE OR REPLACE VIEW events AS
SELECT * FROM archive_rows
QUALIFY row_number() OVER (PARTITION BY id ORDER BY pos) = 1;

-- request_events: the archived rows of request lives (admissions, attempts, closes), the columns request_base reads.
CREATE OR REPLACE VIEW request_events_all AS
SELECT type, request_id, pos, event_time, team, business_unit, app, key_id, run_id, cost_centre, tags,
       alias, data_class, pod, stream, price_version, est_input_tokens, max_output_tokens, holds, currency,
       attempt, deployment, provider, account, model, region, outcome, status, error_code, ttft_ms, latency_ms, attempts,
       input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, usage_source,
       cost_micro, scope_costs, overrun_micro, cache_hit,
       CASE WHEN cache_hit THEN coalesce(json_extract(event, '$.cache_saved_micro')::BIGINT, 0) END
           AS cache_saved_micro,
       -- the client surface of an admission (chat, responses, messages, embeddings; 'chat' before schema 5)
       CASE WHEN type = 'request.admitted' THEN coalesce(json_extract_string(event, '$.api'), 'chat') END AS api
FROM archive_rows
WHERE type IN ('request.admitted', 'request.attempted', 'request.settled', 'hold.expired');
CREATE OR REPLACE VIEW request_events AS SELECT * FROM request_events_all;

-- request_rows, request_base: one row per admitted request: its first admission, its attempts, and its close (the
-- first request.settled or hold.expired after that admission), in one pass over the request events. farebox's
-- Warehouse reads request_base from the per-request table (reconcile/request_table.py) while the files it was
-- computed from are present, and request_rows only for the requests with an event in a newer file. Read
-- `requests`, which adds the corrections.
-- * month/day: the admission's, in budget_tz. state: open, settled or expired.
-- * cost_micro: what the request cost: the settled cost, or for an expiry the largest hold it charged in full
--   (as ledger/rollups.py counts it). scope_costs: the charge per scope; holds: the hold per scope.
-- * fallback: served (settled below 400) after more than one attempt or by a deployment other than the first
--   tried; never a cache hit (no attempt). hedge_micro: the cost of the request's attempts that lost a hedge
--   (request.attempted with error_code 'hedge_lost': cut when another deployment answered first; part of cost_micro).
-- * cache_hit/cache_saved_micro: answered from the response cache, and what that answer would have cost upstream
--   (request.settled's cache_saved_micro, read from the event JSON of hits only; 0 otherwise).
-- * ttft_ms_sum/ttft_count: the TTFT of the attempts delivered while the request was open (each attempt
--   number once), which is what the request processor's state sees (ledger/splitting.py).
CREATE OR REPLACE VIEW request_rows AS
WITH r AS NOT MATERIALIZED (SELECT * FROM request_events), adm AS MATERIALIZED (
    SELECT request_id, min(pos) AS admitted_pos,
           arg_min({'at': event_time, 'team': team, 'business_unit': business_unit, 'app': app,
                    'key_id': key_id, 'run_id': run_id, 'cost_centre': cost_centre, 'tags': tags, 'alias': alias,
                    'data_class': data_class, 'api': api, 'pod': pod, 'stream': stream, 'price_version': price_version,
                    'est_input_tokens': est_input_tokens, 'max_output_tokens': max_output_tokens, 'holds': holds,
                    'currency': currency}, pos) AS a
    FROM r WHERE type = 'request.admitted' GROUP BY request_id
), cls AS MATERIALIZED (
    SELECT r.request_id, min(r.pos) AS closed_pos,
           arg_min({'type': r.type, 'at': r.event_time, 'status': r.status, 'attempts': r.attempts,
                    'deployment': r.deployment, 'input': r.input_tokens, 'cached_input': r.cached_input_tokens,
                    'cache_write': r.cache_write_tokens, 'output': r.output_tokens, 'reasoning': r.reasoning_tokens,
                    'usage_source': r.usage_source, 'cost_micro': r.cost_micro, 'scope_costs': r.scope_costs,
                    'overrun_micro': r.overrun_micro, 'cache_hit': r.cache_hit, 'cache_saved_micro': r.cache_saved_micro,
                    'latency_ms': r.latency_ms}, r.pos) AS c
    FROM r JOIN adm ON adm.request_id = r.request_id AND r.pos > adm.admitted_pos
    WHERE r.type IN ('request.settled', 'hold.expired') GROUP BY r.request_id
), tried AS (
    SELECT r.request_id, r.attempt, any_value(r.deployment) AS deployment, any_value(r.model) AS model,
           any_value(r.provider) AS provider, any_value(r.account) AS account, any_value(r.region) AS region,
           any_value(r.outcome) AS outcome, any_value(r.ttft_ms) AS ttft_ms,
           any_value(r.cost_micro) FILTER (WHERE r.error_code = 'hedge_lost') AS hedge_micro,
           bool_or(r.pos > adm.admitted_pos AND (cls.closed_pos IS NULL OR r.pos < cls.closed_pos)) AS while_open
    FROM r JOIN adm ON adm.request_id = r.request_id LEFT JOIN cls ON cls.request_id = r.request_id
    WHERE r.type = 'request.attempted' GROUP BY r.request_id, r.attempt
), tries AS (
    SELECT request_id, count(*) AS tried, arg_min(deployment, attempt) AS first_deployment,
           -- the attempt that served (the last ok one), else the last one tried
           arg_max({'model': model, 'provider': provider, 'account': account, 'region': region,
                    'ttft_ms': CASE WHEN outcome = 'ok' THEN ttft_ms END},
                   (outcome = 'ok')::BIGINT * 4294967296 + attempt) AS last,
           coalesce(sum(ttft_ms) FILTER (WHERE while_open), 0)::BIGINT AS ttft_ms_sum,
           count(ttft_ms) FILTER (WHERE while_open) AS ttft_count,
           coalesce(sum(hedge_micro), 0)::BIGINT AS hedge_micro
    FROM tried GROUP BY request_id
)
SELECT adm.request_id, strftime(timezone(getvariable('budget_tz'), a.at), '%Y-%m') AS month,
       CAST(timezone(getvariable('budget_tz'), a.at) AS DATE) AS day, a.at AS admitted_at, a.team, a.business_unit,
       a.app, a.key_id, a.run_id, a.cost_centre, a.tags, a.alias, a.data_class, a.api, a.pod, a.stream, a.price_version,
       a.est_input_tokens, a.max_output_tokens, a.holds,
       CASE c.type WHEN 'request.settled' THEN 'settled' WHEN 'hold.expired' THEN 'expired' ELSE 'open' END AS state,
       c.at AS closed_at, CASE WHEN c.type = 'request.settled' THEN c.status END AS final_status,
       coalesce(c.attempts, t.tried, 0) AS attempts, t.first_deployment,
       CASE WHEN c.type = 'request.settled' THEN c.deployment END AS deployment,
       t.last.model, t.last.provider, t.last.account, t.last.region,
       coalesce(c.input, 0) AS input_tokens, coalesce(c.cached_input, 0) AS cached_input_tokens,
       coalesce(c.cache_write, 0) AS cache_write_tokens, coalesce(c.output, 0) AS output_tokens,
       coalesce(c.reasoning, 0) AS reasoning_tokens, c.usage_source,
       CASE WHEN c.type = 'request.settled' THEN c.cost_micro
            WHEN c.type = 'hold.expired' THEN coalesce(list_max(list_transform(c.scope_costs, lambda x: x.micro)), 0)
            ELSE 0 END AS cost_micro,
       c.scope_costs, coalesce(c.overrun_micro, 0) AS overrun_micro,
       coalesce(c.type = 'request.settled' AND c.status < 400, false) AS served,
       coalesce(c.type = 'request.settled' AND c.status < 400 AND NOT coalesce(c.cache_hit, false)
                AND (c.attempts > 1 OR c.deployment IS DISTINCT FROM t.first_deployment), false) AS fallback,
       coalesce(t.hedge_micro, 0)::BIGINT AS hedge_micro, coalesce(c.cache_hit, false) AS cache_hit,
       coalesce(c.cache_saved_micro, 0)::BIGINT AS cache_saved_micro,
       c.latency_ms, t.last.ttft_ms, coalesce(t.ttft_ms_sum, 0) AS ttft_ms_sum, coalesce(t.ttft_count, 0) AS ttft_count,
       a.currency, adm.request_id || '/admitted' AS admitted_id,
       adm.request_id || CASE c.type WHEN 'request.settled' THEN '/settled' WHEN 'hold.expired' THEN '/expired' END
           AS closed_id, c.type AS closed_type, adm.admitted_pos, cls.closed_pos
FROM adm
LEFT JOIN cls ON cls.request_id = adm.request_id
LEFT JOIN tries AS t ON t.request_id = adm.request_id;
CREATE OR REPLACE VIEW request_base AS SELECT * FROM request_rows;

-- corrections: one row per rating.corrected event id (its first occurrence in log order): re-rating's change to a
-- request's cost. month is the budget month of the corrected request's admission (the event's admitted_at), where
-- the ledger folds it; delta_micro is new - old cost; scope_deltas lists new - old per scope (every scope either
-- side names, a zero included, as ledger.events.RatingCorrected.deltas does).
CREATE OR REPLACE VIEW correction_events AS
SELECT id, request_id, pos, team, currency, event_time, cost_micro, scope_costs, event
FROM archive_rows WHERE type = 'rating.corrected';

CREATE OR REPLACE VIEW correction_rows AS
WITH c AS (
    SELECT id, request_id, pos, team, currency, event_time AS at, cost_micro, scope_costs,
           CAST(json_extract_string(event, '$.admitted_at') AS TIMESTAMPTZ) AS admitted_at,
           CAST(json_extract(event, '$.old_cost_micro') AS BIGINT) AS old_cost_micro,
           CAST(json_extract(event, '$.old_cost_by_scope') AS MAP(VARCHAR, BIGINT)) AS old_by_scope
    FROM correction_events
    QUALIFY row_number() OVER (PARTITION BY id ORDER BY pos) = 1
), d AS (
    SELECT id, s.scope AS scope, s.micro AS micro
    FROM (SELECT id, unnest(scope_costs) AS s FROM c
          UNION ALL
          SELECT id, {'scope': e.key, 'micro': -e.value} FROM (SELECT id, unnest(map_entries(old_by_scope)) AS e FROM c))
), per_scope AS (
    SELECT id, list({'scope': scope, 'micro': micro} ORDER BY scope) AS scope_deltas
    FROM (SELECT id, scope, sum(micro)::BIGINT AS micro FROM d GROUP BY id, scope) GROUP BY id
)
SELECT c.id, c.request_id, c.pos, c.team, c.currency, c.at, c.admitted_at,
       strftime(timezone(getvariable('budget_tz'), c.admitted_at), '%Y-%m') AS month,
       (c.cost_micro - c.old_cost_micro)::BIGINT AS delta_micro,
       coalesce(p.scope_deltas, []) AS scope_deltas
FROM c LEFT JOIN per_scope AS p ON p.id = c.id;
CREATE OR REPLACE VIEW corrections AS SELECT * FROM correction_rows;

-- requests: request_base, plus corrected_micro: the net change re-rating made to the request's cost (0 when none).
-- cost_micro stays what settlement (or the expiry) charged; cost_micro + corrected_micro is what it costs now.
CREATE OR REPLACE VIEW requests AS
SELECT b.*, coalesce(k.corrected_micro, 0)::BIGINT AS corrected_micro,
       -- farebox's own tags, as dimensions: the split variant that served, the batch a line is of, the class
       element_at(b.tags, 'fb.variant')[1] AS variant, element_at(b.tags, 'fb.batch')[1] AS batch,
       coalesce(element_at(b.tags, 'fb.priority')[1], 'interactive') AS priority,
       element_at(b.tags, 'fb.shadow')[1] AS shadow
FROM request_base AS b
LEFT JOIN (SELECT request_id, sum(delta_micro) AS corrected_micro FROM corrections GROUP BY request_id) AS k
  ON k.request_id = b.request_id;

-- request_tiers: the service tier each request's answer was served at, where it was not the standard one (the
-- answering attempt's usage.service_tier, read from the event only where it names one). Showback and usage join
-- it only when grouped by service_tier (reconcile/showback.py, requests_from).
CREATE OR REPLACE VIEW request_tiers AS
SELECT request_id, arg_max(json_extract_string(event, '$.usage.service_tier'), attempt) AS service_tier
FROM archive_rows
WHERE type = 'request.attempted' AND outcome = 'ok' AND contains(event, '"service_tier"')
GROUP BY request_id;

-- attempts: one row per (request, attempt number), its first occurrence; while_open says whether it was
-- delivered while its request was open (after the admission, before the close).
CREATE OR REPLACE VIEW attempts AS
SELECT t.* EXCLUDE (holds, scope_costs, hold_released, event),
       coalesce(t.pos > q.admitted_pos AND (q.closed_pos IS NULL OR t.pos < q.closed_pos), false) AS while_open
FROM archive_rows AS t LEFT JOIN requests AS q ON q.request_id = t.request_id
WHERE t.type = 'request.attempted'
QUALIFY row_number() OVER (PARTITION BY t.request_id, t.attempt ORDER BY t.pos) = 1;

-- ledger_entries: one row per (request, scope) movement of the budget ledger: a 'hold' at admission, then a
-- 'settlement' or an 'expiry' that releases the hold, charges the cost and records any overrun (charge above
-- the hold: estimator error, never hidden), and a 'correction' per (re-rating event, scope) that charges its
-- new - old cost (negative when the price fell). month is the admission's; balance_period is 'run' for run: scopes.
-- (entry_requests: the requests request_entries are computed from; farebox's Warehouse narrows it to the requests
-- the per-request table does not cover and reads the rest of request_entries from that table.)
CREATE OR REPLACE VIEW entry_requests AS SELECT * FROM request_base;
CREATE OR REPLACE VIEW request_entry_rows AS
WITH q AS MATERIALIZED (
    SELECT request_id, month, team, currency, admitted_id, admitted_at, holds, closed_id, closed_type, closed_at,
           scope_costs
    FROM entry_requests
), held AS (
    SELECT request_id, u.h.scope AS scope, u.h.micro::BIGINT AS micro FROM q, unnest(q.holds) AS u(h)
), moved AS (
    SELECT coalesce(h.request_id, c.request_id) AS request_id, coalesce(h.scope, c.scope) AS scope,
           coalesce(h.micro, 0) AS released_micro, coalesce(c.micro, 0) AS charged_micro
    FROM (SELECT h.* FROM held AS h SEMI JOIN q ON q.request_id = h.request_id AND q.closed_id IS NOT NULL) AS h
    FULL JOIN (SELECT request_id, u.c.scope AS scope, u.c.micro::BIGINT AS micro
               FROM q, unnest(q.scope_costs) AS u(c)) AS c
      ON c.request_id = h.request_id AND c.scope = h.scope
)
SELECT 'hold' AS entry, q.admitted_id AS event_id, h.request_id, h.scope, q.month,
       CASE WHEN h.scope LIKE 'run:%' THEN 'run' ELSE q.month END AS balance_period, q.admitted_at AS at, q.team,
       h.micro AS hold_micro, 0::BIGINT AS released_micro, 0::BIGINT AS charged_micro, 0::BIGINT AS overrun_micro,
       q.currency
FROM held AS h JOIN q ON q.request_id = h.request_id
UNION ALL
SELECT CASE q.closed_type WHEN 'request.settled' THEN 'settlement' ELSE 'expiry' END, q.closed_id, m.request_id,
       m.scope, q.month, CASE WHEN m.scope LIKE 'run:%' THEN 'run' ELSE q.month END, q.closed_at, q.team, 0,
       m.released_micro, m.charged_micro, greatest(m.charged_micro - m.released_micro, 0), q.currency
FROM moved AS m JOIN q ON q.request_id = m.request_id;
CREATE OR REPLACE VIEW request_entries AS SELECT * FROM request_entry_rows;

CREATE OR REPLACE VIEW ledger_entries AS
SELECT * FROM request_entries
UNION ALL
SELECT 'correction', k.id, k.request_id, u.d.scope, k.month,
       CASE WHEN u.d.scope LIKE 'run:%' THEN 'run' ELSE k.month END, k.at, k.team, 0, 0, u.d.micro, 0, k.currency
FROM corrections AS k, unnest(k.scope_deltas) AS u(d);

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
SELECT team, key_id, alias, coalesce(deployment, '-') AS deployment,
       strftime(timezone('UTC', closed_at), '%Y-%m-%dT%H:%M') AS minute, count(*) AS requests,
       sum(input_tokens)::BIGINT AS input, sum(cached_input_tokens)::BIGINT AS cached_input,
       sum(cache_write_tokens)::BIGINT AS cache_write, sum(output_tokens)::BIGINT AS output,
       sum(reasoning_tokens)::BIGINT AS reasoning, sum(cost_micro)::BIGINT AS cost_micro,
       count(*) FILTER (WHERE state = 'expired' OR final_status >= 400) AS errors,
       sum(ttft_ms_sum)::BIGINT AS ttft_ms_sum, sum(ttft_count)::BIGINT AS ttft_count
FROM requests WHERE state <> 'open'
GROUP BY ALL;

-- daily_cost: one row per admission day (budget_tz) x team x app x alias x deployment x model: requests,
-- tokens, cost as charged and the corrections re-rating made to it, so a month's days add up to its showback.
CREATE OR REPLACE VIEW daily_cost AS
SELECT day, month, team, business_unit, app, cost_centre, alias, deployment, provider, model, currency,
       count(*) AS requests, count(*) FILTER (WHERE state <> 'open') AS closed,
       sum(input_tokens)::BIGINT AS input_tokens, sum(cached_input_tokens)::BIGINT AS cached_input_tokens,
       sum(cache_write_tokens)::BIGINT AS cache_write_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       sum(reasoning_tokens)::BIGINT AS reasoning_tokens, sum(cost_micro)::BIGINT AS cost_micro,
       sum(corrected_micro)::BIGINT AS corrected_micro
FROM requests GROUP BY ALL;
