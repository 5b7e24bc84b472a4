"""One worker's environment for the distributed bench: fresh topics, a config, the worker process, probes.

``WorkerEnv`` owns a unique topic prefix (topics created with
``infra.kafka.topics``), a farebox config made exactly as
``tests.distributed.cluster`` makes it (same mutation, so the worker runs the
cluster's settings), a fresh Redis for the projections, and one
``farebox worker`` process started on demand (optionally under cProfile).
Parts 1-3 share one env: events produced in part 1 are processed before part
2 starts, so what each part expects is added up in ``expected``.

Probes read what the bench reports on: the topics' end offsets, the worker
group's committed offsets (Faust's group id is the app id, ``{prefix}worker``),
and the Redis projection of each scope (``streams.projections``).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from infra.kafka.topics import create_topics, farebox_topics
from infra.process import free_port
from streams.kafka.clients import stop_consumer
from streams.kafka.internals import cluster_metadata
from streams.kafka.log import KafkaEventLog
from tests.distributed.cluster import TEAMS, _mutate
from tests.harness import spawn, stop, test_config

PARTITIONS = 3
LEASE = {"lease_share": 4, "lease_last_pct": 5}  # as tests/distributed/test_cluster.py runs it
TEAM_LIMIT = "100000.00"  # parts 1-3: high enough that no lease is ever refused


@dataclass
class Expected:
    """What the worker must have folded, per team: admitted requests and settled micro-INR."""

    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TEAMS, 0))
    settled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TEAMS, 0))


class WorkerEnv:
    """Create, then ``await open()`` inside the loop that uses it; ``await close()`` at the end."""

    def __init__(self, folder: Path, bootstrap: str, redis_url: str) -> None:
        self.folder = folder
        self.bootstrap = bootstrap
        self.redis_url = redis_url
        self.prefix = f"b{uuid.uuid4().hex[:8]}."
        self.group = f"{self.prefix}worker"
        self.requests_topic = f"{self.prefix}requests"
        self.scope_topic = f"{self.prefix}scope-entries"
        self.rollups_topic = f"{self.prefix}rollups"
        folder.mkdir(parents=True, exist_ok=True)
        limits = dict.fromkeys(TEAMS, TEAM_LIMIT)
        # the worker never calls the simulator: any free port will do for the deployments' base URLs
        self.config = test_config(folder, free_port(), free_port(),
                                  _mutate(bootstrap, redis_url, self.prefix, folder, limits, LEASE))
        self.worker: subprocess.Popen | None = None
        self.expected = Expected()
        self.redis: aioredis.Redis | None = None
        self.log: KafkaEventLog | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._tps: dict[str, list[TopicPartition]] = {}

    @property
    def worker_log(self) -> Path:
        return self.folder / "worker.log"

    async def open(self) -> None:
        await create_topics(self.bootstrap, farebox_topics(PARTITIONS, prefix=self.prefix))
        self.redis = aioredis.Redis.from_url(self.redis_url)
        # the pods' producer, as distributed mode builds it (farebox/distributed.py)
        self.log = KafkaEventLog(self.bootstrap, self.folder / "spool", requests_topic=self.requests_topic,
                                 scope_topic=self.scope_topic, config_topic=f"{self.prefix}config",
                                 client_id="farebox-bench")
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                          client_id="farebox-bench-probe")
        await self._consumer.start()
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10000)
        await self._admin.start()
        self._tps = {t: [TopicPartition(t, p) for p in range(PARTITIONS)]
                     for t in (self.requests_topic, self.scope_topic, self.rollups_topic)}
        await self._leaders_elected(timeout=30)

    async def _leaders_elected(self, timeout: float) -> None:
        """Until every new partition has a leader (an offsets request before that logs NotLeaderForPartition)."""
        assert self._consumer is not None
        deadline = time.monotonic() + timeout
        while True:
            cluster = await cluster_metadata(self._consumer)
            leaders = [cluster.leader_for_partition(tp) for tps in self._tps.values() for tp in tps]
            if all(leader is not None and leader >= 0 for leader in leaders) or time.monotonic() > deadline:
                return
            await asyncio.sleep(0.1)

    def start_worker(self, profile_to: Path | None = None) -> None:
        wrap = ["cProfile", "-o", str(profile_to), "-m"] if profile_to else []
        self.worker = spawn([*wrap, "farebox", "worker", "--config", str(self.config)], self.worker_log)

    def check_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is not None:
            raise RuntimeError(f"the worker exited {self.worker.returncode}:\n{self.worker_log.read_text()[-4000:]}")

    def stop_worker(self) -> int | None:
        if self.worker is None:
            return None
        code, self.worker = stop(self.worker, timeout=30), None
        return code

    async def close(self) -> None:
        if self.log is not None:
            await self.log.close()
        if self._consumer is not None:
            await stop_consumer(self._consumer)
        if self._admin is not None:
            await self._admin.close()
        if self.redis is not None:
            await self.redis.aclose()
        self.stop_worker()

    # --- probes ---------------------------------------------------------------------

    async def ends(self) -> dict[str, int]:
        """Records in each topic (sum of the partitions' end offsets)."""
        assert self._consumer is not None
        out = {}
        for topic, tps in self._tps.items():
            ends = await self._consumer.end_offsets(tps)
            out[topic] = sum(ends.values())
        return out

    @property
    def changelogs(self) -> list[str]:
        """The worker's table changelog topics (Faust names them ``{app id}-{table}-changelog``)."""
        return [f"{self.group}-{table}-changelog" for table in ("requests", "scope-ledger", "rollups")]

    async def records_in(self, topics: list[str]) -> dict[str, int]:
        """Records in any of the env's topics (partitions 0..PARTITIONS-1; a missing topic counts 0)."""
        assert self._consumer is not None
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        try:
            ends = await self._consumer.end_offsets(tps)
        except Exception:  # noqa: BLE001 - a changelog not created yet (the worker creates them at start)
            return dict.fromkeys(topics, 0)
        return {t: sum(v for tp, v in ends.items() if tp.topic == t) for t in topics}

    async def committed(self) -> dict[str, int]:
        """The worker group's committed offsets, summed per topic (0 before its first commit)."""
        assert self._admin is not None
        offsets = await self._admin.list_consumer_group_offsets(self.group)
        out = dict.fromkeys(self._tps, 0)
        for tp, meta in offsets.items():
            if tp.topic in out and meta.offset > 0:
                out[tp.topic] += meta.offset
        return out

    async def scope(self, scope: str) -> dict[str, int]:
        assert self.redis is not None
        raw = await self.redis.hgetall(f"fb:scope:{scope}")
        return {k.decode(): int(v) for k, v in raw.items() if k.decode() in
                ("settled", "held", "leased", "overrun", "requests")}

    async def projected(self) -> dict[str, dict[str, int]]:
        return {team: await self.scope(f"team:{team}") for team in TEAMS}

    async def caught_up(self) -> bool:
        """Whether the projection shows every expected request settled (and nothing held) on every team."""
        rows = await self.projected()
        e = self.expected
        return all(rows[t].get("requests", 0) == e.requests[t] and rows[t].get("settled", 0) == e.settled[t]
                   and rows[t].get("held", 0) == 0 for t in TEAMS)

    async def wait_caught_up(self, timeout: float, poll_s: float = 0.05) -> float:
        """Poll until ``caught_up``; returns the monotonic instant it was first seen."""
        deadline = time.monotonic() + timeout
        while not await self.caught_up():
            self.check_worker()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the projection did not catch up in {timeout:.0f} s: "
                                   f"{await self.projected()} vs expected {self.expected}")
            await asyncio.sleep(poll_s)
        return time.monotonic()

    async def wait_committed(self, timeout: float, poll_s: float = 0.1) -> tuple[float, dict, dict]:
        """Poll until the group's committed offsets reach the end of both topics: (instant, ends, committed)."""
        deadline = time.monotonic() + timeout
        while True:
            ends, done = await self.ends(), await self.committed()
            if all(done[t] >= ends[t] for t in ends):
                return time.monotonic(), ends, done
            self.check_worker()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker group did not commit to the end in {timeout:.0f} s: "
                                   f"ends {ends}, committed {done}")
            await asyncio.sleep(poll_s)
