"""farebox's Kafka topics and how to create them (idempotent: an existing topic is left alone).

Defaults follow ``shared/ARCHITECTURE.md``: ``fb.requests`` (request events, keyed by team),
``fb.scope-entries`` (per-scope ledger entries and leases, keyed by scope), ``fb.rollups``,
``fb.config`` (compacted: the latest snapshot per key, see ``streams/config_topic.py``),
``fb.dead-letter`` (records the worker could not read, kept 30 days: ``streams/dead_letters.py``).
Partitions bound parallelism per topic: one ledger/lease processor
per partition, so ``fb.scope-entries`` partitions = how many scopes are processed in parallel.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

WEEK_MS = 7 * 24 * 3600 * 1000
DEAD_LETTER_RETENTION_MS = 30 * 24 * 3600 * 1000  # long enough to notice, fix and replay


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    retention_ms: int = WEEK_MS  # -1 keeps forever
    compacted: bool = False
    replication_factor: int = 1
    extra: dict[str, str] = field(default_factory=dict)

    def configs(self) -> dict[str, str]:
        out = {"retention.ms": str(self.retention_ms), **self.extra}
        if self.compacted:
            # compaction keeps the newest record per key; small segments + ratio make it happen soon
            out.update({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1", "segment.ms": "3600000"})
            out.pop("retention.ms")
        return out


def farebox_topics(partitions: int = 3, retention_ms: int = WEEK_MS, replication_factor: int = 1,
                   prefix: str = "fb.") -> list[TopicSpec]:
    """The five topics; ``fb.config`` has one partition (a handful of snapshots, read whole by every pod),
    ``fb.dead-letter`` one too (rare records, read by people)."""
    return [
        TopicSpec(f"{prefix}requests", partitions, retention_ms, replication_factor=replication_factor),
        TopicSpec(f"{prefix}scope-entries", partitions, retention_ms, replication_factor=replication_factor),
        TopicSpec(f"{prefix}rollups", partitions, retention_ms, replication_factor=replication_factor),
        # max.message.bytes: a snapshot document (keys, prices) can outgrow the broker's 1 MB default
        TopicSpec(f"{prefix}config", 1, -1, compacted=True, replication_factor=replication_factor,
                  extra={"max.message.bytes": str(16 * 1024 * 1024)}),
        TopicSpec(f"{prefix}dead-letter", 1, max(retention_ms, DEAD_LETTER_RETENTION_MS),
                  replication_factor=replication_factor),
    ]


async def create_topics(bootstrap: str, specs: list[TopicSpec], timeout_s: float = 30.0) -> list[str]:
    """Create what is missing; returns the names created. Retries while the broker is still fencing."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    deadline = time.monotonic() + timeout_s
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [s for s in specs if s.name not in existing]
        created: list[str] = []
        while wanted:
            new = [NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.configs()) for s in wanted]
            try:
                response = await admin.create_topics(new)
            except (KafkaError, asyncio.TimeoutError):  # still electing leaders after a restart
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
                continue
            retry = []
            for name, code, *rest in response.topic_errors:
                if code == 0:
                    created.append(name)
                elif code == TopicAlreadyExistsError.errno:
                    continue
                elif time.monotonic() < deadline:
                    retry.append(name)
                else:
                    raise RuntimeError(f"could not create topic {name}: error {code} {rest}")
            wanted = [s for s in wanted if s.name in retry]
            if wanted:
                await asyncio.sleep(0.1)
        return created
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, names: list[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.delete_topics(names)
    finally:
        await admin.close()


# --- manifests for people who run Kafka themselves ------------------------------------------------


def production_topics(partitions: int = 12, replication_factor: int = 3, min_insync: int = 2,
                      retention_ms: int = WEEK_MS, prefix: str = "fb.") -> list[TopicSpec]:
    """farebox's topics as a replicated production cluster wants them: ``min.insync.replicas`` with
    producers on ``acks=all``, so an acknowledged event survives the loss of a broker."""
    return [TopicSpec(s.name, s.partitions, s.retention_ms, s.compacted, s.replication_factor,
                      {**s.extra, "min.insync.replicas": str(min_insync), "unclean.leader.election.enable": "false"})
            for s in farebox_topics(partitions, retention_ms, replication_factor, prefix)]


def strimzi_manifest(specs: list[TopicSpec], cluster: str, namespace: str | None = None) -> str:
    """``KafkaTopic`` resources (Strimzi's topic operator), one YAML document per topic."""
    import yaml

    docs = []
    for s in specs:
        meta: dict = {"name": s.name.replace(".", "-").replace("_", "-"),
                      "labels": {"strimzi.io/cluster": cluster}}
        if namespace:
            meta["namespace"] = namespace
        docs.append({"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaTopic", "metadata": meta,
                     "spec": {"topicName": s.name, "partitions": s.partitions, "replicas": s.replication_factor,
                              "config": s.configs()}})
    return yaml.safe_dump_all(docs, sort_keys=False)


def kafka_topics_commands(specs: list[TopicSpec], bootstrap: str) -> str:
    """The same topics as ``kafka-topics.sh --create`` lines (idempotent with ``--if-not-exists``)."""
    lines = []
    for s in specs:
        configs = " ".join(f"--config {k}={v}" for k, v in s.configs().items())
        lines.append(f"kafka-topics.sh --bootstrap-server {bootstrap} --create --if-not-exists --topic {s.name} "
                     f"--partitions {s.partitions} --replication-factor {s.replication_factor} {configs}")
    return "\n".join(lines) + "\n"
