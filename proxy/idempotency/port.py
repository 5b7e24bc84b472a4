"""The ``IdempotencyStore`` port and the pure rules of idempotent retries.

A slot is one ``Idempotency-Key`` of one virtual key. Its record says which
request first claimed it, the fingerprint of that request's canonical body,
and its state:

* ``pending``: a non-stream request is in flight; a repeat gets 409
  ``request_in_progress``. The claim expires after ``pending_ttl_s`` (a pod
  that died mid-request does not lock the key for a day).
* ``done``: the stored answer (status, body, headers); a repeat replays it,
  billed nothing.
* ``stream``: a stream used the key; a repeat is a new request linked to the
  first by ``retry_of``.

Invariants every adapter keeps (the contract suite checks both):
``claim`` is atomic (of two racing claims exactly one gets ``fresh``); a
record is only ever replaced by ``complete`` or removed by ``release`` of the
request that holds it; records vanish after their TTL.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import orjson

from proxy.errors import GatewayError, InvalidRequest
from proxy.hashing import sha256_hex

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
REPLAY_HEADER = "x-fb-idempotent-replay"

State = Literal["pending", "done", "stream"]


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    status: int
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Record:
    request_id: str  # the request that first claimed the slot
    fingerprint: str  # sha256 of its canonical body
    state: State
    answer: StoredAnswer | None = None

    def dumps(self) -> bytes:
        answer = None if self.answer is None else {
            "status": self.answer.status, "body": self.answer.body.decode(), "headers": self.answer.headers}
        return orjson.dumps({"rid": self.request_id, "fp": self.fingerprint, "state": self.state, "answer": answer})

    @staticmethod
    def loads(data: bytes | str) -> "Record":
        d = orjson.loads(data)
        a = d.get("answer")
        answer = None if a is None else StoredAnswer(a["status"], a["body"].encode(), dict(a["headers"]))
        return Record(d["rid"], d["fp"], d["state"], answer)


@dataclass(frozen=True, slots=True)
class Claim:
    """What ``claim`` found: ``fresh`` (the slot is now this request's) or the record already there."""

    fresh: bool
    record: Record


@runtime_checkable
class IdempotencyStore(Protocol):
    async def claim(self, slot: str, record: Record, ttl_s: float) -> Claim:
        """Store ``record`` if the slot is empty (atomically), else return what is there."""
        ...

    async def complete(self, slot: str, done: Record, ttl_s: float) -> bool:
        """The slot's pending record of ``done.request_id`` becomes ``done``; False if it is not ours now."""
        ...

    async def release(self, slot: str, request_id: str) -> None:
        """Remove the slot if ``request_id`` holds it (the request failed: a retry runs afresh)."""
        ...

    async def close(self) -> None: ...


class SlotRules:
    """The contract's rules over one slot, for a store whose ``_get``/``_put``/``_drop`` run with nothing else
    between them (one process's map, one thread's connection): ``_claim``, ``_complete``, ``_release``."""

    def _get(self, slot: str) -> Record | None: ...  # the live record (None: none, or expired)

    def _put(self, slot: str, record: Record, ttl_s: float) -> None: ...

    def _drop(self, slot: str) -> None: ...

    def _claim(self, slot: str, record: Record, ttl_s: float) -> Claim:
        found = self._get(slot)
        if found is not None:
            return Claim(False, found)
        self._put(slot, record, ttl_s)
        return Claim(True, record)

    def _complete(self, slot: str, done: Record, ttl_s: float) -> bool:
        found = self._get(slot)
        if found is None or found.request_id != done.request_id or found.state != "pending":
            return False
        self._put(slot, done, ttl_s)
        return True

    def _release(self, slot: str, request_id: str) -> None:
        found = self._get(slot)
        if found is not None and found.request_id == request_id:
            self._drop(slot)


class IdempotencyConflict(GatewayError):
    """The client's own repeat clashes with the slot (409 in progress, 422 reused with another body)."""

    type = "invalid_request_error"


def checked_key(value: str | None) -> str | None:
    """The header's value, or a 400 naming the header when it is empty or too long."""
    if value is None:
        return None
    if not value.strip():
        raise InvalidRequest(f"The {HEADER} header must not be empty.", param=HEADER, code="invalid_idempotency_key")
    if len(value) > MAX_KEY_CHARS:
        raise InvalidRequest(f"The {HEADER} header must be at most {MAX_KEY_CHARS} characters, got {len(value)}.",
                             param=HEADER, code="invalid_idempotency_key")
    return value


def slot_of(key_id: str, idem_key: str) -> str:
    """The store slot: per virtual key, the idempotency key hashed (bounded size, no raw header in Redis)."""
    return f"{key_id}:{hashlib.sha256(idem_key.encode()).hexdigest()}"


def fingerprint(body: dict[str, Any]) -> str:
    """sha256 of the canonical body (keys sorted): the same request, however its JSON was spelled."""
    return sha256_hex(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))


def conflict(idem_key: str, found: Record, fp: str, stream: bool) -> GatewayError | None:
    """The refusal a repeat gets, or None when it may go on (replay, or a linked stream retry)."""
    shown = idem_key if len(idem_key) <= 64 else idem_key[:61] + "..."
    if found.fingerprint != fp:
        return IdempotencyConflict(
            f"The {HEADER} '{shown}' was already used with a different request body; use a new key for a "
            f"new request.", status=422, code="idempotency_key_reused", param=HEADER,
            headers={"x-should-retry": "false"})
    if found.state == "pending" and not stream:
        return IdempotencyConflict(
            f"A request with {HEADER} '{shown}' is still in progress; retry after it finishes.",
            status=409, code="request_in_progress", param=HEADER, headers={"Retry-After": "1"})
    return None


def storable(status: int, body: bytes, headers: dict[str, str], max_bytes: int) -> StoredAnswer | None:
    """The answer to store: successes up to ``max_bytes``, with the headers worth replaying; else None."""
    if status >= 300 or len(body) > max_bytes:
        return None
    kept = {str(k): str(v) for k, v in headers.items() if _replayed(k.lower())}  # plain str: CIMultiDict keys are istr
    return StoredAnswer(status, body, kept)


def _replayed(name: str) -> bool:
    return name == "content-type" or (name.startswith("x-fb-") and name != "x-fb-request-id")
