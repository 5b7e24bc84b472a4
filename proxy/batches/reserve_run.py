"""Admitting a batch the gateway runs as a whole, and giving back what its unrun lines held (``proxy.batches.reserve``).

``admit_lines`` runs when the batch is created: it funds the sum of its lines' holds through the budget port (a
429 in the API's shape, nothing kept, when it does not fit) and records one ``request.admitted`` per line in the
same event-loop turn (the port's contract). ``Releases`` runs in each process's batch runner: for every ended batch
still ``releasing`` it records one ``request.settled`` per unrun line (charging nothing), waits until the log
holds them durably, and only then tells the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import datetime, timezone
from typing import Any

from proxy.admission.budget_port import BudgetAsk
from proxy.batches import reserve
from proxy.batches.lines import Line
from proxy.batches.records import BatchRecord
from proxy.errors import BudgetRefused, GatewayError
from proxy.metering.settlement import scopes_of
from proxy.snapshot import KeyRecord, Snapshot

log = logging.getLogger("farebox.batches")

CHUNK = 25  # lines priced, funded and recorded in one event-loop turn (about 3 ms of this process)
DUTY = 1 / 3  # creating a batch takes at most this share of the process while it runs
API = {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings", "/v1/messages": "messages"}


async def admit_lines(rt: Any, key: KeyRecord, record: BatchRecord, snap: Snapshot, lines: list[Line], window_s: int,
                      native: reserve.Native | None = None) -> tuple[BatchRecord, list[Line]]:
    """Hold every line of the new batch ``record`` (module docstring): the record with its ``reserved`` block and
    the lines, each with its hold. Raises the caller's error (429 ``budget_exhausted`` / ``budget_reserved``, 503
    when the log refused) with nothing held.

    ``CHUNK`` lines at a time are priced, funded and recorded in one event-loop turn (the port's contract: the
    funding and its ``request.admitted`` one step; about 3 ms of this process), then the process rests twice that
    long (``DUTY``), so creating a batch never stalls the requests it serves beside it, nor trips the door's
    measure of the loop's lag (a 5,000-line batch is held in about 2 s, 50,000 lines in about 20). A chunk that
    cannot be funded gives back the chunks before it and refuses the batch."""
    at = datetime.fromtimestamp(rt.clock(), timezone.utc)
    block: dict[str, Any] | None = None
    api = API.get(record.endpoint, "chat")
    recorded: list[tuple[int, int]] = []
    held_lines: list[Line] = []
    for start in range(0, len(lines), CHUNK):
        began = time.perf_counter()
        part = lines[start:start + CHUNK]
        planned = reserve.plan(snap, key, record.endpoint, part, rt.estimator, at, native,
                               snap.budgets.per_request_cap_micro)
        if block is None:
            block = reserve.block(key, scopes_of(key, None), snap.currency, planned.price_version, window_s)
        held = [(ln, h, est) for ln, h, est in zip(part, planned.holds, planned.estimates) if h is not None]
        ask = BudgetAsk(request_id=f"{record.id}.{start // CHUNK}", scopes=block["scopes"], hold_micro=planned.total,
                        est_input=planned.est_input, max_output=planned.max_output, now_s=rt.clock(),
                        key_id=key.key_id, cap_micro=planned.dearest, hold_ttl_s=block["hold_ttl_s"])
        try:
            funding = await rt.budgets.admit(snap, ask)
        except GatewayError:
            give_back(rt, record.id, block, recorded)
            raise
        # From the funding to the chunk's request.admitted: no await (the port's contract).
        if funding.hold_micro is not None and funding.hold_micro < planned.total:  # right-sized: not the chunk
            rt.budgets.release(ask.request_id)
            give_back(rt, record.id, block, recorded)
            raise BudgetRefused("This batch's lines cannot all be held now (requests in flight hold the rest of its "
                                "budgets). Retry later, or split the batch.", code="budget_reserved",
                                scope=ask.scopes[0], retry_after_s=60)
        for line, h, est in held:
            if not rt.recorder.emit(reserve.admitted(record.id, line, h, est, block, key, snap, api,
                                                     rt.options.pod_id, funding.leases, at)):
                rt.budgets.release(ask.request_id)
                give_back(rt, record.id, block, recorded)
                raise GatewayError("The event log cannot record the batch's admission right now; retry shortly.",
                                   status=503, code="event_log_unavailable", headers={"Retry-After": "1"})
            recorded.append((line.number, h))
        for notice in funding.events:
            rt.recorder.emit(notice)
        rt.budgets.handed_over(ask.request_id)
        held_lines += [Line(ln.number, ln.custom_id, ln.model, ln.body, h) for ln, h in zip(part, planned.holds)]
        await asyncio.sleep((time.perf_counter() - began) * (1 / DUTY - 1))
    if block is None:  # (no lines: a batch with none fails validation before this)
        block = reserve.block(key, scopes_of(key, None), snap.currency, 0, window_s)
    return dataclasses.replace(record, reserved=block), held_lines


def give_back(rt: Any, batch_id: str, block: dict[str, Any], lines: list[tuple[int, int]]) -> None:
    """Release the holds of ``lines`` ((number, hold)) recorded for a batch that will not run (the store could not
    keep it, a later chunk was refused, the log refused a line)."""
    at = datetime.now(timezone.utc)
    for number, held in lines:
        rt.recorder.emit(reserve.released(batch_id, number, held, block, at))
        rt.budgets.settle(reserve.line_id(batch_id, number), {})


class Releases:
    """The runner's step (``proxy.batches.runner.Runner.release_holds``): release the holds of every ended batch's
    unrun lines, durably, then mark the batch released. A failed step is tried again at the next."""

    def __init__(self, rt: Any, store: Any) -> None:
        self.rt, self.store = rt, store

    async def __call__(self) -> None:
        for batch in await self.store.releasing():
            await self._release(batch)

    async def _release(self, batch: BatchRecord) -> None:
        r = batch.reserved
        if r is None or not r.get("release"):
            await self.store.released(batch.id)
            return
        at = datetime.fromtimestamp(self.rt.clock(), timezone.utc)
        events = [reserve.released(batch.id, n, held, r, at) for n, held in r["release"]]
        appended = [self.rt.recorder.appended(e) for e in events]
        if any(fut is None for fut in appended):
            log.warning("batch %s: the event log refused its unrun lines' releases; retrying", batch.id)
            return
        await asyncio.gather(*appended)  # durable before the store says released (a retry repeats the same ids)
        for event in events:
            self.rt.budgets.settle(event.request_id, {})
        await self.store.released(batch.id)
        log.info("batch %s %s: %d unrun lines' holds released", batch.id, batch.status, len(events))
