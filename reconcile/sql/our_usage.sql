-- The "ours" side of provider reconciliation, as views over a relation named `events` that has the
-- archive's columns (streams/archive/schema.py). reconcile.our_usage.our_usage_rows prices
-- `our_usage` by token type and folds it into reconcile.drift.OurUsage rows; `our_expired_unattributed`
-- is the `unattributed_expired` argument of reconcile.drift.compare_tokens / compare_money.
-- Days are UTC dates. Every attempt counts (a failed-over request was billed by each provider it reached);
-- cache hits never reach a provider and have no attempt.

-- A request whose hold expired, on the UTC day it was admitted (the expiry may come a TTL later).
CREATE OR REPLACE TEMP VIEW our_expired AS
SELECT x.request_id,
       CAST(timezone('UTC', COALESCE(a.event_time, x.event_time)) AS DATE) AS day
FROM events x
LEFT JOIN events a ON a.type = 'request.admitted' AND a.request_id = x.request_id
WHERE x.type = 'hold.expired';

-- One row: one provider attempt's tokens of one type (input is uncached input only); service_tier is the tier
-- the provider served it at, where the event names one (priced at that tier's prices), else NULL.
CREATE OR REPLACE TEMP VIEW our_attempt_tokens AS
SELECT request_id, account, model, deployment, price_version, currency, usage_source, service_tier,
       CAST(timezone('UTC', event_time) AS DATE) AS day, token_type, tokens
FROM (
    UNPIVOT (SELECT *, CASE WHEN contains(event, '"service_tier"') THEN json_extract_string(event, '$.usage.service_tier')
                       END AS service_tier FROM events WHERE type = 'request.attempted')
    ON input_tokens AS 'input', cached_input_tokens AS 'cached_input', cache_write_tokens AS 'cache_write',
       output_tokens AS 'output', reasoning_tokens AS 'reasoning'
    INTO NAME token_type VALUE tokens
);

-- One row: (account, day, model, deployment, price version, currency, token type) -> tokens, the part of them
-- estimated rather than provider-reported (invalid_tokens: the part estimated because what the provider reported
-- failed the usage boundary, usage_source 'provider_invalid'), and the expired requests of (account, day, model) that recorded an
-- attempt there (repeated on each row of that group).
CREATE OR REPLACE TEMP VIEW our_usage AS
WITH expired_here AS (
    SELECT t.account, x.day, t.model, COUNT(DISTINCT x.request_id) AS expired_requests
    FROM our_expired x JOIN our_attempt_tokens t USING (request_id)
    GROUP BY ALL
)
SELECT t.account, t.day, t.model, t.deployment, t.price_version, t.currency, t.service_tier, t.token_type,
       SUM(t.tokens)::BIGINT AS tokens,
       SUM(CASE WHEN t.usage_source IN ('estimated', 'provider_invalid') THEN t.tokens ELSE 0 END)::BIGINT
           AS estimated_tokens,
       SUM(CASE WHEN t.usage_source = 'provider_invalid' THEN t.tokens ELSE 0 END)::BIGINT AS invalid_tokens,
       COALESCE(ANY_VALUE(e.expired_requests), 0)::BIGINT AS expired_requests
FROM our_attempt_tokens t
LEFT JOIN expired_here e ON e.account = t.account AND e.day = t.day AND e.model = t.model
GROUP BY t.account, t.day, t.model, t.deployment, t.price_version, t.currency, t.service_tier, t.token_type;

-- One row: a UTC day and how many of its expired requests never recorded an attempt (account and model unknown).
CREATE OR REPLACE TEMP VIEW our_expired_unattributed AS
SELECT x.day, COUNT(*)::BIGINT AS requests
FROM our_expired x
WHERE NOT EXISTS (SELECT 1 FROM events a WHERE a.type = 'request.attempted' AND a.request_id = x.request_id)
GROUP BY x.day;
