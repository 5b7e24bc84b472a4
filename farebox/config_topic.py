"""Distributed mode's config topic, wired to a pod's snapshot follower, and the one-shot publisher the CLI uses.

``follower_of`` builds a pod's ``proxy.control.follow.SnapshotFollower`` from the settings (its state
folder, poll interval and the secrets resolver, which reads the environment and the secrets file).
``attach_config_topic`` gives it the compacted config topic as its feed and a publisher the control service
tells about commits; ``publish_now`` is ``farebox config apply``'s. ``streams.config_topic`` (aiokafka)
is imported by the distributed-mode functions only: embedded pods never load the Kafka client.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from farebox.secrets import resolve_provider_secrets
from farebox.settings import Settings
from proxy.control.db.store import ConfigDB
from proxy.control.document import content_hash
from proxy.control.follow import SnapshotFollower
from proxy.snapshot import Secrets, Snapshot

if TYPE_CHECKING:
    from streams.config_topic import KafkaSnapshotPublisher


def follower_of(settings: Settings, db: ConfigDB | None, swap: Callable[[Snapshot], None], secrets: Secrets,
                **kw: Any) -> SnapshotFollower:
    """The pod's snapshot follower, configured from ``settings``."""
    return SnapshotFollower(settings.state_dir, settings.poll_interval_s, functools.partial(resolve_provider_secrets, settings),
                            db, swap, secrets, **kw)


def attach_config_topic(follower: SnapshotFollower, settings: Settings) -> KafkaSnapshotPublisher:
    """Distributed mode: the follower reads the config topic first and the database every
    ``config_db_poll_s``; returns the publisher the control service tells about commits."""
    from streams.config_topic import KafkaSnapshotFeed, KafkaSnapshotPublisher

    d = settings.distributed
    follower.feed = KafkaSnapshotFeed(d.bootstrap, d.config_topic, content_hash,
                                      client_id=f"farebox-{settings.pod_id}-config-feed")
    publisher = KafkaSnapshotPublisher(d.bootstrap, d.config_topic, content_hash,
                                       client_id=f"farebox-{settings.pod_id}-config")
    follower.publisher, follower.db_poll_s = publisher, d.config_db_poll_s
    return publisher


async def publish_now(settings: Settings, version: int, document: dict[str, Any], timeout_s: float = 5.0) -> bool:
    """For a one-shot committer (``farebox config apply`` in distributed mode): publish ``version`` and wait
    up to ``timeout_s``. False if Kafka did not take it: the commit stands and pods find it in the database."""
    if settings.mode != "distributed":
        return False
    from streams.config_topic import KafkaSnapshotPublisher

    d = settings.distributed
    publisher = KafkaSnapshotPublisher(d.bootstrap, d.config_topic, content_hash, client_id="farebox-cli-config",
                                       send_timeout_s=timeout_s)
    publisher.publish(version, document)
    await publisher.close(timeout_s)
    return publisher.sent_version >= version


async def config_topic_ctx(app: Any, follower: SnapshotFollower) -> AsyncIterator[None]:
    """The feed reads for the app's lifetime; at shutdown the publisher flushes (a few seconds at most)."""
    from streams.config_topic import KafkaSnapshotFeed, KafkaSnapshotPublisher

    feed, publisher = follower.feed, follower.publisher
    if isinstance(feed, KafkaSnapshotFeed):
        feed.start()
    yield
    if isinstance(publisher, KafkaSnapshotPublisher):
        await publisher.close()
    if isinstance(feed, KafkaSnapshotFeed):
        await feed.close()
