"""The batch runner: every gateway process feeds batch lines through its own request path, at batch priority.

Each process runs one: it claims up to ``concurrency`` lines at a time from the shared ``BatchStore`` (teams in
turn, each team's oldest batch first), sends each to its own gateway over a private Unix socket (``internal_socket``; the directory is
the process owner's alone) as the batch's key, and keeps the answer as the line's output. So a batch line is
admitted, rate-limited, routed, metered and settled exactly as an interactive request of that key is: holds
and charges on the key's budgets, one ``request.*`` event trail per line tagged ``fb.batch=<batch id>``, and the
door's overload protection in front of it.

A line's first run carries the hold its batch took for it at creation (``x-fb-batch-held``:
``proxy.batches.reserve``), which the gateway uses instead of asking the budget again.

What the answer means for the line (``outcome``): a 2xx goes to the output file; the gateway saying "not now"
(429 or 503 that the caller may retry: the key's rate limits, ``batch_paused``, the door's overload, a provider
at capacity, the pod draining) gives the line back to run later (it does not count as a run): under the same
request id (and hold) when the gateway turned it away before admitting it (``x-fb-batch-unused``), else under the
next generation of its id. A 503 (the process is busy: its door keeps batch lines out past
``batches.cpu_ceiling`` of a core, and lets one in only in a gap between interactive requests) pauses the runner
for the ``Retry-After``; the runner asks the door's reading (``may_claim``) before it claims lines at all, so a
busy process takes none; a connection failure to the own socket the same (the line keeps its id). Any other
answer is the line's final error, in the error file. A refused budget is final (``x-should-retry: false``). When
a batch admitted whole ends, the runner gives back what its unrun lines held (``release_holds``).

The internal request carries a per-process token (``Runner.token``) that the gateway checks before it takes
``x-fb-batch-key`` as the caller; the token never leaves the process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections import deque
from typing import Any, Awaitable, Callable

import aiohttp
import orjson

from proxy.batches.canary import CANARY_HEADER
from proxy.batches.objects import new_file_id, output_line, unrun_line
from proxy.batches.records import Answer, BatchStore, Claimed
from proxy.errors import NOT_ADMITTED_HEADER

log = logging.getLogger("farebox.batches")

WRITE_DELAY_S = 0.05  # answers gathered this long are kept in one transaction
FINISH_EVERY_S = 5  # batches past their window are looked for this often (ended ones as their lines are answered)
RECHECK_S = 0.5  # lines claimed ahead are checked against their batch's status this often
PREFETCH = 8  # lines claimed per slot in one claim: the store's work per line is a fraction of a claim
BUSY_PAUSE_S = 0.1  # the process is busy (``may_claim``): look again this much later
TOKEN_HEADER = "x-fb-batch-token"
KEY_HEADER = "x-fb-batch-key"
BATCH_HEADER = "x-fb-batch-id"
LINE_HEADER = "x-fb-batch-request"  # the line's request id: ``line_request_id``
HELD_HEADER = "x-fb-batch-held"  # the hold its batch took for it (``proxy.batches.reserve``): the run uses it
UNUSED_HEADER = NOT_ADMITTED_HEADER  # the gateway's answer: turned away before admission, nothing recorded
SHADOW_HEADER = "x-fb-shadow-of"  # a shadow leg: the alias whose request it copies (``proxy.api.internal``)
MAX_SHADOWS = 16  # shadow legs in flight per process; past it a leg is dropped (shadows go first under pressure)
LINE_ID = re.compile(r"(msg)?batch_[0-9a-f]{24}-[0-9]{1,6}(\.[0-9]{1,6})?")


def line_request_id(batch_id: str, number: int, generation: int = 0) -> str:
    """A line's request id, the same every time it runs in one ``generation``: a line run again because its
    runner died mid-request has the same event ids, so it is admitted, charged and settled once (every
    consumer of the events keeps the first of an id). A line the gateway refused ("not now") and that was
    given back runs in the next generation, under a new id: the refused run closed at what it cost."""
    return f"{batch_id}-{number}" if generation == 0 else f"{batch_id}-{number}.{generation}"


def outcome(status: int, headers: dict[str, str] | aiohttp.typedefs.LooseHeaders) -> str:
    """``ok`` | ``later`` (nothing was served: run it again) | ``error`` (the line's final answer)."""
    if 200 <= status < 300:
        return "ok"
    if status in (429, 503, 529) and headers.get("x-should-retry", "true") != "false":  # 529: Anthropic's 503  # type: ignore[union-attr]
        return "later"
    return "error"


def retry_after_s(headers: dict[str, str] | aiohttp.typedefs.LooseHeaders, floor: int = 1) -> int:
    raw = headers.get("Retry-After")  # type: ignore[union-attr]
    try:
        return max(floor, min(3600, int(float(raw)))) if raw is not None else floor
    except ValueError:
        return floor


def pause_s(headers: dict[str, str] | aiohttp.typedefs.LooseHeaders) -> float:
    """How long a busy process asks the runner to wait: ``retry-after-ms`` when given, else ``Retry-After``."""
    raw = headers.get("retry-after-ms")  # type: ignore[union-attr]
    try:
        return min(60.0, max(0.01, float(raw) / 1000)) if raw is not None else float(retry_after_s(headers))
    except ValueError:
        return float(retry_after_s(headers))


class Runner:
    """One process's batch runner (module docstring); ``run`` until cancelled, ``wake`` when a batch starts."""

    def __init__(self, store: BatchStore, socket_path: str, runner_id: str, *, concurrency: int = 2,
                 claim_s: int = 60, poll_s: float = 1.0, clock: Callable[[], float] = time.time,
                 observe: Callable[[str], None] = lambda outcome: None,
                 gauges: Callable[[int, int], None] = lambda queued, running: None,
                 provider: Any = None, may_claim: Callable[[], bool] = lambda: True,
                 release_holds: Callable[[], Awaitable[None]] | None = None) -> None:
        self.store, self.socket_path, self.runner_id = store, socket_path, runner_id
        self.concurrency, self.claim_s, self.poll_s, self.clock = concurrency, claim_s, poll_s, clock
        self.observe, self.gauges = observe, gauges  # a line's outcome; (queued, running) every few seconds
        self.counted = 0.0  # when the queue was last counted
        self.token = secrets.token_urlsafe(32)
        self.woken = asyncio.Event()
        self.tasks: dict[asyncio.Task[None], Claimed] = {}  # the lines in flight
        self.ready: deque[Claimed] = deque()  # lines claimed ahead (``PREFETCH``), not yet sent
        self.checked = 0.0  # when the batches of ``ready`` were last known to run
        self.stopping = False
        self.renewed = 0.0  # when the claims in flight were last renewed
        self.paused_until = 0.0  # the gateway said "not now": no new line before this
        self.answered: list[Answer] = []  # answers not yet kept in the store (``_write``)
        self.shadows: set[asyncio.Task[None]] = set()  # shadow legs in flight (``send_shadow``)
        self.writer: asyncio.Task[None] | None = None
        self.session: aiohttp.ClientSession | None = None
        self.may_claim = may_claim  # this process's door would let a batch line in (asked before claiming one)
        self.provider = provider  # the batches a provider runs (``proxy.batches.provider_run.ProviderRuns``)
        self.release_holds = release_holds  # ended batches' unrun lines' holds given back (``reserve_run``)
        self.provider_due = True  # a batch was created or cancelled: the provider batches are looked at now
        self.finish_due = True  # lines were answered or a batch cancelled: batches that can end are ended now
        self.finished = 0.0  # when batches that could end were last looked for (also their windows: every few s)

    def wake(self) -> None:
        self.provider_due = self.finish_due = True
        self.woken.set()

    async def run(self) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=self.socket_path),
                                             timeout=aiohttp.ClientTimeout(total=None))
        try:
            while not self.stopping:
                try:
                    await self._round()
                except Exception:  # noqa: BLE001 - the store is down or a bug: log, wait, go on
                    log.exception("batch runner round failed; retrying in %.0fs", self.poll_s)
                    await asyncio.sleep(self.poll_s)
        finally:
            await self.session.close()

    async def _round(self) -> None:
        now = int(self.clock())
        if now >= self.renewed + self.claim_s / 3:  # the heartbeat: keep the lines in flight and claimed ahead ours
            await self.store.renew([*self.tasks.values(), *self.ready], self.runner_id, now + self.claim_s)
            self.renewed = now
        if now >= self.counted + 5:
            self.gauges(await self.store.queued(), len(self.tasks))
            self.counted = now
        if self.provider is not None and not self.stopping:
            due, self.provider_due = self.provider_due, False
            await self.provider.tick(force=due)
        if self.finish_due or now >= self.finished + FINISH_EVERY_S:  # lines answered, a cancel, or the time
            self.finish_due, self.finished = False, now
            await self._finish(now)
            if self.release_holds is not None:
                await self.release_holds()
        free = self.concurrency - len(self.tasks) if self.clock() >= self.paused_until else 0
        if free > 0 and not self.may_claim():  # busy: claim nothing (a claim given back is two writes for nothing)
            self.paused_until, free = self.clock() + BUSY_PAUSE_S, 0
        claimed: list[Claimed] = []
        if free > len(self.ready):  # claim several turns ahead: one transaction for many lines
            claimed = await self.store.claim(self.runner_id, now, now + self.claim_s,
                                             self.concurrency * PREFETCH - len(self.ready))
            if not self.tasks and not self.ready:
                self.renewed = now
            self.ready.extend(claimed)
            self.checked = self.clock()
        elif free > 0 and self.ready and self.clock() >= self.checked + RECHECK_S:
            await self._drop_stopped()
        for _ in range(min(free, len(self.ready))):
            line = self.ready.popleft()
            task = asyncio.get_running_loop().create_task(self._line(line), name=f"batch-line-{line.batch_id}")
            self.tasks[task] = line
            task.add_done_callback(self._ended)
        if claimed and len(self.tasks) < self.concurrency:
            return  # more may be waiting: claim again at once
        if self.ready and len(self.tasks) < self.concurrency and self.clock() >= self.paused_until:
            return  # lines claimed ahead and a free slot: start them now
        self.woken.clear()
        try:
            wait = min(self.poll_s, self.claim_s / 3)
            if self.paused_until > self.clock():
                wait = min(wait, max(0.01, self.paused_until - self.clock()))
            await asyncio.wait_for(self.woken.wait(), wait)
        except TimeoutError:
            pass

    async def _drop_stopped(self) -> None:
        """Give back the lines claimed ahead whose batch stopped (cancelled, expired) since: a line not started
        when its batch is cancelled does not run (one started within ``RECHECK_S`` of the cancel may)."""
        self.checked = self.clock()
        running = await self.store.running({line.batch_id for line in self.ready})
        for line in [x for x in self.ready if x.batch_id not in running]:
            self.ready.remove(line)
            await self.store.release(line, self.runner_id, int(self.clock()), used=False)

    async def _finish(self, now: int) -> None:
        for ended in await self.store.finish(now, new_file_id, unrun_line):
            log.info("batch %s %s: %d completed, %d failed", ended.id, ended.status, ended.counts.completed,
                     ended.counts.failed)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("batch line failed", exc_info=task.exception())
        self.woken.set()  # a slot is free

    def _internal(self, headers: dict[str, str]) -> dict[str, str]:
        """An internal request's headers: ``headers``, this process's token and a JSON body."""
        return {TOKEN_HEADER: self.token, **headers, "Content-Type": "application/json"}

    async def _line(self, line: Claimed) -> None:
        assert self.session is not None
        rid = line_request_id(line.batch_id, line.number, line.generation)
        headers = self._internal({KEY_HEADER: line.key_id, BATCH_HEADER: line.batch_id, LINE_HEADER: rid})
        if line.held is not None and line.generation == 0:  # its batch was admitted whole: this run has its hold
            headers[HELD_HEADER] = str(line.held)
        try:
            async with self.session.post(f"http://farebox{line.endpoint}", data=line.body, headers=headers) as resp:
                raw = await resp.read()
                status, got = resp.status, resp.headers
                request_id = got.get("x-fb-request-id")
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("batch line %s/%d not sent (%s); it runs again later", line.batch_id, line.number,
                        type(exc).__name__)
            await self.store.release(line, self.runner_id, int(self.clock()) + 1, used=False)  # (a repeat: same id)
            self.observe("later")
            return
        verdict = outcome(status, got)
        self.observe(verdict)
        if verdict == "later":  # the line waits; a busy process (503) makes the runner wait too
            if status in (503, 529):
                self.paused_until = max(self.paused_until, self.clock() + pause_s(got))
                wait = 0
            else:
                wait = retry_after_s(got)
            await self.store.release(line, self.runner_id, int(self.clock()) + wait, used=got.get(UNUSED_HEADER) != "1")
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        self.answered.append(Answer(line, verdict == "ok", output_line(line.custom_id, status, request_id, body),
                                    request_id, _cost(body), _cost(body, "list_cost_micro")))
        if self.writer is None or self.writer.done():
            self.writer = asyncio.get_running_loop().create_task(self._write(WRITE_DELAY_S), name="batch-writer")

    async def _write(self, delay_s: float) -> None:
        """Keep the answers gathered over ``delay_s`` in one transaction of the store (one thread hop and one
        commit for many lines: the store's work competes with the gateway's own for the process)."""
        await asyncio.sleep(delay_s)
        while self.answered:
            answers, self.answered = self.answered, []
            kept = await self.store.done_many(answers, self.runner_id)
            self.finish_due = True
            if kept < len(answers):
                log.warning("%d batch lines answered after their claims passed to another runner", len(answers) - kept)

    def send_shadow(self, alias: str, body: bytes, data_class: str) -> None:
        """Send a copy of a request to ``alias``'s shadow candidate, in the background (the caller has its answer
        already and never waits); dropped when ``MAX_SHADOWS`` are in flight or the runner is stopping. Its own
        door, limits and batch priority apply to it: under pressure it is refused, and not retried."""
        if self.stopping or self.session is None or len(self.shadows) >= MAX_SHADOWS:
            self.observe("shadow_dropped")
            return
        task = asyncio.get_running_loop().create_task(self._shadow(alias, body, data_class), name="shadow-leg")
        self.shadows.add(task)
        task.add_done_callback(self.shadows.discard)

    async def _shadow(self, alias: str, body: bytes, data_class: str) -> None:
        assert self.session is not None
        headers = self._internal({SHADOW_HEADER: alias, "x-fb-data-class": data_class})
        try:
            async with self.session.post("http://farebox/v1/chat/completions", data=body, headers=headers) as resp:
                await resp.read()
                self.observe("shadow_ok" if resp.status == 200 else "shadow_refused" if outcome(
                    resp.status, resp.headers) == "later" else "shadow_error")
        except (aiohttp.ClientError, OSError):
            self.observe("shadow_dropped")

    async def post_canary(self, probe: Any, timeout_s: float) -> tuple[int, bytes]:
        """One synthetic-canary probe (``proxy.batches.canary``) to the own gateway: its status and body."""
        assert self.session is not None
        headers = self._internal({CANARY_HEADER: probe.deployment})
        async with self.session.post(f"http://farebox{probe.path}", data=probe.body, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status, await resp.read()

    async def stop(self, timeout_s: float) -> None:
        """Claim nothing more, give back the lines claimed ahead; let the lines in flight finish (up to
        ``timeout_s``) and keep their answers."""
        self.stopping = True
        self.woken.set()
        while self.ready:
            await self.store.release(self.ready.popleft(), self.runner_id, int(self.clock()), used=False)
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)
        if self.writer is not None:
            await asyncio.gather(self.writer, return_exceptions=True)
        await self._write(0)


def _cost(body: object, field: str = "cost_micro") -> int | None:
    """What the answer's ``x_farebox`` block says the request cost (micro-units; ``list_cost_micro``: at the
    standard price, said when a tier made it differ), if it says."""
    block = body.get("x_farebox") if isinstance(body, dict) else None
    cost = block.get(field) if isinstance(block, dict) else None
    return cost if isinstance(cost, int) and not isinstance(cost, bool) else None
