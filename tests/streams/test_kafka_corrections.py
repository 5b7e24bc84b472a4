"""``rating.corrected`` (farebox rerate --apply in distributed mode) goes to fb.requests, keyed by team."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from infra.kafka.topics import TopicSpec, create_topics
from ledger.codec import decode
from ledger.events import RatingCorrected
from streams.kafka.log import KafkaEventLog
from tests.infra.kafka.support import read_records


async def test_a_correction_is_appended_to_the_requests_topic_by_team(kafka_broker, tmp_path):
    requests, scopes = f"req-{uuid.uuid4().hex[:8]}", f"scope-{uuid.uuid4().hex[:8]}"
    await create_topics(kafka_broker.bootstrap, [TopicSpec(requests, 3), TopicSpec(scopes, 3)])
    log = KafkaEventLog(kafka_broker.bootstrap, tmp_path / "spool", requests_topic=requests, scope_topic=scopes,
                        config_topic=scopes)
    fix = RatingCorrected(
        time=datetime(2026, 12, 5, tzinfo=timezone.utc), request_id="r1", team="payments", sequence=1,
        admitted_at=datetime(2026, 11, 3, tzinfo=timezone.utc), currency="INR", old_price_version=2,
        price_version=3, old_cost_micro=900, cost_micro=90, old_cost_by_scope={"team:payments": 900},
        cost_by_scope={"team:payments": 90}, old_attempt_costs={"1": 900}, attempt_costs={"1": 90}, reason="typo")
    try:
        await log.append(fix)
        await log.append(fix)  # applied twice: deduped by id
        await log.flush()
    finally:
        await log.close()
    records = await read_records(kafka_broker.bootstrap, requests)
    assert [(event_id, key) for _, _, event_id, key, _ in records] == [("r1/rerate/1", b"payments")]
    assert decode(records[0][4]) == fix
    assert await read_records(kafka_broker.bootstrap, scopes) == []
