"""The worker's agents: thin shells around ``ledger.splitting`` and ``ledger.leases``.

* ``split_requests`` (``fb.requests``, concurrency 1): each request event ->
  ``split`` -> per-scope entries to ``fb.scope-entries`` (keyed by scope, so
  each scope has one writer), a rollup row to ``fb.rollups``, the request's
  new state in the ``requests`` table. Sends happen before the table write: a
  crash between them re-sends entries with the same source offset, which
  the scope skips (its high-water mark). Then it forgets a few closed states
  of the same partition that are past the retention (``ledger.retention``:
  deletes are changelog writes, so they must happen while an event of their
  partition is processed, never from a timer). Other records (none are routed
  here today) are skipped.
* ``scope_ledger`` (``fb.scope-entries``, concurrency 1; faust #606): each
  entry or lease event -> ``fold`` -> the scope's state in the table; a grant
  goes to the topic and to Redis (key + publish to the pod) at once. After an
  entry, ``decide_soft_notice`` may emit ``budget.threshold_crossed`` to the
  same topic (where ``streams.kafka_log`` routes budget notices), sent before
  the table write that records the mark: a crash between them sends it again
  with the same id, never loses it. A notice read back only marks.
* ``rollups`` (``fb.rollups``): adds rows into the ``rollups`` table.
* timers: hold expiries (open requests past their TTL -> ``hold.expired`` on
  ``fb.requests``), lease expiries (-> ``lease.expired`` on
  ``fb.scope-entries``), and the Redis projection of changed scopes.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

import orjson
import redis.asyncio as aioredis

from ledger.codec import decode, encode, from_dict
from ledger.events import BudgetThresholdCrossed, Event, RequestEvent
from ledger.leases import ENTRY_TYPE, ScopeEntry, ScopeLedger, decide_lease_expiries, fold
from ledger.periods import period_of
from ledger.retention import ClosedRequests, admitted_epoch, forget_due, index_states
from ledger.rollups import merge
from ledger.splitting import decide_hold_expiries, split
from ledger.thresholds import apply_notice, budget_state, decide_soft_notice
from streams.faust_app import Worker
from streams.kafka_clients import ID_HEADER
from streams.projections import RedisProjections, scope_fields

log = logging.getLogger("farebox.worker")


def register(w: Worker) -> None:
    cfg, app = w.cfg, w.app
    live: dict[str, ScopeLedger] = {}  # decoded mirror of scope_ledger (this worker's partitions)
    open_requests: dict[str, dict] = {}  # mirror of the open part of the requests table, for the sweeper
    closed: dict[str, ClosedRequests] = {}  # fb.requests partition -> its closed requests, clock and horizon
    dirty: set[str] = set()
    projections = RedisProjections(aioredis.Redis.from_url(cfg.redis_url))
    stats = w.stats = {"requests": 0, "entries": 0, "grants": 0, "notices": 0, "stale": 0,  # type: ignore[attr-defined]
                       "forgotten": 0, "started": time.monotonic()}

    def scope_state(scope: str) -> ScopeLedger:
        state = live.get(scope)
        if state is None:
            stored = w.scope_ledger.get(scope)
            state = live[scope] = ScopeLedger.from_dict(stored) if stored else ScopeLedger(scope)
        return state

    async def send_event(topic, key: str, event: Event) -> None:  # type: ignore[no-untyped-def]
        await topic.send(key=key.encode(), value=encode(event), headers=[(ID_HEADER, event.id.encode())])

    @app.agent(w.requests, concurrency=1)
    async def split_requests(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            stats["requests"] += 1
            ev = decode(event.value)
            if not isinstance(ev, RequestEvent):
                continue
            rid = ev.request_id
            source = str(event.message.partition)
            index = closed.get(source)
            if index is None:
                index = closed[source] = ClosedRequests(cfg.request_retention_s)
            index.observe(ev.time.timestamp(), time.time())
            result = split(ev, w.request_states.get(rid), cfg.tz, source, event.message.offset, index.horizon)
            for entry in result.entries:
                await w.entries.send(key=entry.scope.encode(), value=orjson.dumps(entry.to_wire()))
            if result.rollup is not None:
                row = result.rollup
                await w.rollups.send(key=row.key.encode(), value=orjson.dumps([rid, row.counts]))
            if result.state is not None:
                w.request_states[rid] = result.state
                if result.state["s"] == "open":
                    open_requests[rid] = result.state
                else:
                    open_requests.pop(rid, None)
                    index.closed(rid, admitted_epoch(result.state))
            elif result.stale:
                stats["stale"] += 1
                log.warning("admission of %s dated %s is older than the retention horizon of fb.requests "
                            "partition %s: refused as stale (not counted)", rid, ev.time.isoformat(), source)
            if index.has_due():  # the deletes go to this partition's changelog: see ledger.retention
                stats["forgotten"] += forget_due(w.request_states, index, source, cfg.prune_batch)

    @app.agent(w.entries, concurrency=1)
    async def scope_ledger(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            record = orjson.loads(event.value)
            item = ScopeEntry.from_wire(record) if record["type"] == ENTRY_TYPE else from_dict(record)
            scope = item.scope
            state = scope_state(scope)
            limit = cfg.limit_for(scope)
            notice = granted = None
            if isinstance(item, BudgetThresholdCrossed):
                changed = apply_notice(state, item)
            else:
                changed, granted = fold(state, item, limit, cfg.tz, cfg.policy)
                if changed and isinstance(item, ScopeEntry):
                    notice = decide_soft_notice(state, item, limit, cfg.soft_pct_for(scope), cfg.currency_for())
            if notice is not None:
                await send_event(w.entries, scope, notice)
                stats["notices"] += 1
            if changed:
                w.scope_ledger[scope] = state.to_dict()
                dirty.add(scope)
            if granted is not None:
                await send_event(w.entries, scope, granted)
                await projections.grant(granted, cfg.policy.ttl_s + cfg.policy.expiry_grace_s)
                stats["grants"] += 1
            stats["entries"] += 1

    @app.agent(w.rollups)
    async def rollups(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            _, counts = orjson.loads(event.value)
            key = event.key.decode()
            w.rollup_table[key] = merge(w.rollup_table.get(key), counts)

    @app.timer(interval=cfg.sweep_interval_s)
    async def sweep() -> None:
        now = datetime.now(timezone.utc)
        for expired in decide_hold_expiries(list(open_requests.items()), now):
            await send_event(w.requests, expired.team, expired)
        for state in list(live.values()):
            for lease_expired in decide_lease_expiries(state, now, cfg.policy):
                await send_event(w.entries, state.scope, lease_expired)

    @app.timer(interval=cfg.projection_interval_s)
    async def project() -> None:
        if not dirty:
            return
        period = period_of(datetime.now(timezone.utc), cfg.tz)
        rows = {}
        for scope in list(dirty):
            state, limit = scope_state(scope), cfg.limit_for(scope)
            rows[scope] = scope_fields(period, state.totals(period), limit,
                                       budget_state(state, period, limit, cfg.soft_pct_for(scope)))
        dirty.clear()
        try:
            await projections.scopes(rows)
        except Exception:  # Redis down: project again next round
            dirty.update(rows)
            log.warning("projection to Redis failed; retrying", exc_info=True)

    @app.on_rebalance_complete.connect  # type: ignore[misc]
    async def forget(sender, **kwargs) -> None:  # type: ignore[no-untyped-def]
        live.clear()  # partitions moved: re-read states from the (recovered) table
        owned = {str(tp.partition) for tp in app.consumer.assignment() if tp.topic == cfg.requests_topic}
        indexes, opened = index_states(w.request_states.items(), cfg.request_retention_s, owned)
        closed.clear()
        closed.update(indexes)
        open_requests.clear()
        open_requests.update(opened)
        dirty.update(scope for scope, _ in w.scope_ledger.items())
