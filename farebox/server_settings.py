"""``server.overload``, and where one machine keeps its idempotency records; ``server.overload``: the gateway's admission at the rate it measures it can serve (``proxy.overload``).

::

    server:
      max_in_flight: 2000          # a hard cap on model requests in flight (0: none)
      overload: {enabled: true, target_utilisation: 0.8, max_loop_lag_ms: 5, min_rate: 5, release_s: 2}

Past the knee new requests get a fast 503 ``server_overloaded`` (529 on the
Messages surface) with ``Retry-After`` before any work. The capacity is not a
number to configure: the gateway measures its CPU utilisation and its event
loop's lag and admits at the rate that keeps them under these targets.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.control.problems import Reader
from proxy.overload import OverloadSettings

STORES = ("disk", "memory")


@dataclass(frozen=True, slots=True)
class IdempotencyStoreSettings:
    """Where one machine keeps its ``Idempotency-Key`` records (embedded mode and ``serve --workers``; distributed
    pods share Redis): ``disk`` (``state_dir/idempotency.sqlite``: memory stays flat, answers survive a restart;
    ``server.idempotency_disk_bytes``) or ``memory`` (``server.idempotency_memory_bytes``)."""

    store: str = "disk"
    disk_bytes: int = 1024 * 1024 * 1024
    memory_bytes: int = 64 * 1024 * 1024


def idempotency_store_settings(server: Reader) -> IdempotencyStoreSettings:
    """From the ``server`` section's flat keys ``idempotency_store``, ``idempotency_disk_bytes``,
    ``idempotency_memory_bytes``."""
    d = IdempotencyStoreSettings()
    return IdempotencyStoreSettings(server.str("idempotency_store", d.store, choices=STORES), server.int("idempotency_disk_bytes", d.disk_bytes, 1024 * 1024),
                                    server.int("idempotency_memory_bytes", d.memory_bytes, 1024 * 1024))


def overload_settings(r: Reader) -> OverloadSettings:
    d = OverloadSettings()
    out = OverloadSettings(
        enabled=r.bool("enabled", d.enabled),
        target_utilisation=r.number("target_utilisation", d.target_utilisation, 0.05),
        max_loop_lag_ms=r.number("max_loop_lag_ms", d.max_loop_lag_ms, 1),
        min_rate=r.number("min_rate", d.min_rate, 1),
        release_s=r.number("release_s", d.release_s, 0.1),
    )
    if out.target_utilisation > 1:
        r.problems.add(r.at("target_utilisation"),
                       f"must be at most 1 (a share of one core), got {out.target_utilisation:g}")
    r.reject_unknown()
    return out
