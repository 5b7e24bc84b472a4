"""The pipe under RedisBuckets (real redis-server): how it uses hiredis's reader (replies split
anywhere, error replies as values that leave later replies in step, a malformed stream dropping
the connection), and the connection setup (SELECT of the URL's database, AUTH) that the redis-py
client used to do for it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from bucket_helpers import redis_buckets
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from proxy.limits import BucketSpec
from proxy.limits.redis_buckets import RedisBuckets
from proxy.limits.redis_pipe import _INCOMPLETE, Address, RedisPipe, ReplyError, encode, reader

T0 = 1_700_000_000_000_000
LOGGER = "proxy.limits"


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


def _plain(value: Any) -> Any:
    """A reply with its error values made comparable."""
    if isinstance(value, ReplyError):
        return ("error", str(value))
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _drain(r) -> list[Any]:
    got = []
    while (value := r.gets()) is not _INCOMPLETE:
        got.append(_plain(value))
    return got


STREAM = b"*3\r\n:0\r\n$2\r\n42\r\n*-1\r\n+OK\r\n-NOSCRIPT No matching script\r\n$-1\r\n:-7\r\n*2\r\n-ERR x\r\n:1\r\n"
WANT = [[0, b"42", None], b"OK", ("error", "NOSCRIPT No matching script"), None, -7, [("error", "ERR x"), 1]]


def test_replies_come_out_only_when_whole() -> None:
    for cut in range(len(STREAM) + 1):  # a reply split anywhere waits for the rest
        r = reader()
        r.feed(STREAM[:cut])
        got = _drain(r)
        assert got == WANT[:len(got)]
        r.feed(STREAM[cut:])
        assert got + _drain(r) == WANT
    r, got = reader(), []
    for i in range(len(STREAM)):  # and one byte at a time
        r.feed(STREAM[i:i + 1])
        got += _drain(r)
    assert got == WANT


def test_error_replies_are_values_of_redis_pys_response_error() -> None:
    r = reader()
    r.feed(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")
    value = r.gets()
    assert isinstance(value, ReplyError) and isinstance(value, ResponseError)  # RedisBuckets maps it
    assert str(value).startswith("WRONGTYPE")


def test_commands_are_encoded_as_bulk_strings() -> None:
    assert encode(("EVALSHA", "ab", 1, b"k")) == b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n"
    big = 2**53 + 1  # no double holds it: integers are written as integers, never through a float
    assert encode(("X", big)) == b"*2\r\n$1\r\nX\r\n$16\r\n9007199254740993\r\n"


async def test_an_error_reply_in_a_batch_leaves_the_others_in_step(redis_server) -> None:
    pipe = RedisPipe(Address(port=redis_server.port), timeout_s=2.0)
    try:
        await pipe.call("DEL", "t:pipe:h", "t:pipe:n")
        await pipe.call("HSET", "t:pipe:h", "f", "1")
        calls = [pipe.call("INCR", "t:pipe:n"), pipe.call("INCR", "t:pipe:h"), pipe.call("INCR", "t:pipe:n"),
                 pipe.call("HGET", "t:pipe:h", "f")]
        first, wrong, second, field = await asyncio.gather(*calls, return_exceptions=True)
        assert (first, second, field) == (1, 2, b"1")
        assert isinstance(wrong, ResponseError) and str(wrong).startswith("WRONGTYPE")
        assert pipe.writes == 3  # the four calls of one tick shared one write
    finally:
        await pipe.call("DEL", "t:pipe:h", "t:pipe:n")
        await pipe.close()


async def test_a_malformed_reply_drops_the_connection_and_the_next_call_reconnects() -> None:
    answers = [b"?not resp\r\n", b"+PONG\r\n"]  # the first connection talks nonsense, the second RESP
    handlers: list[asyncio.Task[None]] = []

    async def serve(reader_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        answer = answers.pop(0)
        try:
            while await reader_.read(4096):
                writer.write(answer)
        finally:
            writer.close()
            await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pipe = RedisPipe(Address(port=port), timeout_s=2.0)
    try:
        with pytest.raises(RedisConnectionError, match="unreadable reply from Redis"):
            await pipe.call("PING")
        assert await pipe.call("PING") == b"PONG"
    finally:
        await pipe.close()  # the handlers see EOF and close their side
        await asyncio.wait_for(asyncio.gather(*handlers, return_exceptions=True), 10.0)
        server.close()
        await server.wait_closed()
