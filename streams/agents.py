"""The worker's agents: thin shells around ``ledger.splitting`` and ``ledger.leases``.

Every agent consumes its stream one event at a time and flushes its effects in
batches (``streams.batching.Batcher``: every ``batch_max`` events or within
its window), writing each table key it touched once per flush, to the
changelog partition of the event that produced it (``streams.table_writes``);
events are acknowledged after their flush. A flush applies the batch in memory
and produces its sends under the agent's lock; its *completion* (a task, in
flush order, while the agent goes on) waits until Kafka has the sends, then
produces the table writes and waits for them. Sends and table writes go
straight to the aiokafka producer (``streams.table_writes``), not through
Faust's per-record ``FutureMessage`` path. Per request this cut the records
the worker writes from 17 to about 1.6, and one worker's throughput from ~860
to ~3,000, then (with the consumer's short fetch wait, ``streams.faust_patches``)
to ~5,000 request events/s on the 2-core dev machine, on uvloop (``farebox.worker``) to ~5,600-6,000,
and with one task per record delivered (``streams.faust_patches``) to ~6,200-6,700
(``make bench-distributed``).

* ``split_requests`` (``fb.requests``, concurrency 1): each request event ->
  ``split`` -> per-scope entries, sent as one ``scope.entries`` record per
  scope and batch to ``fb.scope-entries`` (keyed by scope, so each scope has
  one writer; entries keep their source order), rollup rows per key (with
  their closes' source offsets) to ``fb.rollups``, and each request's newest state in the ``requests``
  table. Sends happen before the table writes: a crash between them re-sends
  entries with the same source offsets, which the scope skips (its high-water
  mark). Then it forgets a few closed states past the retention
  (``ledger.retention``), each delete to its own partition's changelog. Other
  records (none are routed here today) are skipped.
* ``scope_ledger`` (``fb.scope-entries``, concurrency 1; faust #606): each
  entry or lease event -> ``fold`` -> the scope's state; a grant goes to the
  topic and to Redis (key + publish to the pod) at once, within the batch (its
  window is short: ``scope_within_s``). After an entry, ``decide_soft_notice``
  may emit ``budget.threshold_crossed`` to the same topic (where
  ``streams.kafka_log`` routes budget notices), sent before the table write
  that records the mark: a crash between them sends it again with the same
  id, never loses it. A notice read back only marks.
* ``rollups`` (``fb.rollups``): adds rows into the ``rollups`` table, each
  close once (``ledger.rollups``: a high-water source offset per key).
* every agent reads its record in a step of its own; a record that step
  refuses (not an event the codec reads, a malformed batch or row) goes to
  the dead-letter topic unchanged, and the agent goes on
  (``streams.dead_letters``): one malformed record no longer stops the ledger.
* timers: hold expiries (open requests past their TTL, in partitions the
  splitter has read to the end -> ``hold.expired`` on ``fb.requests``), lease expiries (-> ``lease.expired`` on
  ``fb.scope-entries``), and the Redis projection of changed scopes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import datetime, timezone

import orjson
import redis.asyncio as aioredis

from ledger.codec import decode, encode, from_dict
from ledger.events import BudgetThresholdCrossed, Event, RequestEvent
from ledger.leases import (
    ENTRIES_TYPE,
    ENTRY_TYPE,
    ScopeEntry,
    ScopeLedger,
    decide_lease_expiries,
    entries_batch,
    entries_of,
    fold,
)
from ledger.periods import period_of
from ledger.retention import ClosedRequests, admitted_epoch, forget_due, index_states
from ledger.rollups import RollupTotal, apply_rows, check_record, rows_record
from ledger.splitting import SplitBatch, decide_hold_expiries, split
from ledger.thresholds import apply_notice, budget_state, decide_soft_notice
from streams import dead_letters
from streams.batching import Batcher
from streams.faust_app import Worker
from streams.kafka_clients import ID_HEADER
from streams.projections import RedisProjections, scope_fields
from streams.table_writes import PartitionView, TableWrites, key_partition, send_keyed

log = logging.getLogger("farebox.worker")


def stop_worker(exc: BaseException) -> None:
    """A batch could not be written to Kafka: memory is ahead of Kafka, so end the process as a kill -9
    would. Restarted (by its supervisor), the worker recovers its tables from their changelogs and gets
    the unacknowledged events again; the ledger's idempotence drops what was already written."""
    log.critical("the worker stops: a batch could not be written to Kafka (%r); restart it to recover", exc)
    logging.shutdown()
    os._exit(70)


