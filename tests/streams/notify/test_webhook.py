"""The notifier end to end in one loop: events appended to a real SQLite event log, the pod's alert tasks
(``farebox.observe.alerts_ctx``) tailing it, and a local aiohttp receiver checking the HMAC signature.

Each alert arrives once; a receiver answering 500 or timing out is retried with backoff and then the
alert is logged; a webhook URL that does not parse is a config error naming the setting."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from farebox.observe import DISPATCHER, alerts_ctx
from farebox.settings import load_settings
from farebox.settings_observe import AlertSettings
from proxy.control.problems import ConfigError
from streams.notify.alerts import ExpiringKey
from streams.notify.webhook import EVENT_ID, SIGNATURE, TIMESTAMP, signature
from streams.sqlite_log import SqliteEventLog
from tests import harness
from tests.streams.notify.test_alerts import crossed, refused, reported, settled

SECRET = "whsec-test-0123456789"


class Receiver:
    """Records every delivery; ``fail`` answers 500 (or hangs, ``hang``) to the first n posts."""

    def __init__(self, fail: int = 0, hang: int = 0) -> None:
        self.fail, self.hang = fail, hang
        self.posts: list[dict] = []
        self.tries = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.tries += 1
        body = await request.read()
        if self.hang > 0:  # longer than the notifier's timeout: it gives up and retries
            self.hang -= 1
            await asyncio.sleep(2)
            return web.Response(status=500)
        if self.fail > 0:
            self.fail -= 1
            return web.Response(status=500)
        ts = request.headers[TIMESTAMP]
        assert request.headers[SIGNATURE] == signature(SECRET, ts, body)
        assert abs(int(ts) - time.time()) < 60
        alert = orjson.loads(body)
        assert request.headers[EVENT_ID] == alert["id"]
        self.posts.append(alert)
        return web.Response(status=204)


async def running(receiver: Receiver, log: SqliteEventLog, keys: list[ExpiringKey], archive_root: Path | None = None,
                  **settings):
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    server = TestServer(app)
    await server.start_server()
    cfg = AlertSettings(webhook_url=str(server.make_url("/hook")), webhook_secret=SECRET, timeout_s=0.3,
                        backoff_s=0.01, anomaly_min_micro=1_000, **settings)
    pod = web.Application()
    ctx = alerts_ctx(cfg, log, lambda: keys, archive_root)(pod)
    await ctx.__anext__()
    return server, pod, ctx


async def until(check, timeout: float = 20.0) -> None:
    """Wait for ``check`` to hold; the deadline is generous (a loaded box), the assertions after it are exact."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_each_alert_is_received_once_signed(tmp_path: Path) -> None:
    log = SqliteEventLog.open(tmp_path / "events.sqlite")
    now = datetime.now(timezone.utc)
    receiver = Receiver()
    keys = [ExpiringKey("fb-soon", "payments", "checkout", (now + timedelta(days=3)).timestamp())]
    await log.append(settled("before-start", now, 9_999_999))  # already in the log: never alerted
    server, pod, ctx = await running(receiver, log, keys)
    try:
        await log.append(crossed())
        await log.append(refused("req-1"))
        await log.append(refused("req-2"))  # same scope and month: the same alert
        await log.append(reported(2))
        start = now.replace(second=0, microsecond=0) - timedelta(minutes=20)
        for m in range(10):
            await log.append(settled(f"steady-{m}", start + timedelta(minutes=m), 1_000))
        await log.append(settled("burst", start + timedelta(minutes=10), 50_000))
        await log.append(settled("after", start + timedelta(minutes=11), 1_000))
        await until(lambda: len(receiver.posts) >= 5)
        pod[DISPATCHER].offer([a for a in (await _again(log))])  # offered again: deduped by id
        await asyncio.sleep(0.2)
    finally:
        await _stop(ctx, server, log)
    kinds = sorted(p["kind"] for p in receiver.posts)
    assert kinds == ["budget.hard_limit", "budget.soft_threshold", "cost.anomaly", "key.near_expiry",
                     "reconcile.drift"]
    assert len({p["id"] for p in receiver.posts}) == 5 and receiver.tries == 5
    assert next(p for p in receiver.posts if p["kind"] == "key.near_expiry")["details"]["key_id"] == "fb-soon"
    assert SECRET not in str(receiver.posts)


