"""Driving the batches a provider runs: send, poll, cancel, and read back, meter and settle the results.

Every gateway process's batch runner calls ``ProviderRuns.tick`` every ``poll_s``; each active provider batch
moves through its ``provider`` block's ``phase`` by compare-and-set in the batch store, so of many processes
one takes each step:

* ``new`` -> ``submitting`` (this process sends it) -> ``running`` with the provider's id. A process that died
  while sending leaves ``submitting``; after ``STALE_S`` another asks the provider whether the batch arrived
  (OpenAI: by the ``farebox_batch`` metadata) and adopts it, else sends it again (Anthropic's Message Batches
  cannot be found again: a lost answer to a send that did arrive would run the batch twice at the provider;
  farebox bills only the results of the batch it knows).
* ``running``: polled; a batch cancelled by its owner is cancelled at the provider (once).
* ended at the provider -> ``finishing`` (this process) -> the results are read, each line that ran metered
  (``proxy.batches.provider_money``: one ``request.attempted`` per line, then one ``request.settled`` for the
  batch, appended and durable *before* the store keeps the results), then ``end_provider`` ends the batch with its
  files in one transaction. A process dying in between leaves ``finishing``; after ``STALE_S`` another reads the
  results again and appends the same events (same ids: every consumer keeps the first), so no line is billed twice
  and none is lost.

A provider that refuses or garbles an answer is retried on the next tick (``BatchAPIError.retry``); one whose
results cannot be read at all (``retry`` False) fails the batch with the reason in the log: its hold then
expires, charged in full, the conservative choice recorded in ``hold.expired``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable

import aiohttp
import orjson

from ledger.events import RequestAttempted
from proxy.batches import provider_money as money
from proxy.batches.objects import new_file_id, unrun_line
from proxy.batches.records import BatchRecord, ProviderBatchStore, ProviderLine
from proxy.errors import GatewayError
from proxy.upstream import batch_api
from proxy.upstream.dialects import get_dialect
from proxy.upstream.passthrough import NativeMessages

log = logging.getLogger("farebox.batches")
STALE_S = 120  # a step left this long by a process is taken over by another


class ProviderRuns:
    """One process's driver of provider batches (module docstring)."""

    def __init__(self, store: ProviderBatchStore, runner_id: str, session: Callable[[], aiohttp.ClientSession],
                 runtime: Any, poll_s: float = 30.0, clock: Callable[[], float] = time.time) -> None:
        self.store, self.runner_id, self.session, self.rt = store, runner_id, session, runtime
        self.poll_s, self.clock = poll_s, clock
        self.polled = 0.0

    async def tick(self, force: bool = False) -> None:
        if not force and self.clock() < self.polled + self.poll_s:
            return
        self.polled = self.clock()
        for batch in await self.store.provider_batches():
            try:
                await self._step(batch)
            except batch_api.BatchAPIError as exc:
                if exc.retry:
                    log.warning("provider batch %s: %s; trying again in %.0fs", batch.id, exc, self.poll_s)
                else:
                    log.error("provider batch %s cannot be read back: %s; it fails and its hold expires charged",
                              batch.id, exc)
                    await self.store.end_provider(batch.id, "failed", [], int(self.clock()), new_file_id, unrun_line)
            except GatewayError as exc:  # the deployment's credentials
                log.warning("provider batch %s: %s", batch.id, exc.message)

    async def _step(self, batch: BatchRecord) -> None:
        p = batch.provider
        assert p is not None
        now = int(self.clock())
        phase = p["phase"]
        stale = now >= p.get("since", 0) + STALE_S
        if phase == "new" and batch.status == "cancelling":  # cancelled before it was sent: nothing ran
            claimed = {**p, "phase": "finishing", "final": "cancelled", "by": self.runner_id, "since": now}
            if await self.store.set_provider(batch.id, p, claimed):
                await self._finish(batch, claimed, now)
        elif phase == "new" or (phase == "submitting" and stale):
            await self._submit(batch, p, now)
        elif phase == "running":
            dep, secret = await self._deployment(p)
            if batch.status == "cancelling" and not p.get("cancel_sent"):
                await batch_api.cancel(self.session(), dep, secret, p["provider_id"])
                await self.store.set_provider(batch.id, p, {**p, "cancel_sent": True})
                return
            state = await batch_api.state(self.session(), dep, secret, p["provider_id"])
            if state.ended:
                claimed = {**p, "phase": "finishing", "final": state.final, "by": self.runner_id, "since": now}
                if await self.store.set_provider(batch.id, p, claimed):
                    await self._finish(batch, claimed, now)
        elif phase == "finishing" and stale:
            claimed = {**p, "by": self.runner_id, "since": now}
            if await self.store.set_provider(batch.id, p, claimed):
                await self._finish(batch, claimed, now)

    async def _deployment(self, p: dict[str, Any]) -> tuple[Any, str | None]:
        dep = self.rt.snapshot.deployments.get(p["deployment"])
        if dep is None:
            raise batch_api.BatchAPIError(f"deployment {p['deployment']} is no longer configured")
        return dep, self.rt.upstream.secret_for(dep)

    async def _submit(self, batch: BatchRecord, p: dict[str, Any], now: int) -> None:
        sending = {**p, "phase": "submitting", "by": self.runner_id, "since": now}
        if not await self.store.set_provider(batch.id, p, sending):
            return  # another process took the step
        dep, secret = await self._deployment(p)
        found = None
        if p["phase"] == "submitting":  # a process died sending it: did the provider get it?
            found = await batch_api.find(self.session(), dep, secret, batch.id)
        if found is None:
            numbers = [(n, orjson.loads(_translator(p, body).chat_request(orjson.loads(body), dep, None,
                                                                          max_output_tokens=est[1]).body))
                       for (n, _, body), est in zip(await self.store.batch_lines(batch.id), p["estimates"])]
            try:
                found = await batch_api.submit(self.session(), dep, secret, numbers, batch.id)
            except batch_api.BatchAPIError:
                await self.store.set_provider(batch.id, sending, {**p, "phase": "new"})  # next tick, again
                raise
        await self.store.set_provider(batch.id, sending, {**sending, "phase": "running", "provider_id": found})
        log.info("batch %s sent to deployment %s as %s", batch.id, dep.id, found)

    async def _finish(self, batch: BatchRecord, p: dict[str, Any], now: int) -> None:
        dep, secret = await self._deployment(p)
        lines = {n: (custom_id, orjson.loads(body)) for n, custom_id, body in await self.store.batch_lines(batch.id)}
        results = (await batch_api.results(self.session(), dep, secret, p["provider_id"], set(lines))
                   if p.get("provider_id") else [])
        dialect = _translator(p, b"{}")
        at = datetime.fromtimestamp(self.clock(), timezone.utc)
        snapshot = self.rt.snapshot
        numbers = sorted(lines)
        estimates = dict(zip(numbers, (tuple(e) for e in p["estimates"])))
        attempts: list[RequestAttempted] = []
        answers: list[ProviderLine] = []
        for r in sorted(results, key=lambda r: r.number):
            ok, status, answer, reported, chat = r.ok, r.status, r.body, None, None
            if ok:
                try:
                    parsed = dialect.parse_chat(answer if isinstance(answer, dict) else {})
                    answer, reported, chat = parsed.native if p.get("native") else parsed.body, parsed.usage, parsed.body
                except GatewayError as exc:  # an error inside a 200, or an answer without its parts
                    ok, status, answer = False, exc.status, {"error": {"message": exc.message, "code": exc.code}}
            if ok:
                est = estimates[r.number]
                usage = money.line_usage(reported, est, chat, dep.context_window + est[1])
                cost = money.cost(snapshot, p, usage, at)
                listed = money.cost(snapshot, p, replace(usage, service_tier=None), at)  # the savings' measure
                attempts.append(money.attempted(batch.id, p, r.number, True, status, usage, cost, at))
            else:
                cost = listed = 0
            custom_id = lines[r.number][0]
            answers.append(ProviderLine(r.number, ok, money.output_line(batch.id, r.number, custom_id, p["alias"], ok,
                                                                        status, answer, cost, p, now),
                                        f"{batch.id}-{r.number}", cost, listed))
        recorder = self.rt.recorder
        appended = [recorder.appended(event) for event in attempts]
        if any(fut is None for fut in appended):  # the log refused: the next process to take the step tries again
            raise batch_api.BatchAPIError("the event log refused the batch's line events")
        settled = money.settled(batch.id, p, attempts, p["final"], at)
        await recorder.record(settled)  # every event durable before the store says the batch ended
        await asyncio.gather(*[fut for fut in appended if fut is not None])
        self.rt.budgets.settle(batch.id, dict(settled.cost_by_scope))
        ended = await self.store.end_provider(batch.id, p["final"], answers, now, new_file_id, unrun_line)
        if ended is not None:
            log.info("batch %s %s at deployment %s: %d lines ran, cost %d micro", batch.id, ended.status, dep.id,
                     len(attempts), settled.cost_micro)


def _translator(p: dict[str, Any], body: bytes) -> Any:
    """How a line goes to the deployment and its answer comes back: its dialect's translation, or, for Messages
    requests of the Anthropic surface, as they are (``NativeMessages``)."""
    if p.get("native"):
        return NativeMessages(orjson.loads(body), None)
    return get_dialect(p["dialect"])
