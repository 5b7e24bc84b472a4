"""``OwnerIdempotency``: the idempotency store of ``farebox serve --workers N``, held by the owner process.

A client's retry may reach another gateway process than its first try (the
kernel spreads connections over the processes sharing the port), so the
slots live in one ``MemoryIdempotency`` in the owner; each gateway process
reaches it through ``call`` (a request over the owner's socket:
``streams.local.log.LocalEventLog.call``), one round trip per request that
carries an ``Idempotency-Key`` (and none for the others). ``handlers`` is the
owner's side: the same three operations on its store, keyed by the names
``call`` sends. Records travel as ``Record.dumps``, so both sides keep the
port's contract: a claim is atomic because the owner answers calls on one
event loop, without an ``await`` between reading and writing a slot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from proxy.idempotency.port import Claim, IdempotencyStore, Record

Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class OwnerIdempotency:
    """``IdempotencyStore`` whose slots the owner process keeps (see the module docstring)."""

    def __init__(self, call: Call) -> None:
        self.call = call

    async def claim(self, slot: str, record: Record, ttl_s: float) -> Claim:
        answer = await self.call("idem.claim", {"slot": slot, "record": record.dumps().decode(), "ttl": ttl_s})
        return Claim(bool(answer["fresh"]), Record.loads(answer["record"]))

    async def complete(self, slot: str, done: Record, ttl_s: float) -> bool:
        answer = await self.call("idem.complete", {"slot": slot, "record": done.dumps().decode(), "ttl": ttl_s})
        return bool(answer["ok"])

    async def release(self, slot: str, request_id: str) -> None:
        await self.call("idem.release", {"slot": slot, "request_id": request_id})

    async def close(self) -> None:
        """The owner's store outlives a gateway process: nothing to close here."""


def handlers(store: IdempotencyStore) -> dict[str, Handler]:
    """The owner's side of ``OwnerIdempotency``'s calls, over ``store``."""

    async def claim(args: dict[str, Any]) -> dict[str, Any]:
        found = await store.claim(str(args["slot"]), Record.loads(args["record"]), float(args["ttl"]))
        return {"fresh": found.fresh, "record": found.record.dumps().decode()}

    async def complete(args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": await store.complete(str(args["slot"]), Record.loads(args["record"]), float(args["ttl"]))}

    async def release(args: dict[str, Any]) -> dict[str, Any]:
        await store.release(str(args["slot"]), str(args["request_id"]))
        return {}

    return {"idem.claim": claim, "idem.complete": complete, "idem.release": release}