async def test_every_alert_carries_the_archive_head_a_receiver_can_keep(tmp_path: Path) -> None:
    """The head at send time (``farebox archive verify --expect-head`` checks the archive against it)."""
    from ledger.codec import encode
    from streams.archive.manifest import Manifest
    from streams.archive.write import ArchiveWriter, Record

    root = tmp_path / "archive"
    ArchiveWriter(root, "log").write([Record(0, 1, encode(crossed()))])
    log = SqliteEventLog.open(tmp_path / "events.sqlite")
    receiver = Receiver()
    server, pod, ctx = await running(receiver, log, [], root)
    try:
        await log.append(crossed())
        await until(lambda: len(receiver.posts) >= 1)
    finally:
        await _stop(ctx, server, log)
    entry, head = Manifest(root).head()
    assert receiver.posts[0]["archive_head"] == {"entry": entry, "hash": head} and entry == 1


async def _again(log: SqliteEventLog):
    from streams.notify.alerts import alert_of

    return [a for _, e in await log.read() if (a := alert_of(e)) is not None]


async def _stop(ctx, server: TestServer, log: SqliteEventLog) -> None:
    with pytest.raises(StopAsyncIteration):
        await ctx.__anext__()
    await server.close()
    await log.close()


async def test_a_receiver_answering_500_or_timing_out_is_retried_then_logged(tmp_path: Path, caplog) -> None:
    log = SqliteEventLog.open(tmp_path / "events.sqlite")
    flaky = Receiver(fail=2, hang=1)  # a timeout, then two 500s, then accepted
    server, pod, ctx = await running(flaky, log, [])
    try:
        await log.append(crossed())
        await until(lambda: len(flaky.posts) == 1)
        assert flaky.tries == 4 and pod[DISPATCHER].stats["retries"] == 3 and pod[DISPATCHER].stats["sent"] == 1
    finally:
        await _stop(ctx, server, log)
    log = SqliteEventLog.open(tmp_path / "events2.sqlite")
    down = Receiver(fail=10**6)
    server, pod, ctx = await running(down, log, [], retries=2)
    try:
        with caplog.at_level(logging.WARNING, logger="farebox.notify"):
            await log.append(crossed("team:kyc"))
            await until(lambda: pod[DISPATCHER].stats["failed"] == 1)
    finally:
        await _stop(ctx, server, log)
    assert down.tries == 3 and down.posts == []
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "team:kyc/2026-11/soft" in errors[0].getMessage()
    assert "alerts.webhook_url (webhook at 127.0.0.1) answered 500" in errors[0].getMessage()
    assert "/hook" not in errors[0].getMessage()  # the URL's path may carry a token: only its host is named


def test_a_webhook_url_that_does_not_parse_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    for bad in ("not a url", "ftp://example.org/x", "http://", "http://host:notaport/x"):
        cfg = harness.test_config(tmp_path, 1, 2, lambda t, bad=bad: t.update(alerts={"webhook_url": bad}))
        with pytest.raises(ConfigError) as err:
            load_settings(cfg)
        assert "alerts.webhook_url" in str(err.value) and "is not an absolute http(s) URL" in str(err.value)
    cfg = harness.test_config(tmp_path, 1, 2, lambda t: t.update(alerts={"webhook_url": "https://hooks.example/x",
                                                                 "webhook_secret_env": "FB_HOOK_SECRET"}))
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, env={})
    assert "alerts.webhook_secret_env" in str(err.value)
    settings = load_settings(cfg, env={"FB_HOOK_SECRET": "s3cret"})
    assert settings.observability.alerts.webhook_secret == "s3cret" and "s3cret" not in repr(settings)
    assert yaml.safe_load(cfg.read_text())["alerts"]["webhook_url"] == "https://hooks.example/x"
