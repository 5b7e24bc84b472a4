"""The pipe under RedisBuckets (real redis-server): the wire format, and the connection setup
(SELECT of the URL's database, AUTH) that the redis-py client used to do for it."""

from __future__ import annotations

import logging

from bucket_helpers import redis_buckets

from proxy.admission.limits import BucketSpec
from proxy.admission.limits.redis_buckets import RedisBuckets
from proxy.admission.limits.redis_pipe import _INCOMPLETE, ReplyError, encode, parse

T0 = 1_700_000_000_000_000
LOGGER = "proxy.admission.limits"


async def test_the_urls_database_is_selected(redis_server) -> None:
    url = redis_server.url.rsplit("/", 1)[0] + "/5"
    buckets = RedisBuckets.from_url(url, pods=1, timeout_s=2.0, key_prefix="t:db5:")
    try:
        await buckets.start()
        assert (await buckets.reserve([(BucketSpec("in-db5", 10), 4)], T0)).remaining == {"in-db5": 6}
        assert await buckets.state("in-db5") is not None  # redis-py's client, on db 5 too
        plain = redis_buckets(redis_server, key_prefix="t:db5:")  # db 0: nothing there
        try:
            assert await plain.state("in-db5") is None
        finally:
            await plain.close()
        assert buckets.metrics["redis_fallback_total"] == 0
    finally:
        await buckets.close()


async def test_auth_with_the_urls_password_and_a_wrong_one_falls_back(make_redis_server, caplog) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    server = make_redis_server()
    setup = redis_buckets(server)
    await setup.client.config_set("requirepass", "s3cret-pass")
    await setup.close()
    host = server.url.split("//", 1)[1]
    good = RedisBuckets.from_url(f"redis://:s3cret-pass@{host}", pods=2, timeout_s=2.0)
    bad = RedisBuckets.from_url(f"redis://:wrong-pass@{host}", pods=2, timeout_s=2.0)
    try:
        await good.start()
        assert (await good.reserve([(BucketSpec("authed", 10), 3)], T0)).remaining == {"authed": 7}
        assert good.metrics["mode"] == "redis"
        await bad.start()
        assert bad.metrics["mode"] == "local"  # refused setup: like an unreachable Redis
        assert (await bad.reserve([(BucketSpec("authed", 10), 3)], T0)).remaining == {"authed": 2}  # 10 // 2 - 3
        [line] = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert "refused the connection setup" in line
        assert "wrong-pass" not in line and "s3cret" not in line
    finally:
        await good.close()
        await bad.close()


def test_replies_parse_only_when_whole() -> None:
    stream = b"*3\r\n:0\r\n$2\r\n42\r\n*-1\r\n+OK\r\n-NOSCRIPT No matching script\r\n$-1\r\n:-7\r\n"
    want = [[0, b"42", None], "OK", ReplyError("NOSCRIPT No matching script"), None, -7]
    for cut in range(len(stream)):  # a reply split anywhere waits for the rest
        buf, pos, got = bytearray(stream[:cut]), 0, []
        while True:
            value, pos = parse(buf, pos)
            if value is _INCOMPLETE:
                break
            got.append(value)
        assert got == want[:len(got)]
        buf += stream[cut:]
        while pos < len(buf):
            value, pos = parse(buf, pos)
            got.append(value)
        assert got == want
    assert isinstance(want[2], ReplyError)
    assert encode(("EVALSHA", "ab", 1, b"k")) == b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n"
