"""``farebox archiver``: the distributed archiver as its own process, against a real broker, until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from datetime import date, datetime, timedelta, timezone

from infra.kafka.topics import TopicSpec, create_topics
from ledger.events import HoldExpired
from streams.archive.kafka_source import archiver_lag
from streams.archive.manifest import verify
from streams.archive.read import read_archive
from streams.kafka.log import KafkaEventLog
from tests.farebox.test_settings import ROOT, write
from tests.infra.kafka.support import session_broker

T0 = datetime(2026, 11, 20, 23, 58, tzinfo=timezone.utc)  # spans midnight: two dated folders


def expiry(i: int) -> HoldExpired:
    return HoldExpired(time=T0 + timedelta(seconds=7 * i), request_id=f"r{i}", team="platform",
                       charged={"team:platform": 100 + i}, currency="INR")


async def produce(bootstrap: str, topic: str, spool, events: list) -> None:
    log = KafkaEventLog(bootstrap, spool, requests_topic=topic, scope_topic=topic, config_topic=topic)
    try:
        await asyncio.gather(*(log.append(e) for e in events))
    finally:
        await log.close()


def test_archiver_runs_until_sigterm_and_resumes_from_its_offsets(tmp_path) -> None:
    broker = session_broker()
    topic = f"requests-{uuid.uuid4().hex[:10]}"
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec(topic, partitions=2)]))
    config = write(tmp_path, lambda t: t.update(
        mode="distributed", distributed={"bootstrap": broker.bootstrap, "requests_topic": topic},
        archive={"flush_interval_s": 0.2, "group_id": f"archiver-{topic}", "compact": False}))
    first = [expiry(i) for i in range(40)]
    asyncio.run(produce(broker.bootstrap, topic, tmp_path / "spool", first))
    root, days = tmp_path / "archive", (date(2026, 11, 20), date(2026, 11, 21))

    def run_until(count: int) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "farebox", "archiver", "--config", str(config)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                if (root / "_manifest.jsonl").exists() and read_archive(root, *days).num_rows >= count:
                    break
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, out
        return out

    out = run_until(40)
    assert "farebox archiver stopped: 40 event(s) archived" in out
    more = [expiry(i) for i in range(40, 55)]
    asyncio.run(produce(broker.bootstrap, topic, tmp_path / "spool2", more))
    group = f"archiver-{topic}"
    assert asyncio.run(archiver_lag(broker.bootstrap, topic, group)) == 15  # what replay reports as lag
    out = run_until(55)
    assert asyncio.run(archiver_lag(broker.bootstrap, topic, group)) == 0
    assert "stopped: 15 event(s) archived" in out  # its consumer group's offsets: nothing twice
    table = read_archive(root, *days)
    assert sorted(table.column("id").to_pylist()) == sorted(e.id for e in first + more)
    assert verify(root).intact


def test_archiver_refuses_embedded_mode(tmp_path, capsys) -> None:
    from farebox.cli import main

    assert main(["archiver", "--config", str(write(tmp_path))]) == 2
    assert "in embedded mode `farebox serve` archives its log itself" in capsys.readouterr().err
