"""The door's own guards: failed-auth throttling per source and the optional /metrics token, in process."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from proxy.admission.auth_throttle import AuthThrottle, TooManyAuthFailures
from tests.proxy.fakes import example_tree, key, runtime, snapshot

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


def test_a_bucket_of_failures_per_source_refills_over_time() -> None:
    throttle = AuthThrottle(per_minute=3, max_sources=2)
    for _ in range(3):
        throttle.check("a", 0.0)
        throttle.failed("a", 0.0)
    with pytest.raises(TooManyAuthFailures) as refused:
        throttle.check("a", 1.0)
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "19"
    throttle.check("b", 1.0)  # another source is not affected
    throttle.check("a", 21.0)  # one failure refilled (20 s at 3 a minute)
    throttle.failed("b", 2.0)
    throttle.failed("c", 3.0)
    assert len(throttle) == 2  # bounded: the least recently failed source is forgotten
    throttle.check("a", 3.0)


async def _client(**options: object) -> tuple[TestClient, str]:
    plaintext, record = key()
    base = runtime(snapshot(example_tree(), [record]))
    rt = dataclasses.replace(base, options=dataclasses.replace(base.options, **options))
    client = TestClient(TestServer(pod_app(rt)))
    await client.start_server()
    return client, plaintext


@pytest.fixture
async def throttled() -> AsyncIterator[tuple[TestClient, str]]:
    client, plaintext = await _client(auth_failures_per_minute=5)
    yield client, plaintext
    await client.close()


async def test_wrong_keys_from_one_source_get_429_with_retry_after(throttled: tuple[TestClient, str]) -> None:
    client, plaintext = throttled
    statuses = []
    for _ in range(7):
        resp = await client.get("/v1/models", headers={"Authorization": "Bearer fb-dev-wrong"})
        statuses.append(resp.status)
    assert statuses == [401] * 5 + [429] * 2
    assert int(resp.headers["Retry-After"]) >= 1
    assert (await resp.json())["error"]["code"] == "too_many_auth_failures"
    admin = await client.get("/admin/v1/keys", headers={"Authorization": "Bearer fbadm-wrong"})
    assert admin.status == 429  # the admin API shares the source's bucket


async def test_metrics_ask_for_their_token_when_one_is_set() -> None:
    client, _ = await _client(metrics_token="m-secret-123")
    try:
        assert (await client.get("/metrics")).status == 401
        assert (await client.get("/metrics", headers={"Authorization": "Bearer wrong"})).status == 401
        ok = await client.get("/metrics", headers={"Authorization": "Bearer m-secret-123"})
        assert ok.status == 200 and "farebox_requests" in await ok.text()
        assert (await client.get("/health")).status == 200  # health stays open
    finally:
        await client.close()
    open_client, _ = await _client()
    try:
        assert (await open_client.get("/metrics")).status == 200  # no token configured: open, as before
    finally:
        await open_client.close()
