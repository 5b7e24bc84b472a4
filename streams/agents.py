"""The worker's agents: thin shells around ``ledger.splitting`` and ``ledger.leases``.

* ``split_requests`` (``fb.requests``, concurrency 1): each request event ->
  ``split`` -> per-scope entries to ``fb.scope-entries`` (keyed by scope, so
  each scope has one writer), a rollup row to ``fb.rollups``, the request's
  new state in the ``requests`` table. Sends happen before the table write: a
  crash between them re-sends entries with the same source offset, which
  the scope skips (its high-water mark).
* ``scope_ledger`` (``fb.scope-entries``, concurrency 1; faust #606): each
  entry or lease event -> ``fold`` -> the scope's state in the table; a grant
  goes to the topic and to Redis (key + publish to the pod) at once.
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
from ledger.leases import ENTRY_TYPE, ScopeEntry, ScopeLedger, decide_lease_expiries, fold
from ledger.periods import period_of
from ledger.rollups import merge
from ledger.splitting import decide_hold_expiries, split
from streams.faust_app import Worker
from streams.projections import RedisProjections, scope_fields

log = logging.getLogger("farebox.worker")


def register(w: Worker) -> None:
    cfg, app = w.cfg, w.app
    live: dict[str, ScopeLedger] = {}  # decoded mirror of scope_ledger (this worker's partitions)
    open_requests: dict[str, dict] = {}  # mirror of the open part of the requests table, for the sweeper
    dirty: set[str] = set()
    projections = RedisProjections(aioredis.Redis.from_url(cfg.redis_url))
    stats = w.stats = {"requests": 0, "entries": 0, "grants": 0, "started": time.monotonic()}  # type: ignore[attr-defined]

    def scope_state(scope: str) -> ScopeLedger:
        state = live.get(scope)
        if state is None:
            stored = w.scope_ledger.get(scope)
            state = live[scope] = ScopeLedger.from_dict(stored) if stored else ScopeLedger(scope)
        return state

    @app.agent(w.requests, concurrency=1)
    async def split_requests(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            ev = decode(event.value)
            rid = ev.request_id
            result = split(ev, w.request_states.get(rid), cfg.tz, str(event.message.partition), event.message.offset)
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
            stats["requests"] += 1

    @app.agent(w.entries, concurrency=1)
    async def scope_ledger(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            record = orjson.loads(event.value)
            item = ScopeEntry.from_wire(record) if record["type"] == ENTRY_TYPE else from_dict(record)
            scope = item.scope
            state = scope_state(scope)
            changed, granted = fold(state, item, cfg.limit_for(scope), cfg.tz, cfg.policy)
            if changed:
                w.scope_ledger[scope] = state.to_dict()
                dirty.add(scope)
            if granted is not None:
                await w.entries.send(key=scope.encode(), value=encode(granted))
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
            await w.requests.send(key=expired.team.encode(), value=encode(expired))
        for state in list(live.values()):
            for lease_expired in decide_lease_expiries(state, now, cfg.policy):
                await w.entries.send(key=state.scope.encode(), value=encode(lease_expired))

    @app.timer(interval=cfg.projection_interval_s)
    async def project() -> None:
        if not dirty:
            return
        period = period_of(datetime.now(timezone.utc), cfg.tz)
        rows = {}
        for scope in list(dirty):
            totals = scope_state(scope).totals(period)
            rows[scope] = scope_fields(period, totals, cfg.limit_for(scope), cfg.soft_pct_for(scope))
        dirty.clear()
        try:
            await projections.scopes(rows)
        except Exception:  # Redis down: project again next round
            dirty.update(rows)
            log.warning("projection to Redis failed; retrying", exc_info=True)

    @app.on_rebalance_complete.connect  # type: ignore[misc]
    async def forget(sender, **kwargs) -> None:  # type: ignore[no-untyped-def]
        live.clear()  # partitions moved: re-read states from the (recovered) table
        open_requests.clear()
        for rid, state in w.request_states.items():
            if state and state.get("s") == "open":
                open_requests[rid] = state
        dirty.update(scope for scope, _ in w.scope_ledger.items())
