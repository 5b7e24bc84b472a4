"""Topic manifests for a Kafka that users run themselves: the same specs as the local broker's, rendered
for Strimzi and for kafka-topics.sh, and accepted by a real broker."""

from __future__ import annotations

import shlex
import uuid

import yaml

from infra.kafka.__main__ import main
from infra.kafka.topics import (
    create_topics,
    kafka_topics_commands,
    production_topics,
    strimzi_manifest,
)
from tests.infra.kafka.test_broker import _configs


def test_strimzi_topics_carry_every_spec_field():
    specs = production_topics(partitions=12, replication_factor=3, min_insync=2)
    docs = list(yaml.safe_load_all(strimzi_manifest(specs, "prod-kafka", "payments")))
    assert [d["spec"]["topicName"] for d in docs] == ["fb.requests", "fb.scope-entries", "fb.rollups", "fb.config",
                                                      "fb.dead-letter"]
    for doc, spec in zip(docs, specs):
        assert doc["kind"] == "KafkaTopic" and doc["metadata"]["labels"] == {"strimzi.io/cluster": "prod-kafka"}
        assert doc["metadata"]["namespace"] == "payments" and "." not in doc["metadata"]["name"]
        assert (doc["spec"]["partitions"], doc["spec"]["replicas"]) == (spec.partitions, 3)
        assert doc["spec"]["config"] == spec.configs() and doc["spec"]["config"]["min.insync.replicas"] == "2"
    config = docs[3]["spec"]
    assert config["partitions"] == 1 and config["config"]["cleanup.policy"] == "compact"
    assert "retention.ms" not in config["config"]  # compacted, kept forever
    dead = docs[4]["spec"]
    assert dead["partitions"] == 1 and dead["config"]["retention.ms"] == str(30 * 24 * 3600 * 1000)


def test_kafka_topics_lines_parse_back_to_the_specs(capsys):
    assert main(["manifests", "--format", "kafka-topics", "--partitions", "6", "--bootstrap", "k0:9092"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == kafka_topics_commands(production_topics(partitions=6), "k0:9092").splitlines()
    for line, spec in zip(lines, production_topics(partitions=6)):
        words = shlex.split(line)
        flag = {words[i]: words[i + 1] for i in range(1, len(words) - 1) if words[i].startswith("--")
                and not words[i + 1].startswith("--")}
        configs = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--config")
        assert (flag["--topic"], int(flag["--partitions"]), int(flag["--replication-factor"])) == \
            (spec.name, spec.partitions, 3)
        assert configs == spec.configs() and "--if-not-exists" in words


async def test_a_real_broker_takes_the_production_topics(kafka_broker):
    prefix = f"prod{uuid.uuid4().hex[:6]}."
    specs = production_topics(partitions=2, replication_factor=1, min_insync=1, prefix=prefix)  # one broker here
    assert sorted(await create_topics(kafka_broker.bootstrap, specs)) == sorted(s.name for s in specs)
    requests = await _configs(kafka_broker.bootstrap, f"{prefix}requests")
    config = await _configs(kafka_broker.bootstrap, f"{prefix}config")
    assert requests["min.insync.replicas"] == "1" and requests["unclean.leader.election.enable"] == "false"
    assert config["cleanup.policy"] == "compact" and config["max.message.bytes"] == str(16 * 1024 * 1024)
