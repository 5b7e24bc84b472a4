"""The snapshot follower in distributed mode: the config topic first, the database as fallback and repair.

Real parts throughout: a SQLite config database, the session's Kafka broker,
the Kafka feed and publisher.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from farebox.config_topic import attach_config_topic, follower_of, publish_now
from farebox.control import open_config_db
from farebox.settings import Settings, load_settings
from infra.kafka.topics import create_topics, farebox_topics
from infra.process import free_port
from proxy.control.document import content_hash
from proxy.control.follow import SnapshotFollower
from proxy.control.service import ControlService
from proxy.snapshot import Secrets, Snapshot
from streams.config_topic import KafkaSnapshotFeed, KafkaSnapshotPublisher
from tests.harness import mint
from tests.infra.kafka.support import session_broker
from tests.kafka_leaks import absorb_kafka_leaks  # noqa: F401 (autouse fixture)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "farebox.yaml"


@pytest.fixture(scope="module")
def kafka_broker():  # type: ignore[no-untyped-def]
    return session_broker()


async def settings_for(tmp_path: Path, bootstrap: str) -> Settings:
    prefix = f"rl{uuid.uuid4().hex[:8]}."
    await create_topics(bootstrap, [s for s in farebox_topics(1, prefix=prefix) if s.name.endswith("config")])
    tree = yaml.safe_load(EXAMPLE.read_text())
    tree["secrets_file"] = str(ROOT / "examples" / "secrets.env")
    tree["state_dir"] = str(tmp_path)
    tree["mode"] = "distributed"
    tree["distributed"] = {"bootstrap": bootstrap, "config_topic": f"{prefix}config", "config_db_poll_s": 600}
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree))
    return load_settings(path)


def follower_for(settings: Settings, db) -> tuple[SnapshotFollower, list[Snapshot]]:  # type: ignore[no-untyped-def]
    live: list[Snapshot] = []
    follower = follower_of(settings, db, live.append, Secrets())
    attach_config_topic(follower, settings)
    return follower, live


async def until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    """Wait for ``predicate()`` (a bool, or a coroutine giving one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s}s"
        await asyncio.sleep(0.05)


async def test_a_commit_is_published_and_another_pod_adopts_it_from_the_topic(kafka_broker, tmp_path) -> None:
    settings = await settings_for(tmp_path, kafka_broker.bootstrap)
    db = await asyncio.to_thread(open_config_db, settings)
    committer, _ = follower_for(settings, db)
    other, live = follower_for(settings, db)
    for f in (committer, other):
        f.feed.start()  # type: ignore[union-attr]
    try:
        # start-up: both take the database; the first poll finds the topic empty and publishes it
        for f in (committer, other):
            await f.poll_once()
        seeded = committer.version
        assert other.version == seeded and other.source == "database"
        await until(lambda: (other.feed.head() or (0,))[0] == seeded, 30,  # type: ignore[union-attr]
                    "the seeded snapshot repaired onto the topic")

        service = ControlService(db, publisher=committer.publisher, adopt=committer.adopt)
        await service.put_business_unit("ops", "wholesale")
        assert committer.version == seeded + 1

        async def adopted() -> bool:
            await other.poll_once()  # the database is not read again for 600 s: only the topic can bring it
            return other.version == seeded + 1

        await until(adopted, 30, "the other pod adopts the commit from the topic")
        assert other.source == "topic" and other.status()["topic_version"] == seeded + 1
        assert "wholesale" in live[-1].business_units
    finally:
        for f in (committer, other):
            await f.publisher.close()  # type: ignore[union-attr]
            await f.feed.close()  # type: ignore[union-attr]
        await asyncio.to_thread(db.close)


async def test_with_kafka_unreachable_the_database_still_brings_changes(tmp_path, kafka_broker) -> None:
    settings = await settings_for(tmp_path, kafka_broker.bootstrap)
    db = await asyncio.to_thread(open_config_db, settings)
    live: list[Snapshot] = []
    nowhere = f"127.0.0.1:{free_port()}"
    follower = follower_of(settings, db, live.append, Secrets(), db_poll_s=0.01)
    follower.feed = KafkaSnapshotFeed(nowhere, "fb.config", lambda d: "", retry_s=0.1)
    follower.publisher = KafkaSnapshotPublisher(nowhere, "fb.config", lambda d: "", retry_s=0.1, send_timeout_s=0.5)
    follower.feed.start()
    try:
        await follower.poll_once()
        first = follower.version
        service = ControlService(db)  # another process committed (no publisher): only the database has it
        await service.put_business_unit("ops", "wholesale")

        async def adopted() -> bool:
            await follower.poll_once()
            return follower.version == first + 1

        await until(adopted, 30, "the change adopted from the database")
        assert follower.source == "database" and follower.publisher.sent_version == 0
        assert follower.publisher.failures >= 1 or follower.publisher._wanted is not None  # noqa: SLF001 - queued, retrying
    finally:
        await follower.publisher.close(timeout_s=0.1)
        await follower.feed.close()
        await asyncio.to_thread(db.close)



