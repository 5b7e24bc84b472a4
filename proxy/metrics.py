"""The pod's metrics, in Prometheus form (``GET /metrics``).

One registry per runtime (tests run several gateways in one process), built
with ``prometheus_client`` rather than by hand. Labels are bounded sets
(alias, deployment, outcome, code): never keys, teams or request ids.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "CONTENT_TYPE_LATEST"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "farebox_requests", "Requests settled, by alias and final status.", ["alias", "status"], registry=r
        )
        self.attempts = Counter(
            "farebox_attempts", "Upstream attempts by deployment and outcome.", ["deployment", "outcome"], registry=r
        )
        self.refusals = Counter(
            "farebox_refusals", "Requests refused at admission, by error code.", ["code"], registry=r
        )
        self.overrun_micro = Counter(
            "farebox_overrun_micro",
            "Cost above the hold (input underestimated), in micro-units of the budget currency.",
            registry=r,
        )
        self.overruns = Counter("farebox_overruns", "Requests whose cost exceeded their hold.", registry=r)
        self.holds_expired = Counter("farebox_holds_expired", "Unsettled holds charged in full.", registry=r)
        self.event_append_failures = Counter(
            "farebox_event_append_failures", "Events the log refused or failed to write.", registry=r
        )
        self.admission_seconds = Histogram(
            "farebox_admission_seconds", "Time to admit or refuse a request.", registry=r,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
        )
        self.lease_round_trip_seconds = Histogram(
            "farebox_lease_round_trip_seconds", "Distributed mode: from asking for a budget lease to its grant.",
            registry=r, buckets=(0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.idempotency = Counter(
            "farebox_idempotency", "Requests with an Idempotency-Key, by outcome "
            "(first, replayed, in_progress, reused, stream_retry).", ["outcome"], registry=r,
        )
        self.in_flight = Gauge("farebox_in_flight_requests", "Requests being served.", registry=r)
        self.snapshot_version = Gauge("farebox_snapshot_version", "Config snapshot in use.", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
