"""Distributed mode: partitions move between workers while requests flow.

A second worker joins the consumer group under open traffic (the group
rebalances: some partitions go to it), then the first worker is stopped (they
all move to the second). Each move revokes partitions from a worker that has
batches handled and being written, and makes a worker recover tables from
their changelogs. ``streams.batching`` pauses the agents on revocation and
writes everything first; without that, recovery could overwrite a state the
worker had newer in memory and the next flush would build on the older one.

The money facts are those of ``test_faults``: counted from the events in Kafka
(first occurrence of each id), the projection equals them, every admitted
request is closed exactly once, and every hold and lease comes back. Requests
may be refused while the ledger is between owners (a top-up can wait out
``lease_wait_s``); the ledger must match whatever happened.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest
import redis

from infra.redis.server import RedisServer
from tests.distributed.cluster import TEAMS, Supervisor, running_cluster
from tests.distributed.test_faults import (
    FAST_SIM,
    HOLD_TTL_S,
    _burst,
    _closed_exactly_once,
    _wait_ledger_matches,
    _wait_quiet,
)
from tests.infra.kafka.support import session_broker

pytestmark = pytest.mark.e2e

# A worker whose table recovery reads nothing this long ends itself (streams.watchdog) and the test's supervisor
# starts it again: a stalled table recovery costs seconds, not the ledger.
STALL_S = 15


def test_partitions_moving_between_workers_under_traffic_lose_and_double_nothing(tmp_path_factory):
    server = RedisServer().start()
    try:
        with running_cluster(tmp_path_factory.mktemp("join"), session_broker().bootstrap, server.url,
                             lease={"lease_ttl_s": 8, "lease_expiry_grace_s": 2, "lease_last_pct": 5,
                                    "worker_stall_s": STALL_S},
                             server={"hold_ttl_s": HOLD_TTL_S}, sim_defaults=FAST_SIM) as cluster:
            rc = redis.Redis.from_url(cluster.redis_url)
            statuses: Counter = Counter()
            done = threading.Event()
            workers = Supervisor(cluster)
            workers.adopt("worker", cluster.worker)
            cluster.worker = None  # the supervisor's now

            def traffic() -> None:  # bursts of 12 over the 3 pods until told to stop
                while not done.is_set():
                    statuses.update(status for _, status, _ in asyncio.run(_burst(cluster, [0, 1, 2], 12)))

            sender = threading.Thread(target=traffic)
            sender.start()
            try:
                time.sleep(3)
                workers.start("worker-b")  # joins: the group's partitions are split
                time.sleep(15)
                workers.stop("worker")  # leaves: everything moves to worker-b
                time.sleep(15)
            finally:
                done.set()
                sender.join(timeout=120)
            try:
                assert statuses[200] >= 0.9 * sum(statuses.values()), statuses
                events, rows = _wait_ledger_matches(cluster, rc, timeout=90)
                _closed_exactly_once(events)
                _wait_quiet(rc)
            finally:
                workers.close()
            print(f"\nworkers joined and left under traffic: {dict(statuses)}; "
                  f"settled {({t: rows[t]['settled'] for t in TEAMS})}; "
                  f"restarted after a recovery stall: {dict(workers.restarts) or 'none'}")
    finally:
        server.cleanup()