async def test_a_one_shot_committer_publishes_and_a_fresh_feed_reads_it(kafka_broker, tmp_path) -> None:
    settings = await settings_for(tmp_path, kafka_broker.bootstrap)
    db = await asyncio.to_thread(open_config_db, settings)
    try:
        done = await ControlService(db).put_business_unit("cli", "wholesale")  # as `farebox config apply` commits
        head = await asyncio.to_thread(db.head)
        assert done is not None and head is not None
        document = await asyncio.to_thread(db.document, head[0])
        assert await publish_now(settings, head[0], document, timeout_s=30)
        feed = KafkaSnapshotFeed(kafka_broker.bootstrap, settings.distributed.config_topic, content_hash)
        feed.start()
        try:
            await until(lambda: feed.head() == head, 30, "the fresh feed reads the published snapshot")
        finally:
            await feed.close()
        dead = replace(settings, distributed=replace(settings.distributed, bootstrap=f"127.0.0.1:{free_port()}"))
        assert not await publish_now(dead, head[0], document, timeout_s=0.5)  # Kafka away: False, no exception
    finally:
        await asyncio.to_thread(db.close)


async def test_a_topic_snapshot_that_does_not_compile_is_refused_once_and_the_pod_keeps_serving(
        kafka_broker, tmp_path, caplog) -> None:
    settings = await settings_for(tmp_path, kafka_broker.bootstrap)
    db = await asyncio.to_thread(open_config_db, settings)
    follower, _ = follower_for(settings, db)
    follower.feed.start()  # type: ignore[union-attr]
    try:
        await follower.poll_once()
        serving = follower.version
        bad = {"control": {"deployments": [{"id": "broken"}]}, "prices": [], "keys": [], "admin_tokens": []}
        follower.publisher.publish(serving + 1, bad)  # type: ignore[union-attr]
        await until(lambda: (follower.feed.head() or (0,))[0] == serving + 1, 30, "the bad snapshot on the feed")  # type: ignore[union-attr]
        for _ in range(3):
            await follower.poll_once()
        assert follower.version == serving and follower.source == "database"
        refusals = [r for r in caplog.records if "does not compile on this pod" in r.getMessage()]
        assert len(refusals) == 1
    finally:
        await follower.publisher.close()  # type: ignore[union-attr]
        await follower.feed.close()  # type: ignore[union-attr]
        await asyncio.to_thread(db.close)


async def test_a_topic_ahead_of_the_database_is_not_trusted(kafka_broker, tmp_path, caplog) -> None:
    settings = await settings_for(tmp_path, kafka_broker.bootstrap)
    db = await asyncio.to_thread(open_config_db, settings)
    follower, live = follower_for(settings, db)
    follower.db_poll_s = 0.01
    follower.feed.start()  # type: ignore[union-attr]
    try:
        await follower.poll_once()
        in_db = follower.version
        document = await asyncio.to_thread(db.document, in_db)
        stale = {**document, "control": {**document["control"],
                                         "business_units": [*document["control"]["business_units"], "gone"]}}
        follower.publisher.publish(in_db + 40, stale)  # type: ignore[union-attr]  # e.g. the database was restored

        async def back_on_the_database() -> bool:
            await follower.poll_once()
            return follower.source == "database" and any("ahead of the config database" in r.getMessage()
                                                         for r in caplog.records)

        await until(back_on_the_database, 30, "the pod back on the database's version")
        assert follower.version == in_db and "gone" not in live[-1].business_units
        for _ in range(3):  # the feed still holds the stale version: it is not taken again
            await follower.poll_once()
        assert (follower.version, follower.source) == (in_db, "database")
    finally:
        await follower.publisher.close()  # type: ignore[union-attr]
        await follower.feed.close()  # type: ignore[union-attr]
        await asyncio.to_thread(db.close)


async def test_the_cli_publishes_its_commit_to_the_topic_before_it_exits(kafka_broker, tmp_path) -> None:
    settings = await settings_for(tmp_path, kafka_broker.bootstrap)
    config = tmp_path / "farebox.yaml"
    key = await asyncio.to_thread(mint, config, "platform", "playground", "chat-default")  # `farebox keys create`
    assert key.startswith("fb-")
    db = await asyncio.to_thread(open_config_db, settings)
    try:
        head = await asyncio.to_thread(db.head)
    finally:
        await asyncio.to_thread(db.close)
    feed = KafkaSnapshotFeed(kafka_broker.bootstrap, settings.distributed.config_topic, content_hash)
    feed.start()
    try:  # no pod ran: only the CLI can have put the key's snapshot on the topic
        await until(lambda: feed.head() == head, 30, "the CLI's snapshot on fb.config")
    finally:
        await feed.close()
