"""Parsing ``distributed:`` in farebox.yaml: Kafka, Redis, topics and the lease policy of ``mode: distributed``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from proxy.admission.wallet import WalletPolicy
from proxy.control.problems import Problems, Reader


@dataclass(frozen=True)
class DistributedSettings:
    """``mode: distributed``: Kafka, Redis, topics and the lease policy (defaults suit one machine)."""

    bootstrap: str = "127.0.0.1:9092"
    redis_url: str = "redis://127.0.0.1:6379/0"
    requests_topic: str = "fb.requests"
    scope_topic: str = "fb.scope-entries"
    rollups_topic: str = "fb.rollups"
    config_topic: str = "fb.config"
    dead_letter_topic: str = "fb.dead-letter"  # records the worker could not read (streams/dead_letters.py)
    partitions: int = 3
    pods: int = 3  # rate limits fall back to limit // pods when Redis is unreachable
    limits_timeout_ms: float = 5.0  # a rate-limit call unanswered by Redis this long is answered from local buckets
    spool_dir: str = "var/spool"
    spool_after_s: float = 5.0  # a pod spools when Kafka leaves a send unacknowledged this long
    worker_id: str = "farebox-worker"
    worker_data_dir: str = "var/worker"
    lease_share: int = 4
    lease_last_pct: int = 2
    lease_max_slice_micro: int | None = None
    lease_ttl_s: int = 60
    lease_expiry_grace_s: int = 120
    lease_wait_s: float = 2.0  # how long a request waits for a grant when its lease is short
    low_water_pct: int = 30  # top up in the background below this share of a lease
    emergency_micro: int = 0  # per scope and pod, spent when Kafka is down and the leases are gone
    config_db_poll_s: float = 5.0  # pods follow the config topic; the database is polled this often as fallback
    share_breakers: bool = True  # circuit-breaker opens/closes shared between pods through Redis
    share_wait_rooms: bool = True  # teams waiting for capacity take it in turn across pods, through Redis
    breaker_probe_grace_s: float = 2.0  # another pod's open ends this much later here: its opener probes first
    worker_stall_s: float = 60.0  # a worker whose table recovery reads nothing this long exits (75) for a restart
    request_retention_s: int = 6 * 3600  # the worker forgets closed requests this long after (ledger/retention.py)
    worker_metrics_port: int = 0  # the worker's /metrics (consumer lag per topic) on server.host; 0: off


def distributed_settings(d: Reader, env: Mapping[str, str], base: Path, problems: Problems) -> DistributedSettings:
    """The ``distributed:`` section read by ``d`` (``FAREBOX_KAFKA`` / ``FAREBOX_REDIS`` override the addresses);
    relative folders are taken from ``base``."""
    dflt = DistributedSettings()
    dist = DistributedSettings(
        bootstrap=env.get("FAREBOX_KAFKA") or d.str("bootstrap", dflt.bootstrap),
        redis_url=env.get("FAREBOX_REDIS") or d.str("redis_url", dflt.redis_url),
        requests_topic=d.str("requests_topic", dflt.requests_topic),
        scope_topic=d.str("scope_topic", dflt.scope_topic),
        rollups_topic=d.str("rollups_topic", dflt.rollups_topic),
        config_topic=d.str("config_topic", dflt.config_topic),
        dead_letter_topic=d.str("dead_letter_topic", dflt.dead_letter_topic),
        partitions=d.int("partitions", dflt.partitions, 1),
        pods=d.int("pods", dflt.pods, 1),
        limits_timeout_ms=d.number("limits_timeout_ms", dflt.limits_timeout_ms, 0.1),
        spool_dir=str(base / d.str("spool_dir", dflt.spool_dir)),
        spool_after_s=d.number("spool_after_s", dflt.spool_after_s, 0.1),
        worker_id=d.str("worker_id", dflt.worker_id),
        worker_data_dir=str(base / d.str("worker_data_dir", dflt.worker_data_dir)),
        lease_share=d.int("lease_share", dflt.lease_share, 1),
        lease_last_pct=d.int("lease_last_pct", dflt.lease_last_pct, 0),
        lease_max_slice_micro=d.int("lease_max_slice_micro", None, 1),
        lease_ttl_s=d.int("lease_ttl_s", dflt.lease_ttl_s, 1),
        lease_expiry_grace_s=d.int("lease_expiry_grace_s", dflt.lease_expiry_grace_s, 0),
        lease_wait_s=d.number("lease_wait_s", dflt.lease_wait_s, 0),
        low_water_pct=d.int("low_water_pct", dflt.low_water_pct, 0),
        emergency_micro=d.int("emergency_micro", dflt.emergency_micro, 0),
        config_db_poll_s=d.number("config_db_poll_s", dflt.config_db_poll_s, 0.01),
        share_breakers=d.bool("share_breakers", dflt.share_breakers),
        share_wait_rooms=d.bool("share_wait_rooms", dflt.share_wait_rooms),
        breaker_probe_grace_s=d.number("breaker_probe_grace_s", dflt.breaker_probe_grace_s, 0),
        request_retention_s=d.int("request_retention_s", dflt.request_retention_s, 60),
        worker_stall_s=d.number("worker_stall_s", dflt.worker_stall_s, 0),
        worker_metrics_port=d.int("worker_metrics_port", dflt.worker_metrics_port, 0),
    )
    d.reject_unknown()
    if dist.lease_ttl_s <= WalletPolicy.expiry_margin_s:  # such a lease would be asked for and returned unspent
        problems.add("distributed.lease_ttl_s", f"is {dist.lease_ttl_s}; it must be more than "
                     f"{WalletPolicy.expiry_margin_s:g} s, because a pod stops funding requests from a lease "
                     f"{WalletPolicy.expiry_margin_s:g} s before it expires")
    return dist
