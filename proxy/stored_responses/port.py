"""The ``ResponseStore`` port: what farebox keeps of a Responses API answer, for ``previous_response_id`` and
``GET``/``DELETE /v1/responses/{id}``.

A record holds the response object as the client received it and its *context*: every input item the model
saw for it (the items inherited through ``previous_response_id``, then the request's own), each with an id.
Continuing a response sends its context, then its output, then the new input; so one read serves a chain of
any length.

Invariants every adapter keeps (``tests/proxy/stored_responses/test_contract.py``):

* a record is readable only by keys of the team that created it (``readable``): to another team it does not
  exist (404, never 403, so ids cannot be probed);
* past ``expires_at`` a record is gone, whether or not the adapter has swept it yet;
* ``put`` of an id already stored replaces it (a retried write changes nothing); ``delete`` reports whether
  a record was there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import orjson


@dataclass(frozen=True, slots=True)
class StoredResponse:
    id: str  # resp_<request id>
    team: str
    key_id: str  # the key that created it (display id; for the record, not for access)
    created_at: int  # unix seconds
    expires_at: int  # unix seconds
    response: dict[str, Any]  # the response object as answered
    context: list[dict[str, Any]]  # every input item the model saw for it, in order, each with an "id"

    def dumps(self) -> bytes:
        return orjson.dumps({"id": self.id, "team": self.team, "key_id": self.key_id, "created_at": self.created_at,
                             "expires_at": self.expires_at, "response": self.response, "context": self.context})

    @staticmethod
    def loads(raw: bytes | str) -> "StoredResponse":
        d = orjson.loads(raw)
        return StoredResponse(d["id"], d["team"], d["key_id"], int(d["created_at"]), int(d["expires_at"]),
                              d["response"], d["context"])


def readable(record: StoredResponse | None, team: str, now: float) -> StoredResponse | None:
    """The record if ``team`` may see it now; else None (absent, expired or another team's: all the same)."""
    if record is None or record.team != team or record.expires_at <= now:
        return None
    return record


@runtime_checkable
class ResponseStore(Protocol):
    async def put(self, record: StoredResponse) -> None:
        """Keep ``record`` until its ``expires_at`` (replacing a record with the same id)."""
        ...

    async def get(self, response_id: str, now: float) -> StoredResponse | None:
        """The record, or None when absent or expired (access is checked by the caller: ``readable``)."""
        ...

    async def delete(self, response_id: str) -> bool:
        """Remove the record; whether one was there."""
        ...

    async def close(self) -> None: ...
