"""RedisBuckets over TLS (``rediss://``), against a real redis-server listening on a TLS port
only, with a self-signed certificate made here by the ``openssl`` CLI: the pipe verifies the
server as the URL's ``ssl_*`` options say (as redis-py does for the inspection client), an
unverifiable server or a plain (non-TLS) one is an outage answered locally, logged once and
without the URL's password."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import uvloop

from infra.process import die_with_parent, free_port, stop_process
from infra.redis.server import RedisServer, ensure_installed
from proxy.limits import BucketSpec
from proxy.limits.redis_buckets import RedisBuckets, address_of

T0 = 1_700_000_000_000_000
LOGGER = "proxy.limits"
PASSWORD = "tls-s3cret-pass"


@dataclass(frozen=True)
class TlsRedis:
    port: int
    cert: Path  # the server's self-signed certificate, also the CA to trust

    def url(self, query: str = "", password: str = PASSWORD, db: int = 0) -> str:
        return f"rediss://:{password}@127.0.0.1:{self.port}/{db}{'?' + query if query else ''}"


def _answers(port: int, cert: Path) -> bool:
    context = ssl.create_default_context(cafile=str(cert))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"PING\r\n")
                return tls.recv(64)[:1] in (b"+", b"-")  # PONG, or NOAUTH: it speaks RESP over TLS
    except OSError:
        return False


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory) -> Iterator[TlsRedis]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS tests need the openssl CLI (Debian package openssl)", pytrace=False)
    workdir = tmp_path_factory.mktemp("redis-tls")
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    port = free_port()
    proc = subprocess.Popen(
        [ensure_installed(), "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-auth-clients", "no",
         "--requirepass", PASSWORD, "--save", "", "--appendonly", "no", "--dir", str(workdir),
         "--daemonize", "no", "--logfile", str(workdir / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent,  # noqa: PLW1509
    )
    try:
        deadline = time.monotonic() + 15.0
        while not _answers(port, cert):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (workdir / "redis.log").read_text() if (workdir / "redis.log").exists() else ""
                err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                pytest.fail(f"redis-server did not serve TLS on port {port} (built without TLS?): {err}{log}",
                            pytrace=False)
            time.sleep(0.02)
        yield TlsRedis(port, cert)
    finally:
        stop_process(proc)


def test_a_rediss_url_gives_an_address_with_tls_on() -> None:
    verified = address_of(aioredis.Redis.from_url(f"rediss://:{PASSWORD}@127.0.0.1:6380/2"))
    assert verified.tls is not None and verified.tls.verify_mode == ssl.CERT_REQUIRED
    assert verified.tls.check_hostname  # redis-py's default for rediss://
    assert (verified.port, verified.db, verified.password) == (6380, 2, PASSWORD)
    assert str(verified) == "127.0.0.1:6380 (TLS)" and PASSWORD not in repr(verified)
    unverified = address_of(aioredis.Redis.from_url("rediss://127.0.0.1:6380/0?ssl_cert_reqs=none"))
    assert unverified.tls is not None and unverified.tls.verify_mode == ssl.CERT_NONE
    assert address_of(aioredis.Redis.from_url("redis://127.0.0.1:6380/0")).tls is None


async def over_tls(url: str, key_prefix: str) -> None:
    buckets = RedisBuckets.from_url(url, pods=1, timeout_s=2.0, key_prefix=key_prefix)
    try:
        await buckets.start()
        assert buckets.metrics["mode"] == "redis"
        assert (await buckets.reserve([(BucketSpec("over-tls", 10), 4)], T0)).remaining == {"over-tls": 6}
        assert await buckets.peek(BucketSpec("over-tls", 10), T0) == 6
        assert await buckets.state("over-tls") is not None  # redis-py's client, TLS and db 3 too
        assert buckets.metrics["redis_fallback_total"] == 0
    finally:
        await buckets.close()


@pytest.mark.parametrize("query", ["ssl_ca_certs={cert}", "ssl_cert_reqs=none"])
async def test_buckets_over_tls_with_auth_and_a_database(tls_redis: TlsRedis, query: str) -> None:
    await over_tls(tls_redis.url(query.format(cert=tls_redis.cert), db=3), f"t:tls:{query[:8]}:")


def test_the_same_on_uvloop(tls_redis: TlsRedis) -> None:
    """The gateway runs on uvloop, whose TLS transport is its own."""
    url = tls_redis.url(f"ssl_ca_certs={tls_redis.cert}", db=3)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(over_tls(url, "t:tls:uvloop:"))


async def test_an_unverifiable_server_is_an_outage_logged_without_the_password(tls_redis: TlsRedis, caplog) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    buckets = RedisBuckets.from_url(tls_redis.url(), pods=2, timeout_s=2.0)  # self-signed, not trusted
    try:
        await buckets.start()
        assert buckets.metrics["mode"] == "local"
        assert (await buckets.reserve([(BucketSpec("untrusted", 10), 3)], T0)).remaining == {"untrusted": 2}
        [line] = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert "CERTIFICATE_VERIFY_FAILED" in line and "(TLS)" in line
        assert PASSWORD not in line
    finally:
        await buckets.close()


async def test_tls_to_a_plain_redis_falls_back_cleanly(make_redis_server, caplog) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    server: RedisServer = make_redis_server()
    url = f"rediss://:{PASSWORD}@127.0.0.1:{server.port}/0?ssl_cert_reqs=none"
    buckets = RedisBuckets.from_url(url, pods=2, timeout_s=2.0, socket_timeout_s=1.0)
    try:
        await buckets.start()
        assert buckets.metrics["mode"] == "local"  # redis-server waits for a line end: the handshake never ends
        assert (await buckets.reserve([(BucketSpec("plain", 10), 3)], T0)).remaining == {"plain": 2}
        [line] = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert f"Redis at 127.0.0.1:{server.port} (TLS)" in line and PASSWORD not in line
    finally:
        await buckets.close()
    plain = RedisBuckets.from_url(server.url, pods=1, timeout_s=2.0)  # the server is none the worse
    try:
        await plain.start()
        assert plain.metrics["mode"] == "redis"
    finally:
        await plain.close()
