"""Distributed mode's alerts: ``farebox archiver`` (``run_kafka_archiver``, in process) is the cluster's
notifier. Events produced to the real broker's request and scope-entry topics after it started reach the
local webhook receiver once each; a key near expiry is read from the config database."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer
from aiokafka import AIOKafkaProducer

from farebox.archiver import run_kafka_archiver
from farebox.settings import load_settings
from infra.kafka.topics import create_topics, farebox_topics
from ledger.codec import encode
from tests import harness
from tests.streams.notify.test_alerts import crossed, refused
from tests.streams.notify.test_webhook import SECRET, Receiver, until


async def test_the_archiver_raises_each_alert_once_from_the_topics(tmp_path: Path, kafka_broker) -> None:
    prefix = f"n{uuid.uuid4().hex[:8]}."
    await create_topics(kafka_broker.bootstrap, farebox_topics(2, prefix=prefix))
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    server = TestServer(app)
    await server.start_server()
    expires = (datetime.now(timezone.utc) + timedelta(days=2)).timestamp()

    def distributed(tree: dict) -> None:
        tree["mode"] = "distributed"
        tree["distributed"] = {"bootstrap": kafka_broker.bootstrap, "requests_topic": f"{prefix}requests",
                               "scope_topic": f"{prefix}scope-entries", "partitions": 2}
        tree["alerts"] = {"webhook_url": str(server.make_url("/hook")), "webhook_secret_env": "FB_TEST_HOOK",
                          "backoff_s": 0.01}
        tree["archive"] = {"path": str(tmp_path / "archive"), "group_id": f"{prefix}archiver"}
        tree["keys"] = [{"id": "fb-dev-soon", "hash": hashlib.sha256(b"fb-dev-soon-secret").hexdigest(),
                         "team": "platform", "app": "playground", "aliases": ["chat-default"], "expires_at": expires}]

    settings = load_settings(harness.test_config(tmp_path, 1, 2, distributed), env={"FB_TEST_HOOK": SECRET})
    stop = asyncio.Event()
    archiver = asyncio.create_task(run_kafka_archiver(settings, stop))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    await producer.start()
    try:
        await until(lambda: any(p["kind"] == "key.near_expiry" for p in receiver.posts), 30)
        deadline = time.monotonic() + 30
        n = 0
        while len(receiver.posts) < 3:  # the feed starts at the topics' ends: send until it is reading;
            assert time.monotonic() < deadline  # every round raises the same two alert ids again
            for topic, event in ((f"{prefix}scope-entries", crossed("team:platform")),
                                 (f"{prefix}requests", refused(f"r-{n}")), (f"{prefix}requests", refused(f"r-{n + 1}"))):
                await producer.send_and_wait(topic, encode(event), key=event.key.encode())
            n += 2
            await asyncio.sleep(0.3)
        await asyncio.sleep(0.5)
    finally:
        await producer.stop()
        stop.set()
        await asyncio.wait_for(archiver, 30)
        await server.close()
    kinds = sorted(p["kind"] for p in receiver.posts)
    assert kinds == ["budget.hard_limit", "budget.soft_threshold", "key.near_expiry"], kinds
    expiry = next(p for p in receiver.posts if p["kind"] == "key.near_expiry")
    assert expiry["details"]["key_id"] == "fb-dev-soon" and "fb-dev-soon-secret" not in str(receiver.posts)
    assert receiver.tries == 3 and time.time() < expires