def read_scope_record(value: bytes) -> list:
    """The entries and lease/budget events of one ``fb.scope-entries`` record (one of
    ``streams.dead_letters.READ_ERRORS`` if it is malformed)."""
    record = orjson.loads(value)
    kind = record["type"]
    if kind == ENTRIES_TYPE:
        return entries_of(record)
    return [ScopeEntry.from_wire(record) if kind == ENTRY_TYPE else from_dict(record)]


def register(w: Worker) -> None:
    cfg, app = w.cfg, w.app
    live: dict[str, ScopeLedger] = {}  # decoded mirror of scope_ledger (this worker's partitions)
    open_requests: dict[str, dict] = {}  # mirror of the open part of the requests table, for the sweeper
    closed: dict[str, ClosedRequests] = {}  # fb.requests partition -> its closed requests, clock and horizon
    dirty: set[str] = set()
    projections = RedisProjections(aioredis.Redis.from_url(cfg.redis_url))
    stats = w.stats = {"requests": 0, "entries": 0, "grants": 0, "notices": 0, "stale": 0,  # type: ignore[attr-defined]
                       "forgotten": 0, "dead_letters": 0, "started": time.monotonic()}

    def scope_state(scope: str) -> ScopeLedger:
        state = live.get(scope)
        if state is None:
            stored = w.scope_ledger.get(scope)
            state = live[scope] = ScopeLedger.from_dict(stored) if stored else ScopeLedger(scope)
        return state

    async def send_event(topic, key: str, event: Event) -> asyncio.Future:  # type: ignore[no-untyped-def]
        """Produce now (``force``: not attached to the current event, which Faust would publish only at the
        next commit, after the table writes); the future resolves when Kafka has the record."""
        return await topic.send(key=key.encode(), value=encode(event), headers=[(ID_HEADER, event.id.encode())],
                                force=True)

    async def dead_letter(event, exc: BaseException) -> None:  # type: ignore[no-untyped-def]
        """A record the agent cannot read: to the dead-letter topic, unchanged, and on (streams.dead_letters).
        Waits for Kafka's ack: the record's offset is committed with its batch, so its dead letter must be in."""
        m = event.message
        stats["dead_letters"] += 1
        log.error("unreadable record at %s[%d] offset %d, sent to %s: %s", m.topic, m.partition, m.offset,
                  cfg.dead_letter_topic, dead_letters.reason_of(exc))
        producer = app.producer._ensure_producer()  # type: ignore[attr-defined]
        await (await producer.send(cfg.dead_letter_topic, key=m.key, value=m.value,
                                   headers=dead_letters.headers(m.topic, m.partition, m.offset, exc)))

    batchers: dict[str, Batcher] = {}  # by agent; paused while partitions move (``quiesce`` / ``forget``)

    async def rewind(tp, offset: int) -> None:  # type: ignore[no-untyped-def]
        # through Faust (``seek_wait``: the seek runs in its consumer thread, and its read offset follows, so
        # the records from ``offset`` on are delivered again instead of dropped as already read)
        try:
            await app.consumer.seek_wait({tp: offset})
        except Exception:  # e.g. the partition was revoked meanwhile: the next owner starts at the commit
            log.warning("could not rewind %s to offset %d", tp, offset, exc_info=True)

    def batcher(name: str, stream, handle, flush, within_s: float) -> Batcher:  # type: ignore[no-untyped-def]
        b = batchers[name] = Batcher(
            stream, handle, flush, max_events=cfg.batch_max, within_s=within_s, on_failure=stop_worker,
            stale=lambda event: event.message.generation_id != app.consumer_generation_id,
            position=lambda event: (event.message.tp, event.message.offset), rewind=rewind)
        return b

    split_batch = SplitBatch()

    def swept_partitions() -> set[str]:
        """The fb.requests partitions the splitter has handled up to the high-water mark of the consumer's last
        fetch: the sweeper expires holds only there (behind, a request's settlement may still be unread)."""
        splitter = batchers.get("split")
        handled = splitter.last if splitter is not None else {}
        ready = set()
        for tp in app.consumer.assignment():
            if tp.topic == cfg.requests_topic:
                high = app.consumer.highwater(tp)
                if high is not None and handled.get(tp, -1) + 1 >= high:
                    ready.add(str(tp.partition))
        return ready

    async def split_one(event) -> None:  # type: ignore[no-untyped-def]
        stats["requests"] += 1
        try:
            ev = decode(event.value)
        except dead_letters.READ_ERRORS as exc:
            await dead_letter(event, exc)
            return
        if not isinstance(ev, RequestEvent):
            return
        rid, partition = ev.request_id, event.message.partition
        source = str(partition)
        index = closed.get(source)
        if index is None:
            index = closed[source] = ClosedRequests(cfg.request_retention_s)
        index.observe(ev.time.timestamp(), time.time())
        pending = split_batch.states.get(rid)
        current = pending[1] if pending is not None else w.request_states.get(rid)
        result = split(ev, current, cfg.tz, source, event.message.offset, index.horizon)
        split_batch.add(rid, result, partition, event.message.offset)
        if result.state is not None:
            if result.state["s"] == "open":
                open_requests[rid] = result.state
            else:
                open_requests.pop(rid, None)
                index.closed(rid, admitted_epoch(result.state))
        elif result.stale:
            stats["stale"] += 1
            log.warning("admission of %s dated %s is older than the retention horizon of fb.requests "
                        "partition %s: refused as stale (not counted)", rid, ev.time.isoformat(), source)

    async def split_flush():  # type: ignore[no-untyped-def]
        """Under the lock: the batch's entries and rollup rows to Kafka, its states to the table's store; the
        completion waits for Kafka's acks, then produces the states' changelog records and waits for them."""
        nonlocal split_batch
        batch, split_batch = split_batch, SplitBatch()
        sent = await send_keyed(app, cfg.scope_topic, [(scope.encode(), orjson.dumps(entries_batch(scope, rows)))
                                                       for scope, rows in batch.entries.items()])
        sent += await send_keyed(app, cfg.rollups_topic, [(key.encode(), orjson.dumps(rows_record(source, rows)))
                                                          for key, (source, rows) in batch.rows.items()])
        writes = TableWrites(app)
        for rid, (partition, state) in batch.states.items():
            writes.put(w.request_states, partition, rid, state)
        for source, index in closed.items():  # deletes go to their own partition's changelog
            if index.has_due():
                view = PartitionView(writes, w.request_states, int(source))
                stats["forgotten"] += forget_due(view, index, source, cfg.prune_batch)
        return complete(sent, writes)

    async def complete(sent: list[asyncio.Future], writes: TableWrites, then=None) -> None:  # type: ignore[no-untyped-def]
        # Kafka has the sends before the changelog has the table writes: a crash in between re-sends entries
        # (same source offsets) that the scopes skip, or grants and notices with the same ids; the other order
        # would lose them
        if sent:
            await asyncio.gather(*sent)
        await writes.write()
        if then is not None:
            then()

    @app.agent(w.requests, concurrency=1)
    async def split_requests(stream):  # type: ignore[no-untyped-def]
        await batcher("split", stream, split_one, split_flush, cfg.split_within_s).run()

    changed_scopes: dict[str, int] = {}  # scope -> its partition; each written once per flush
    scope_sent: list[asyncio.Future] = []  # grants and notices: in Kafka before the table writes

    async def scope_one(event) -> None:  # type: ignore[no-untyped-def]
        try:
            items = read_scope_record(event.value)
        except dead_letters.READ_ERRORS as exc:
            await dead_letter(event, exc)
            return
        for item in items:
            if await apply_item(item, scope_sent):
                changed_scopes[item.scope] = event.message.partition

    async def scope_flush():  # type: ignore[no-untyped-def]
        sent, changed = list(scope_sent), dict(changed_scopes)
        scope_sent.clear()
        changed_scopes.clear()
        writes = TableWrites(app)
        for scope, partition in changed.items():  # the state as of this flush; the completion writes it
            writes.put(w.scope_ledger, partition, scope, live[scope].to_dict())
        return complete(sent, writes, lambda: dirty.update(changed))

    @app.agent(w.entries, concurrency=1)
    async def scope_ledger(stream):  # type: ignore[no-untyped-def]
        await batcher("scope", stream, scope_one, scope_flush, cfg.scope_within_s).run()

    async def apply_item(item, sent: list) -> bool:  # type: ignore[no-untyped-def]
        """Fold one entry or lease/budget event into its scope; a grant or notice is sent at once.

        A grant goes to Redis without waiting for Kafka's ack: if the worker dies before the batch's
        table write, the request is decided again from the same recovered state, which gives the
        same grant (same id, amount and expiry), so the pod's copy stays true."""
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
            sent.append(await send_event(w.entries, scope, notice))
            stats["notices"] += 1
        if granted is not None:
            sent.append(await send_event(w.entries, scope, granted))
            await projections.grant(granted, cfg.policy.ttl_s + cfg.policy.expiry_grace_s)
            stats["grants"] += 1
        stats["entries"] += 1
        return changed

    rollup_totals: dict[str, tuple[int, RollupTotal]] = {}  # key -> (partition, running total), this batch's

    async def rollup_one(event) -> None:  # type: ignore[no-untyped-def]
        try:
            if event.key is None:
                raise ValueError("a rollups record without a key")
            key, record = event.key.decode(), orjson.loads(event.value)
            check_record(record)
        except dead_letters.READ_ERRORS as exc:
            await dead_letter(event, exc)
            return
        pending = rollup_totals.get(key)
        total = pending[1] if pending is not None else RollupTotal.from_value(w.rollup_table.get(key))
        if apply_rows(total, record) or pending is not None:
            rollup_totals[key] = (event.message.partition, total)

    async def rollup_flush():  # type: ignore[no-untyped-def]
        writes = TableWrites(app)
        for key, (partition, total) in rollup_totals.items():
            writes.put(w.rollup_table, partition, key, total.to_value())
        rollup_totals.clear()
        return complete([], writes)

    @app.agent(w.rollups)
    async def rollups(stream):  # type: ignore[no-untyped-def]
        await batcher("rollups", stream, rollup_one, rollup_flush, cfg.rollup_within_s).run()

    @app.timer(interval=cfg.sweep_interval_s)
    async def sweep() -> None:
        now = datetime.now(timezone.utc)
        for expired in decide_hold_expiries(list(open_requests.items()), now, swept_partitions()):
            await send_event(w.requests, expired.team, expired)
        keep_s = cfg.policy.ttl_s + 2 * cfg.policy.expiry_grace_s
        for state in list(live.values()):
            for lease_expired in decide_lease_expiries(state, now, cfg.policy):
                await send_event(w.entries, state.scope, lease_expired)
            state.forget_closed(now, keep_s)  # in memory; the table value follows at the scope's next write

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

    @app.on_partitions_revoked.connect  # type: ignore[misc]
    async def quiesce(sender, revoked, **kwargs) -> None:  # type: ignore[no-untyped-def]
        # before recovery re-reads the changelogs into the stores: every flush written, its events acknowledged
        # and committed (the next owner of a revoked partition starts after them); see streams.batching
        await asyncio.gather(*(b.pause() for b in batchers.values()))
        if app.consumer.assignment():
            await app.consumer.commit()

    @app.on_rebalance_complete.connect  # type: ignore[misc]
    async def forget(sender, **kwargs) -> None:  # type: ignore[no-untyped-def]
        # partitions moved: re-read states from the (recovered) table; the agents were paused with every change
        # written (``quiesce``), so nothing in memory is newer than the table
        live.clear()
        owned = {str(tp.partition) for tp in app.consumer.assignment() if tp.topic == cfg.requests_topic}
        indexes, opened = index_states(w.request_states.items(), cfg.request_retention_s, owned)
        closed.clear()
        closed.update(indexes)
        open_requests.clear()
        open_requests.update(opened)
        # project the scopes of this worker's partitions only: the table's memory store keeps the keys of
        # partitions that moved to another worker (Faust forgets only those it recovered itself), stale here
        scope_parts = {tp.partition for tp in app.consumer.assignment() if tp.topic == cfg.scope_topic}
        count = app.consumer.topic_partitions(cfg.scope_topic) or cfg.partitions
        dirty.update(scope for scope, _ in w.scope_ledger.items() if key_partition(scope, count) in scope_parts)
        assigned = app.consumer.assignment()
        for b in batchers.values():
            b.keep(assigned)
            if b.dropped or b.holes:
                log.info("rebalance: %d events dropped while paused or stale, %d past a hole (delivered again; "
                         "%d rewinds)", b.dropped, b.holes, b.rewinds)
            b.resume()
