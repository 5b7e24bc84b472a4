"""When the cache may be used and under which key (pure), what an entry holds, and the single-flight rule."""

from __future__ import annotations

import asyncio

import pytest

from ledger.usage import TokenUsage
from proxy.cache import Flights
from proxy.cache.entry import Entry, StreamCapture, chat_entry, replay_chunks
from proxy.cache.policy import OFF, CacheUse, cache_use, chat_key, embeddings_key, parse_header
from proxy.errors import InvalidRequest

MSGS = [{"role": "user", "content": "Say hello."}]
BODY = {"model": "chat-default", "messages": MSGS, "temperature": 0}


def use(body=BODY, *, alias_on=True, header=None, control=None, data_class="internal", redacted=False,
        max_temperature=1.0, kind="chat") -> CacheUse:
    return cache_use(alias_on=alias_on, header=header, control=control, kind=kind, body=body, data_class=data_class,
                     redacted=redacted, max_temperature=max_temperature)


def test_the_alias_opts_in_and_the_header_overrides_it() -> None:
    assert use() == CacheUse(True, True)
    assert use(alias_on=False) is OFF and not OFF.asked
    assert use(alias_on=False, header="on") == CacheUse(True, True)
    assert use(header=" OFF ") is OFF


@pytest.mark.parametrize("value", ["yes", "", "1", "on,off", "true"])
def test_a_malformed_header_is_a_400_naming_it_even_where_the_alias_does_not_cache(value: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        use(alias_on=False, header=value)
    assert err.value.param == "x-fb-cache" and err.value.status == 400
    assert parse_header(None) is None


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"data_class": "restricted"}, "restricted"),
    ({"redacted": True}, "redacted"),
    ({"control": "max-age=0, No-Store"}, "no_store"),
    ({"body": {**BODY, "temperature": 1.2}}, "temperature"),
    ({"body": {**BODY, "temperature": None}, "max_temperature": 0.5}, "temperature"),  # absent: the default 1.0
    ({"body": {**BODY, "tools": [{"type": "function"}]}}, "tool_calls"),
    ({"body": {**BODY, "tool_choice": "none"}}, "tool_calls"),
    ({"body": {**BODY, "messages": [*MSGS, {"role": "tool", "tool_call_id": "c1", "content": "42"}]}},
     "tool_calls"),
    ({"body": {**BODY, "logprobs": True}}, "logprobs"),
])
def test_what_the_cache_must_never_serve_is_bypassed_with_its_reason(kwargs: dict, reason: str) -> None:
    decided = use(**kwargs)
    assert (decided.read, decided.write, decided.bypass) == (False, False, reason) and decided.asked


def test_no_cache_refetches_but_stores_and_embeddings_ignore_temperature_rules() -> None:
    assert use(control="no-cache") == CacheUse(False, True)
    assert use({"model": "e", "input": "x"}, kind="embeddings") == CacheUse(True, True)


def test_the_key_covers_team_model_output_params_and_messages_only() -> None:
    base = chat_key("payments", "gpt-4o", BODY, 256)
    assert base == chat_key("payments", "gpt-4o", {"temperature": 0, "messages": MSGS, "model": "other-alias",
                                                   "stream": True, "user": "u1", "metadata": {"a": "b"}}, 256)
    for other in (chat_key("search", "gpt-4o", BODY, 256), chat_key("payments", "gpt-4o-mini", BODY, 256),
                  chat_key("payments", "gpt-4o", {**BODY, "temperature": 0.2}, 256),
                  chat_key("payments", "gpt-4o", {**BODY, "seed": 7}, 256),
                  chat_key("payments", "gpt-4o", BODY, 512),
                  chat_key("payments", "gpt-4o", {**BODY, "messages": [{"role": "user", "content": "Say hi."}]},
                           256)):
        assert other != base
    assert embeddings_key("payments", "e3", {"input": "x"}) != embeddings_key("payments", "e3", {"input": "y"})
    assert not chat_key("payments", "gpt-4o", BODY, 256).count("Say")  # hashed, never the prompt itself


USAGE = TokenUsage(input=10, output=4)


def test_an_entry_round_trips_and_answers_with_tool_calls_are_never_stored() -> None:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}
    entry = chat_entry(body, USAGE, "dep-a", 120, "INR")
    assert entry is not None and Entry.loads(entry.dumps()) == entry
    tools = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [{}]},
                          "finish_reason": "tool_calls"}]}
    assert chat_entry(tools, USAGE, "dep-a", 120, "INR") is None
    assert chat_entry({"choices": []}, USAGE, "dep-a", 120, "INR") is None


def test_a_captured_stream_becomes_the_completion_that_replays_to_the_same_text() -> None:
    cap = StreamCapture()
    cap.add([{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}])
    cap.add([{"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
             {"choices": [{"index": 0, "delta": {"content": "lo" * 300}, "finish_reason": None}]}])
    assert cap.body() is None  # not finished yet
    cap.add([{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, {"choices": [], "usage": {}}])
    body = cap.body()
    assert body is not None and body["choices"][0]["message"]["content"] == "Hel" + "lo" * 300
    entry = chat_entry(body, USAGE, "dep-a", 1, "INR")
    assert entry is not None
    chunks = replay_chunks(entry)
    again = StreamCapture()
    again.add(chunks)
    assert again.body() == body and len(chunks) > 3  # long content replays in several chunks


def test_a_stream_with_a_tool_call_is_spoiled() -> None:
    cap = StreamCapture()
    cap.add([{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "finish_reason": "tool_calls"}]}])
    assert cap.body() is None


async def test_followers_get_the_leaders_entry_and_go_upstream_themselves_when_it_has_none() -> None:
    flights = Flights()
    release = asyncio.Event()
    seen: list[tuple[bool, bytes | None]] = []

    async def one(result: bytes | None) -> None:
        flight = await flights.join("k")
        seen.append((flight.leader, flight.entry))
        if flight.leader:
            await release.wait()
            flights.land(flight, result)

    for result, followers in ((b"entry", 4), (None, 2)):
        release.clear()
        seen.clear()
        tasks = [asyncio.create_task(one(result)) for _ in range(followers + 1)]
        await asyncio.sleep(0.01)
        assert len(flights) == 1
        release.set()
        await asyncio.gather(*tasks)
        assert sorted(seen, key=lambda s: not s[0]) == [(True, None)] + [(False, result)] * followers
        assert len(flights) == 0


async def test_a_follower_leaving_does_not_cancel_the_flight() -> None:
    flights = Flights()
    leader = await flights.join("k")
    follower = asyncio.create_task(flights.join("k"))
    await asyncio.sleep(0)
    follower.cancel()
    await asyncio.gather(follower, return_exceptions=True)
    late = asyncio.create_task(flights.join("k"))
    await asyncio.sleep(0)
    flights.land(leader, b"e")
    assert (await late).entry == b"e"
