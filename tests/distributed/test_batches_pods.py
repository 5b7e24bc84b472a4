"""Distributed mode: a batch runs on every pod, and a pod killed mid-batch loses nothing and bills nothing twice.

Real processes: Kafka (Maven jars), Redis, the Faust worker, two gateway pods sharing the batch store (a SQLite
file under their state directory on this one machine; PostgreSQL, the config database's, across machines). Pod 0 is killed (SIGKILL) with lines in flight; pod 1's runner takes them again once their
claims lapse (``batches.claim_s``), under the same request ids: each line is settled once on the requests
topic's first copy of its events, and the worker's projection ends with nothing held for the team and its
settled money equal to those settlements.
"""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import time

import openai
import pytest
import redis

from infra.redis.server import RedisServer
from ledger.codec import decode
from tests.batch_lines import tagging_batch
from tests.distributed.cluster import running_cluster, wait_until
from tests.infra.kafka.support import read_records, session_broker

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_a_pod_killed_mid_batch_leaves_its_lines_to_another_and_nothing_is_billed_twice(tmp_path,
                                                                                          redis_server) -> None:
    broker = session_broker()
    with running_cluster(tmp_path, broker.bootstrap, redis_server.url, pods=2, sim_defaults={"ttft_ms": 150},
                         sections={"batches": {"concurrency": 2, "claim_s": 3}}) as cluster:
        key = cluster.keys["alpha"]
        with openai.OpenAI(base_url=cluster.pod_urls[0] + "/v1", api_key=key, max_retries=0) as first:
            uploaded = first.files.create(file=("b.jsonl", io.BytesIO(tagging_batch(40))), purpose="batch")
            batch = first.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                         completion_window="24h")
            wait_until(lambda: first.batches.retrieve(batch.id).request_counts.completed >= 6, 30,
                       interval=0.05, what="six lines done")
        cluster.kill_pod(0)
        with openai.OpenAI(base_url=cluster.pod_urls[1] + "/v1", api_key=key, max_retries=0) as second:
            done = wait_until(lambda: (b := second.batches.retrieve(batch.id)).status == "completed" and b, 90,
                              what="the batch finished on the surviving pod")
            assert done.request_counts.completed == 40
            lines = second.files.content(done.output_file_id).text.splitlines()
        assert sorted(json.loads(x)["custom_id"] for x in lines) == sorted(f"line-{i}" for i in range(40))
        with sqlite3.connect(tmp_path / "batches.sqlite") as db:  # the kill caught lines in flight
            (again,) = db.execute("SELECT count(*) FROM fb_batch_lines WHERE batch_id = ? AND claims > 1",
                                  (batch.id,)).fetchone()
        assert again >= 1

        def settled():  # type: ignore[no-untyped-def]
            events = [decode(v) for *_, v in asyncio.run(read_records(broker.bootstrap, cluster.requests_topic))]
            mine = {e.request_id for e in events if e.type == "request.admitted"
                    and e.tags.get("fb.batch") == batch.id}
            first_settled: dict[str, int] = {}
            for e in events:
                if e.type == "request.settled" and e.request_id in mine:
                    first_settled.setdefault(e.request_id, e.cost_micro)  # consumers keep the first of an id
            return first_settled if len(first_settled) == 40 else False

        costs = wait_until(settled, 30, what="forty settlements on the requests topic")
        rc = redis.Redis.from_url(redis_server.url)

        def quiet():  # type: ignore[no-untyped-def]
            row = {k.decode(): v.decode() for k, v in rc.hgetall("fb:scope:team:alpha").items()}
            return row if row and row["held"] == "0" else False

        row = wait_until(quiet, 60, what="nothing held for team alpha")
        assert int(row["settled"]) == sum(costs.values())  # each line charged once


def test_a_provider_batch_survives_the_pod_that_admitted_it_and_is_settled_once(tmp_path, redis_server) -> None:
    """``batch_via: provider`` in a cluster: the batch's whole hold is funded from pod 0's lease; pod 0 is killed
    while the provider runs the batch; pod 1 polls it, reads the results, meters every line once and settles the
    batch, and the worker's projection ends with nothing held and the settlement charged once."""
    broker = session_broker()

    def provider(tree: dict) -> None:
        next(a for a in tree["aliases"] if a["name"] == "chat-openai")["batch_via"] = "provider"

    with running_cluster(tmp_path, broker.bootstrap, redis_server.url, pods=2, mutate=provider,
                         sections={"batches": {"provider_poll_s": 0.2}},
                         sim_defaults={"batch_line_ms": 30}) as cluster:
        key = cluster.keys["alpha"]
        with openai.OpenAI(base_url=cluster.pod_urls[0] + "/v1", api_key=key, max_retries=0) as first:
            uploaded = first.files.create(file=("p.jsonl", io.BytesIO(tagging_batch(100))), purpose="batch")
            batch = first.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                         completion_window="24h")
        time.sleep(1.0)  # sent; the provider is still running it (100 lines x 30 ms)
        cluster.kill_pod(0)
        with openai.OpenAI(base_url=cluster.pod_urls[1] + "/v1", api_key=key, max_retries=0) as second:
            done = wait_until(lambda: (b := second.batches.retrieve(batch.id)).status == "completed" and b, 90,
                              what="the batch finished on the surviving pod")
        assert done.request_counts.completed == 100

        def events():  # type: ignore[no-untyped-def]
            out = [decode(v) for *_, v in asyncio.run(read_records(broker.bootstrap, cluster.requests_topic))]
            mine = [e for e in out if e.request_id == batch.id]
            return mine if any(e.type == "request.settled" for e in mine) else False

        mine = wait_until(events, 30, what="the batch's settlement on the requests topic")
        admitted = [e for e in mine if e.type == "request.admitted"]
        assert len(admitted) == 1 and admitted[0].leases  # funded from a lease of pod 0
        assert sorted({e.attempt for e in mine if e.type == "request.attempted"}) == list(range(1, 101))
        settled = next(e for e in mine if e.type == "request.settled")  # the first of its id: what consumers keep
        assert not [e for e in mine if e.type == "hold.expired"]
        rc = redis.Redis.from_url(redis_server.url)

        def quiet():  # type: ignore[no-untyped-def]
            row = {k.decode(): v.decode() for k, v in rc.hgetall("fb:scope:team:alpha").items()}
            return row if row and row["held"] == "0" else False

        row = wait_until(quiet, 60, what="nothing held for team alpha")
        assert int(row["settled"]) == settled.cost_micro > 0
