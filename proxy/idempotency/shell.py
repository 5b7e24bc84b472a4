"""The idempotency shell of ``POST /v1/chat/completions`` and ``POST /v1/embeddings``: claim, replay, store or release.

Before admission (so a replay is never admitted nor settled a second time):
``begin`` checks the ``Idempotency-Key`` header (400 naming it if empty or
over 255 characters) and claims the slot of (virtual key, header) with the
fingerprint of the canonical body.

* First use: a non-stream request holds a ``pending`` claim until it ends;
  ``finish`` stores a success as ``done`` (size-capped, 24 h by default) or,
  when it failed or its answer is too big to store, releases the claim so a
  retry runs afresh. A stream records a ``stream`` claim for the TTL.
* A repeat with another body: 422 ``idempotency_key_reused``; nothing billed.
* A non-stream repeat while the first is in flight: 409 ``request_in_progress``.
* A non-stream repeat after success: the stored answer, ``x-fb-idempotent-replay: true``.
* A stream repeat: a new request, its ``request.admitted`` carries ``retry_of``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from proxy.idempotency.port import (
    HEADER,
    REPLAY_HEADER,
    IdempotencyStore,
    Record,
    checked_key,
    conflict,
    fingerprint,
    slot_of,
    storable,
)
from proxy.observe.metrics import Metrics

log = logging.getLogger("farebox.proxy")



class IdempotencyOptions(Protocol):
    @property
    def idempotency_ttl_s(self) -> int: ...
    @property
    def idempotency_max_answer_bytes(self) -> int: ...
    @property
    def hold_ttl_s(self) -> int: ...


class IdempotencyPorts(Protocol):
    """What the shell claims and stores through: the pod's runtime (``proxy.runtime.Runtime``) has it."""

    @property
    def idempotency(self) -> IdempotencyStore: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def options(self) -> IdempotencyOptions: ...


@dataclass(slots=True)
class Idem:
    """One request's claim: ``replay`` set when the answer is already known; ``retry_of`` for a stream retry."""

    slot: str | None = None  # set while this request holds a claim it must finish
    record: Record | None = None
    replay: web.Response | None = None
    retry_of: str | None = None


async def begin(rt: IdempotencyPorts, request: web.Request, body: dict, stream: bool) -> Idem:
    idem_key = checked_key(request.headers.get(HEADER))
    if idem_key is None:
        return Idem()
    slot = slot_of(request["key"].key_id, idem_key)
    fp = fingerprint(body)
    mine = Record(request["request_id"], fp, "stream" if stream else "pending")
    ttl = rt.options.idempotency_ttl_s if stream else min(rt.options.hold_ttl_s, rt.options.idempotency_ttl_s)
    claim = await rt.idempotency.claim(slot, mine, ttl)
    outcomes = rt.metrics.idempotency
    if claim.fresh:
        outcomes.labels("first").inc()
        return Idem(slot=None if stream else slot, record=mine)
    found = claim.record
    refusal = conflict(idem_key, found, fp, stream)
    if refusal is not None:
        outcomes.labels("reused" if refusal.status == 422 else "in_progress").inc()
        raise refusal
    if stream or found.answer is None:
        outcomes.labels("stream_retry").inc()
        return Idem(retry_of=found.request_id)
    outcomes.labels("replayed").inc()
    answer = found.answer
    headers = {**answer.headers, REPLAY_HEADER: "true", "x-fb-replay-of": found.request_id}
    return Idem(replay=web.Response(status=answer.status, body=answer.body, headers=headers))


async def finish(rt: IdempotencyPorts, idem: Idem, response: web.Response | None) -> None:
    """Store the answer of the claim's request, or give the slot back; a no-op without a pending claim.

    Never raises: the answer is already paid for and goes out even if the store fails (then a
    retry meets the pending claim until it expires, and is refused 409, never billed twice).
    """
    if idem.slot is None or idem.record is None:
        return
    slot, idem.slot = idem.slot, None
    try:
        await _finish(rt, idem.record, slot, response)
    except Exception:  # noqa: BLE001 - logged; the caller's answer must not turn into an error
        log.warning("could not record the outcome of Idempotency-Key slot for request %s", idem.record.request_id,
                    exc_info=True)


async def _finish(rt: IdempotencyPorts, record: Record, slot: str, response: web.Response | None) -> None:
    answer = None
    if response is not None and isinstance(response.body, (bytes, bytearray)):
        answer = storable(response.status, bytes(response.body), dict(response.headers),
                          rt.options.idempotency_max_answer_bytes)
    if answer is None:
        await rt.idempotency.release(slot, record.request_id)
        return
    done = Record(record.request_id, record.fingerprint, "done", answer)
    await rt.idempotency.complete(slot, done, rt.options.idempotency_ttl_s)
