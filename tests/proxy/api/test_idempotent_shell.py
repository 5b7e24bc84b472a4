"""Idempotent retries through the real chat handler (fake ports, the simulator in the same loop):
a repeat replays the stored answer and is billed once; in-flight repeats get 409; another body 422;
a bad header 400; a repeated stream is a new request linked by ``retry_of``."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from proxy.errors import InvalidRequest
from proxy.idempotency.port import Record, checked_key, conflict, fingerprint, slot_of, storable
from tests.proxy.api.test_chat_shell import CHAT, Pod, pod  # noqa: F401 - the fixture

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
URL = "/v1/chat/completions"


async def test_a_repeat_gets_the_stored_answer_billed_once(pod: Pod) -> None:  # noqa: F811
    first = await pod.post(URL, CHAT, **{"Idempotency-Key": "order-1"})
    body1 = await first.read()
    assert first.status == 200 and "x-fb-idempotent-replay" not in first.headers
    again = await pod.post(URL, {**CHAT}, **{"Idempotency-Key": "order-1"})
    assert again.status == 200 and await again.read() == body1
    assert again.headers["x-fb-idempotent-replay"] == "true"
    assert again.headers["x-fb-deployment"] == first.headers["x-fb-deployment"]
    assert again.headers["x-fb-replay-of"] == orjson.loads(body1)["x_farebox"]["request_id"]
    assert pod.log.types() == ["request.admitted", "request.attempted", "request.settled"]
    assert len(pod.budgets.asks) == 1
    metrics = (await (await pod.client.get("/metrics")).text())
    assert 'farebox_idempotency_total{outcome="replayed"} 1.0' in metrics
    assert 'farebox_idempotency_total{outcome="first"} 1.0' in metrics


async def test_the_same_body_spelled_differently_is_the_same_request(pod: Pod) -> None:  # noqa: F811
    await pod.post(URL, CHAT, **{"Idempotency-Key": "k"})
    reordered = {"max_completion_tokens": 64, "messages": CHAT["messages"], "model": "chat-default"}
    again = await pod.post(URL, reordered, **{"Idempotency-Key": "k"})
    assert again.status == 200 and again.headers["x-fb-idempotent-replay"] == "true"


async def test_a_repeat_while_the_first_is_in_flight_gets_409(pod: Pod) -> None:  # noqa: F811
    slow = asyncio.create_task(pod.post(URL, CHAT, **{"Idempotency-Key": "slow", "x-sim-ttft-ms": "400"}))
    await asyncio.sleep(0.15)
    busy = await pod.post(URL, CHAT, **{"Idempotency-Key": "slow"})
    err = (await busy.json())["error"]
    assert busy.status == 409 and err["code"] == "request_in_progress" and err["param"] == "Idempotency-Key"
    assert (await slow).status == 200
    assert pod.log.types().count("request.admitted") == 1


async def test_another_body_with_the_same_key_is_422_naming_the_key(pod: Pod) -> None:  # noqa: F811
    await pod.post(URL, CHAT, **{"Idempotency-Key": "order-2"})
    other = await pod.post(URL, {**CHAT, "max_completion_tokens": 65}, **{"Idempotency-Key": "order-2"})
    err = (await other.json())["error"]
    assert other.status == 422 and err["code"] == "idempotency_key_reused" and "order-2" in err["message"]
    assert other.headers["x-should-retry"] == "false"
    assert pod.log.types().count("request.admitted") == 1


async def test_keys_are_per_virtual_key_and_a_new_key_is_a_new_request(pod: Pod) -> None:  # noqa: F811
    await pod.post(URL, CHAT, **{"Idempotency-Key": "a"})
    second = await pod.post(URL, CHAT, **{"Idempotency-Key": "b"})
    assert "x-fb-idempotent-replay" not in second.headers
    assert pod.log.types().count("request.settled") == 2


@pytest.mark.parametrize("value", ["", "   ", "x" * 256])
async def test_an_empty_or_long_key_is_400_naming_the_header(pod: Pod, value: str) -> None:  # noqa: F811
    resp = await pod.post(URL, CHAT, **{"Idempotency-Key": value})
    err = (await resp.json())["error"]
    assert resp.status == 400 and err["param"] == "Idempotency-Key" and "Idempotency-Key" in err["message"]
    assert pod.log.events == []


async def test_a_failed_request_releases_its_key_so_a_retry_runs(pod: Pod) -> None:  # noqa: F811
    failed = await pod.post(URL, CHAT, **{"Idempotency-Key": "flaky", "x-sim-fault": "500"})
    assert failed.status >= 500
    retry = await pod.post(URL, CHAT, **{"Idempotency-Key": "flaky"})
    assert retry.status == 200 and "x-fb-idempotent-replay" not in retry.headers


async def test_a_repeated_stream_is_a_new_request_linked_by_retry_of(pod: Pod) -> None:  # noqa: F811
    body = {**CHAT, "stream": True}
    first = await pod.post(URL, body, **{"Idempotency-Key": "s-1"})
    await first.read()
    again = await pod.post(URL, body, **{"Idempotency-Key": "s-1"})
    await again.read()
    admitted = [e for e in pod.log.events if e.type == "request.admitted"]
    assert len(admitted) == 2 and admitted[0].retry_of is None
    assert admitted[1].retry_of == admitted[0].request_id


def test_pure_rules() -> None:
    assert checked_key(None) is None and checked_key("k") == "k" and checked_key("x" * 255)
    with pytest.raises(InvalidRequest):
        checked_key("x" * 256)
    assert slot_of("fb-1", "a") != slot_of("fb-2", "a") and len(slot_of("fb-1", "z" * 255)) < 80
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1}) != fingerprint({"a": 2})
    done = Record("req_1", "fp", "done")
    assert conflict("k", done, "fp", stream=False) is None
    assert conflict("k", done, "other", stream=False).status == 422
    assert conflict("k", Record("req_1", "fp", "pending"), "fp", stream=False).status == 409
    assert conflict("k", Record("req_1", "fp", "pending"), "fp", stream=True) is None


def test_only_successes_within_the_cap_are_stored_with_the_headers_worth_replaying() -> None:
    headers = {"Content-Type": "application/json", "x-fb-deployment": "d", "x-fb-request-id": "r",
               "server-timing": "admit;dur=1", "x-ratelimit-remaining-requests": "3"}
    kept = storable(200, b"{}", headers, 10)
    assert kept is not None and kept.headers == {"Content-Type": "application/json", "x-fb-deployment": "d"}
    assert storable(200, b"x" * 11, headers, 10) is None
    assert storable(500, b"{}", headers, 10) is None


async def test_pods_sharing_redis_replay_each_others_answers() -> None:
    """Distributed mode: the key is claimed and answered through Redis, so a retry on another pod replays."""
    import time

    from aiohttp.test_utils import TestClient, TestServer

    from farebox.pod import pod_app
    from infra.redis.server import RedisServer
    from infra.simulator.app import create_app as create_simulator
    from infra.simulator.config import parse_config
    from proxy.idempotency.redis_store import RedisIdempotency
    from proxy.runtime import RUNTIME
    from tests.proxy.api.test_chat_shell import SIMULATOR
    from tests.proxy.fakes import MemoryLog, example_tree, key, runtime, snapshot

    server = RedisServer().start()
    sim = TestServer(create_simulator(parse_config(SIMULATOR)))
    await sim.start_server()
    plaintext, record = key()
    snap = snapshot(example_tree(str(sim.make_url("")).rstrip("/")), [record])
    clients, logs = [], []
    try:
        for _ in range(2):
            log = MemoryLog()
            rt = runtime(snap, log=log, clock=time.time)
            object.__setattr__(rt, "idempotency", RedisIdempotency.from_url(server.url))
            client = TestClient(TestServer(pod_app(rt)))
            await client.start_server()
            clients.append(client)
            logs.append(log)
        auth = {"Authorization": f"Bearer {plaintext}", "Idempotency-Key": "cross-pod"}
        first = await clients[0].post(URL, data=orjson.dumps(CHAT), headers=auth)
        body = await first.read()
        second = await clients[1].post(URL, data=orjson.dumps(CHAT), headers=auth)
        assert second.status == 200 and second.headers["x-fb-idempotent-replay"] == "true"
        assert await second.read() == body
        assert logs[0].types() == ["request.admitted", "request.attempted", "request.settled"] and logs[1].events == []
    finally:
        for client in clients:
            await client.app[RUNTIME].idempotency.close()
            await client.close()
        await sim.close()
        server.cleanup()


async def test_a_replay_needs_no_budget_and_no_route(pod: Pod) -> None:  # noqa: F811
    from proxy.errors import RateLimited

    first = await pod.post(URL, CHAT, **{"Idempotency-Key": "paid"})
    pod.budgets.refusal = RateLimited("The budget of team:platform is exhausted.", code="budget_exhausted")
    again = await pod.post(URL, CHAT, **{"Idempotency-Key": "paid"})
    assert again.status == 200 and await again.read() == await first.read()
    assert len(pod.budgets.asks) == 1
