"""Stored responses on the Responses surface: what a request continues, what it keeps, what GET lists.

A request with ``previous_response_id`` continues a stored response of the caller's team: the model sees the
previous response's context (every input item it saw), then its output, then the new input (``history``).
``instructions`` are not inherited, as in OpenAI's API. An ``item_reference`` input item names an item of
that history by id. With ``store`` (the default) the new response is handed to the store with its own
context (``Keeper``) before its last bytes go out; the pod's store writes it behind the answer and a follow-up
finds it as soon as the client has its id (``proxy.stored_responses.behind``); ``store: false`` keeps
nothing. A response too large to keep, or a store that fails, is logged and counted: the answer, already paid
for, still goes out. ``items_page`` pages a context for ``GET /v1/responses/{id}/input_items``. Pure, but for
``Keeper.write`` (the store's I/O).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from proxy.errors import InvalidRequest, NotFound
from proxy.snapshot import KeyRecord
from proxy.stored_responses import ResponseStore, StoredResponse

log = logging.getLogger("farebox.proxy")

_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def not_found(response_id: str, param: str = "response_id") -> NotFound:
    """Absent, expired, deleted or another team's: one answer for all, so ids cannot be probed."""
    code = "previous_response_not_found" if param == "previous_response_id" else "response_not_found"
    what = "Previous response" if param == "previous_response_id" else "Response"
    return NotFound(f"{what} with id '{response_id}' not found.", param=param, code=code)


def previous_id(body: dict[str, Any]) -> str | None:
    value = body.get("previous_response_id")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidRequest("'previous_response_id' must be a response id string.", param="previous_response_id",
                             code="invalid_value")
    return value


def history(previous: StoredResponse) -> list[dict[str, Any]]:
    """What continuing ``previous`` puts before the new input: its context, then its output."""
    return [*previous.context, *(previous.response.get("output") or [])]


def own_items(raw: object) -> list[dict[str, Any]]:
    """The request's input as items, each with an id (what input_items lists). Called once ``to_chat`` has
    validated ``raw``; an ``item_reference`` stays a reference (resolved by ``resolved``)."""
    suffix = secrets.token_hex(8)
    items: list[dict[str, Any]] = []
    for n, item in enumerate([{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or ())):
        out = dict(item)
        kind = out.setdefault("type", "message")
        if kind == "message":
            content = out.get("content")
            if isinstance(content, str):
                part = "output_text" if out.get("role") == "assistant" else "input_text"
                out["content"] = [{"type": part, "text": content}]
            out.setdefault("status", "completed")
        if kind != "item_reference" and not isinstance(out.get("id"), str):
            out["id"] = f"{_PREFIX.get(kind, 'item')}_{suffix}{n}"
        items.append(out)
    return items


def resolved(items: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` with each ``item_reference`` replaced by the item of ``earlier`` it names; else a 400."""
    known = {item["id"]: item for item in earlier if isinstance(item.get("id"), str)}
    out = []
    for n, item in enumerate(items):
        if item.get("type") == "item_reference":
            found = known.get(item.get("id"))  # type: ignore[arg-type]
            if found is None:
                raise InvalidRequest(f"Item with id '{item.get('id')}' not found in the conversation of "
                                     "'previous_response_id'.", param=f"input[{n}].id", code="invalid_value")
            item = found
        out.append(item)
    return out


class Keeper:
    """Keeps one response with its context once it is final (``write``: the surface's ``settled``)."""

    __slots__ = ("store", "key", "context", "ttl_s", "max_bytes", "final", "on_failure")

    def __init__(self, store: ResponseStore, key: KeyRecord, context: list[dict[str, Any]], ttl_s: int,
                 max_bytes: int, on_failure: Any = None) -> None:
        self.store, self.key, self.context, self.ttl_s, self.max_bytes = store, key, context, ttl_s, max_bytes
        self.final: dict[str, Any] | None = None
        self.on_failure = on_failure  # called with the reason when a response could not be kept

    async def keep(self, final: dict[str, Any]) -> None:
        self.final = final
        await self.write()

    async def write(self) -> None:
        final = self.final
        if final is None or final.get("status") not in ("completed", "incomplete"):
            return
        created = int(final["created_at"])
        record = StoredResponse(final["id"], self.key.team, self.key.key_id, created, created + self.ttl_s, final,
                                self.context)
        if len(record.dumps()) > self.max_bytes:
            self._failed("too_large", record.id)
            return
        try:
            await self.store.put(record)
        except Exception:  # noqa: BLE001 - the answer is paid for and goes out; the failure is logged
            log.warning("stored response %s not kept: the store failed", record.id, exc_info=True)
            self._failed("store_failed", record.id)

    def _failed(self, reason: str, response_id: str) -> None:
        if reason == "too_large":
            log.warning("stored response %s not kept: larger than stored_responses.max_record_bytes", response_id)
        if self.on_failure is not None:
            self.on_failure(reason)


def items_page(items: list[dict[str, Any]], query: Any) -> dict[str, Any]:
    """One page of ``items`` for ``GET …/input_items`` (``after``, ``limit`` 1..100 default 20, ``order``
    asc|desc default desc), as OpenAI's list object."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order", code="invalid_value")
    raw_limit = query.get("limit", "20")
    if not str(raw_limit).isdigit() or not 1 <= int(raw_limit) <= 100:
        raise InvalidRequest("'limit' must be an integer between 1 and 100.", param="limit", code="invalid_value")
    ordered = list(items) if order == "asc" else list(reversed(items))
    after = query.get("after")
    if after is not None:
        at = next((n for n, item in enumerate(ordered) if item.get("id") == after), None)
        if at is None:
            raise InvalidRequest(f"No item with id '{after}' in this response's input.", param="after",
                                 code="invalid_value")
        ordered = ordered[at + 1:]
    page = ordered[:int(raw_limit)]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(ordered) > len(page)}
