"""``farebox reconcile`` in distributed mode: the report event goes to the Kafka requests topic (a real broker).

The archive is kept by the archiver in this mode; here it is written from a
scratch log as the archiver would. The command must append
``reconcile.reported`` to the configured requests topic, never to a SQLite log.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import yaml

from farebox.settings import load_settings
from infra.kafka.topics import TopicSpec, create_topics
from ledger.codec import decode
from ledger.reconcile_events import ReconcileReported
from ledger.usage import TokenUsage
from streams.archive.write import archive_from_log
from streams.sqlite_log import SqliteEventLog
from tests.harness import read_events
from tests.infra.kafka.support import read_records, session_broker
from tests.kafka_leaks import absorb_kafka_leaks  # noqa: F401 (autouse fixture)
from tests.reconcile.test_reconcile_cli import admin, config, record_usage, run  # noqa: F401 (fixtures)


def _archive(log_path, root) -> None:
    async def go() -> None:
        log = SqliteEventLog.open(log_path, readonly=True)
        try:
            await archive_from_log(log, root)
        finally:
            await log.close()

    asyncio.run(go())


def test_the_report_event_goes_to_the_kafka_requests_topic(config, tmp_path, capsys):  # noqa: F811
    broker = session_broker()
    topic = f"requests-{uuid.uuid4().hex[:10]}"
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec(topic, partitions=2)]))
    record_usage(config, TokenUsage(input=600, cached_input=300, output=200),
                 TokenUsage(input=400, cached_input=200, output=60, reasoning=40))
    embedded = load_settings(config)
    _archive(embedded.event_log_path, embedded.archive_root)  # what the archiver would have written
    written = len(read_events(embedded.event_log_path))
    tree = yaml.safe_load(config.read_text())
    tree.update(mode="distributed", distributed={"bootstrap": broker.bootstrap, "requests_topic": topic,
                                                 "spool_dir": str(tmp_path / "spool")})
    config.write_text(yaml.safe_dump(tree, sort_keys=False))
    assert load_settings(config).mode == "distributed"

    assert run(config, "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["flagged"] == 0 and report["rows"]
    records = asyncio.run(read_records(broker.bootstrap, topic))
    (found,) = [r for r in records if r[2] == report["event_id"]]
    event = decode(found[4])
    assert isinstance(event, ReconcileReported) and (event.id, event.rows, event.flagged) == (report["event_id"], 6, 0)
    assert len(read_events(embedded.event_log_path)) == written  # nothing went to a SQLite log

    assert run(config, "--format", "json") == 0  # an unchanged re-run: the same id (consumers dedupe it)
    assert json.loads(capsys.readouterr().out)["event_id"] == report["event_id"]
    ids = {r[2] for r in asyncio.run(read_records(broker.bootstrap, topic))}
    assert ids == {report["event_id"]}
