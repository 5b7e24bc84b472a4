"""The pod's metrics, in Prometheus form (``GET /metrics``).

One registry per runtime (tests run several gateways in one process), built
with ``prometheus_client`` rather than by hand. Labels are bounded sets
(alias, deployment, team, outcome, code, token type): never key ids or
request ids. Every family is listed in ``infra/monitoring/metrics.yaml``
(the dashboard and the alert rules read only those).

Counters and histograms are written where the value is produced (the meter,
the recorder, admission); state a scrape can read at that moment (breakers,
retry budgets, the admission queue, the spool, leases) is collected at scrape
time by ``proxy.observe.metrics_state``, so the request path pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector

from proxy.observe.metrics_state import PodStateCollector

__all__ = ["Metrics", "CONTENT_TYPE_LATEST", "TOKEN_TYPES"]

# Seconds, from a fast cache hit to a long generation.
_LATENCY = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# What the gateway adds: sub-millisecond to tens of milliseconds.
_ADDED = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
TOKEN_TYPES = ("input", "cached_input", "cache_write", "output", "reasoning")


class Metrics:
    """``multiprocess_dir`` (``farebox serve --workers N``: set as ``PROMETHEUS_MULTIPROC_DIR`` in the
    process's environment before ``prometheus_client`` was imported, which then keeps every value in a
    file there): ``render`` answers the sum over every gateway process (a scrape reaches any one of them),
    plus the state collected at scrape time of the process that answered."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "farebox_requests", "Requests settled, by alias and final status.", ["alias", "status"], registry=r
        )
        self.attempts = Counter(
            "farebox_attempts", "Upstream attempts by deployment and outcome.", ["deployment", "outcome"], registry=r
        )
        self.usage_invalid = Counter(
            "farebox_usage_invalid", "Attempts whose provider-reported usage failed the usage boundary "
            "(negative, non-integer or out-of-bound counts): billed farebox's estimate.", ["deployment"], registry=r
        )
        self.responses_not_stored = Counter(
            "farebox_responses_not_stored", "Responses API answers with store on that were answered but not kept, "
            "by reason (too_large, store_failed).", ["reason"], registry=r
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
        self.event_append_seconds = Histogram(
            "farebox_event_append_seconds", "From handing an event to the log to its durable acknowledgement.",
            registry=r, buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
        )
        self.admission_seconds = Histogram(
            "farebox_admission_seconds", "Time to admit or refuse a request.", registry=r,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
        )
        self.capacity_wait_seconds = Histogram(
            "farebox_capacity_wait_seconds", "Interactive requests that found no deployment with provider capacity: "
            "how long they waited for it, by outcome (served: a deployment cleared; refused: 429 after the wait).",
            ["outcome"], registry=r, buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.capacity_waiting = Gauge(
            "farebox_capacity_waiting", "Interactive requests waiting for provider capacity now, by alias (the wait "
            "room's depth; batch lines queue in the batch store: farebox_batch_lines_queued).", ["alias"],
            registry=r, multiprocess_mode="livesum")
        self.lease_round_trip_seconds = Histogram(
            "farebox_lease_round_trip_seconds", "Distributed mode: from asking for a budget lease to its grant.",
            registry=r, buckets=(0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.idempotency = Counter(
            "farebox_idempotency", "Requests with an Idempotency-Key, by outcome "
            "(first, replayed, in_progress, reused, stream_retry).", ["outcome"], registry=r,
        )
        self.ttft_seconds = Histogram(
            "farebox_ttft_seconds", "Streams: from the attempt's start to the provider's first chunk.",
            ["alias", "deployment"], registry=r, buckets=_LATENCY,
        )
        self.upstream_latency_seconds = Histogram(
            "farebox_upstream_latency_seconds", "Successful attempts: from the attempt's start to its last byte.",
            ["alias", "deployment"], registry=r, buckets=_LATENCY,
        )
        self.added_latency_seconds = Histogram(
            "farebox_added_latency_seconds",
            "A request's time in the gateway: its whole latency minus the time its attempts spent upstream.",
            ["alias", "deployment"], registry=r, buckets=_ADDED,
        )
        self.tokens = Counter(
            "farebox_tokens", "Tokens settled, by team, alias and type (input, cached_input, cache_write, "
            "output, reasoning).", ["team", "alias", "type"], registry=r,
        )
        self.cost_micro = Counter(
            "farebox_cost_micro", "Cost settled, in micro-units of the budget currency, by team and alias.",
            ["team", "alias"], registry=r,
        )
        self.overload_refusals = Counter(
            "farebox_overload_refusals", "Model requests refused at the door with a fast 503 and Retry-After: "
            "capacity (over the admission rate the pod measured), in_flight (at server.max_in_flight).",
            ["reason"], registry=r,
        )
        # the door's two children, looked up once: a refusal must cost as little as possible
        self.refused_capacity = self.overload_refusals.labels("capacity")
        self.refused_in_flight = self.overload_refusals.labels("in_flight")
        self.batch_lines = Counter(
            "farebox_batch_lines", "Batch lines this process ran, by outcome: ok, error (the line's final answer), "
            "later (the gateway said not now: batch_paused, limits, overload; the line waits in its queue).",
            ["outcome"], registry=r,
        )
        self.shadow_legs = Counter(
            "farebox_shadow_legs", "Shadow legs (copies of a shadowed alias's requests sent to its candidate), by "
            "outcome: ok, error, refused (batch priority: paused, busy, limited), dropped (too many in flight).",
            ["outcome"], registry=r,
        )
        self.deployment_up = Gauge(
            "farebox_deployment_up", "The synthetic canary's last word on a deployment, as this process saw it: "
            "1 up, 0.5 degraded (refused for capacity), 0 down.", ["deployment"], registry=r,
            multiprocess_mode="livemin")
        self.rollout_pct = Gauge(
            "farebox_config_rollout_pct", "The share of requests (%) a running config canary serves its candidate "
            "version, as this process last read it (0: none running).", registry=r, multiprocess_mode="livemax")
        self.rollout_steps = Counter(
            "farebox_config_rollout_steps", "Steps of config canaries this process took (or was told of by hand), "
            "by action: start, widen, complete, rollback, pause, resume.", ["action"], registry=r)
        self.batch_queued = Gauge("farebox_batch_lines_queued", "Batch lines waiting to run (all batches in "
                                  "progress), as this process's runner last counted them.", registry=r,
                                  multiprocess_mode="livemax")
        self.batch_running = Gauge("farebox_batch_lines_running", "Batch lines this process is running now.",
                                   registry=r, multiprocess_mode="livesum")
        self.fallbacks = Counter(
            "farebox_fallbacks", "Requests answered after more than one attempt (failover or hedge).",
            ["alias"], registry=r,
        )
        self.spans_dropped = Counter(
            "farebox_spans_dropped", "Tracing on: spans the exporter could not deliver (collector down or slow).",
            registry=r,
        )
        self.in_flight = Gauge("farebox_in_flight_requests", "Requests being served.", registry=r,
                               multiprocess_mode="livesum")
        self.snapshot_version = Gauge("farebox_snapshot_version", "Config snapshot in use.", registry=r,
                                      multiprocess_mode="livemax")
        self._snapshot_version: Callable[[], int] | None = None
        self.state = PodStateCollector()  # breakers, retry budgets, queue, spool, leases: read at scrape time
        self._state_registry = r
        if multiprocess_dir is not None:  # the files hold this process's values: the registry would repeat them
            self._state_registry = CollectorRegistry(auto_describe=True)
        self._state_registry.register(self.state)

        self._spend: dict[tuple[str, str], Spend] = {}
        self._timing: dict[tuple[str, str], Timing] = {}

    # Children of the labelled families a request writes, looked up once per label set (bounded: teams x
    # aliases, aliases x deployments), so a request skips ``labels()`` on each write.
    def spend(self, team: str, alias: str) -> "Spend":
        found = self._spend.get((team, alias))
        if found is None:
            found = self._spend[(team, alias)] = Spend(self, team, alias)
        return found

    def timing(self, alias: str, deployment: str) -> "Timing":
        found = self._timing.get((alias, deployment))
        if found is None:
            found = self._timing[(alias, deployment)] = Timing(self, alias, deployment)
        return found

    def track_snapshot(self, version: Callable[[], int]) -> None:
        """``farebox_snapshot_version`` reads ``version`` at scrape time."""
        self._snapshot_version = version
        if self.multiprocess_dir is None:
            self.snapshot_version.set_function(version)

    def render(self) -> bytes:
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        if self._snapshot_version is not None:  # a value in the files: functions are not shared across processes
            self.snapshot_version.set(self._snapshot_version())
        every = CollectorRegistry()
        MultiProcessCollector(every, path=self.multiprocess_dir)
        return generate_latest(every) + generate_latest(self._state_registry)


class Spend:
    __slots__ = ("cost", "tokens")

    def __init__(self, m: Metrics, team: str, alias: str) -> None:
        self.cost = m.cost_micro.labels(team, alias)
        self.tokens = tuple(m.tokens.labels(team, alias, kind) for kind in TOKEN_TYPES)


class Timing:
    __slots__ = ("ttft", "upstream", "added")

    def __init__(self, m: Metrics, alias: str, deployment: str) -> None:
        self.ttft = m.ttft_seconds.labels(alias, deployment)
        self.upstream = m.upstream_latency_seconds.labels(alias, deployment)
        self.added = m.added_latency_seconds.labels(alias, deployment)
