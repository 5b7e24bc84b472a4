"""Stored responses on the Responses surface (``proxy.api.responses.stored``): what a continued request sends,
what is kept, how input items page."""

from __future__ import annotations

import time

import pytest

from proxy.api.responses.request import validate_response
from proxy.api.responses.stored import Keeper, history, items_page, own_items, resolved
from proxy.errors import InvalidRequest
from proxy.snapshot import KeyRecord
from proxy.stored_responses import MemoryResponses, StoredResponse


def _previous() -> StoredResponse:
    context = own_items([{"role": "user", "content": "What is the weather in Pune?"}])
    output = [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": "{}",
               "status": "completed"},
              {"type": "reasoning", "id": "rs_1", "summary": []}]
    now = int(time.time())
    return StoredResponse("resp_1", "search", "fb-1", now, now + 60, {"id": "resp_1", "output": output}, context)


def test_a_continued_request_sends_the_earlier_conversation_then_the_new_input() -> None:
    earlier = history(_previous())
    body = {"model": "m", "instructions": "Be brief.", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "31 C"}]}
    chat = validate_response(body, earlier).chat
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool"]
    assert chat["messages"][1]["content"][0]["text"] == "What is the weather in Pune?"
    assert chat["messages"][2]["tool_calls"][0]["id"] == "call_1"  # the reasoning item is not carried to chat


def test_an_item_reference_names_an_item_of_the_earlier_conversation() -> None:
    earlier = history(_previous())
    ref = {"model": "m", "input": [{"type": "item_reference", "id": "fc_1"},
                                   {"type": "function_call_output", "call_id": "call_1", "output": "x"}]}
    chat = validate_response(ref, earlier).chat
    assert [c["id"] for c in chat["messages"][-2]["tool_calls"]] == ["call_1", "call_1"]  # earlier's, then the copy
    assert resolved(own_items(ref["input"]), earlier)[0]["call_id"] == "call_1"
    with pytest.raises(InvalidRequest) as missing:
        resolved([{"type": "item_reference", "id": "msg_nope"}], earlier)
    assert missing.value.param == "input[0].id"


def test_own_items_gives_every_item_an_id_and_list_content() -> None:
    items = own_items("Hello")
    assert items[0]["type"] == "message" and items[0]["content"] == [{"type": "input_text", "text": "Hello"}]
    assert items[0]["id"].startswith("msg_") and items[0]["status"] == "completed"
    kept = own_items([{"type": "message", "id": "msg_mine", "role": "assistant", "content": "Hi"}])
    assert kept[0]["id"] == "msg_mine" and kept[0]["content"][0]["type"] == "output_text"


def test_input_items_page_like_openais_list() -> None:
    items = [{"id": f"i{n}"} for n in range(5)]
    first = items_page(items, {"limit": "2"})
    assert [i["id"] for i in first["data"]] == ["i4", "i3"] and first["has_more"] and first["last_id"] == "i3"
    second = items_page(items, {"limit": "2", "after": "i3"})
    assert [i["id"] for i in second["data"]] == ["i2", "i1"]
    assert items_page(items, {"order": "asc", "after": "i3"})["data"] == [{"id": "i4"}]
    for bad in ({"limit": "0"}, {"limit": "x"}, {"order": "up"}, {"after": "nope"}):
        with pytest.raises(InvalidRequest):
            items_page(items, bad)


async def test_the_keeper_keeps_final_responses_and_reports_what_it_cannot() -> None:
    store, failures = MemoryResponses(), []
    key = KeyRecord("fb-1", "0" * 64, "search", "app", None, frozenset({"m"}))
    keeper = Keeper(store, key, [{"id": "msg_1"}], 60, 10_000, on_failure=failures.append)
    await keeper.write()  # nothing final yet: nothing kept
    await keeper.keep({"id": "resp_9", "status": "completed", "created_at": int(time.time()), "output": []})
    kept = await store.get("resp_9", time.time())
    assert kept is not None and kept.team == "search" and kept.context == [{"id": "msg_1"}]
    failed = Keeper(store, key, [], 60, 10_000, on_failure=failures.append)
    await failed.keep({"id": "resp_f", "status": "failed", "created_at": 1, "output": []})
    big = Keeper(store, key, [{"id": "m", "text": "x" * 20_000}], 60, 10_000, on_failure=failures.append)
    await big.keep({"id": "resp_big", "status": "completed", "created_at": int(time.time()), "output": []})
    assert await store.get("resp_f", time.time()) is None and await store.get("resp_big", time.time()) is None
    assert failures == ["too_large"]
