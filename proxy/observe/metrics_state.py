"""Metrics read from the pod's state when ``/metrics`` is scraped, never on the request path.

Breakers and retry budgets come from the routing state; the admission queue
(embedded), budget use, the event log's spool and the lease traffic
(distributed) from whichever adapters the pod was wired with (``farebox/``
sets the readers it has; a reader left ``None`` exports nothing rather than a
made-up zero).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

Reader = Callable[[], int]
RoutingState = Any  # proxy.routing.state.RoutingState: read by shape, not imported (routing imports metrics' users)


class PodStateCollector(Collector):
    """Yields the gauges (and the lease counters the wallets keep) of one pod at scrape time."""

    def __init__(self) -> None:
        self.routing: RoutingState = None
        self.queue_depth: Reader | None = None  # requests waiting for in-flight holds (embedded admission queue)
        self.spool_bytes: Reader | None = None  # distributed: bytes waiting in the Kafka log's disk spool
        self.lease_grants: Reader | None = None  # distributed: leases granted to this pod so far
        self.lease_returns: Reader | None = None  # ... and returned by it
        # (scope, spent, limit, soft %) of each limited team and business unit this month
        self.budget_use: Callable[[], Iterable[tuple[str, int, int, int]]] | None = None
        # serve --workers: (events, seconds) the owner's archive is behind its log, as the owner last said
        self.archive_lag: Callable[[], tuple[int, float]] | None = None
        # archive files the last finance answer left out (not vouched for by the manifest)
        self.archive_left_out: Reader | None = None
        self.load: Callable[[], Any] | None = None  # proxy.overload.LoadReading of this process, read by shape

    def describe(self) -> list:  # families vary with the wiring: nothing described up front
        return []

    def collect(self) -> Iterator:
        if self.routing is not None:
            yield from _routing(self.routing)
        if self.queue_depth is not None:
            g = GaugeMetricFamily("farebox_admission_queue_depth",
                                  "Requests waiting for money that in-flight holds cover.")
            g.add_metric([], self.queue_depth())
            yield g
        if self.spool_bytes is not None:
            g = GaugeMetricFamily("farebox_spool_depth_bytes",
                                  "Bytes of events in the local spool, waiting for Kafka.")
            g.add_metric([], self.spool_bytes())
            yield g
        if self.budget_use is not None:
            yield from _budgets(self.budget_use())
        if self.archive_lag is not None:
            events, seconds = self.archive_lag()
            for name, value, what in (
                    ("farebox_archive_lag_events", events, "Events in the log not yet in the Parquet archive."),
                    ("farebox_archive_lag_seconds", seconds,
                     "Seconds since the archive last held the whole log (0: caught up).")):
                g = GaugeMetricFamily(name, what)
                g.add_metric([], value)
                yield g
        if self.archive_left_out is not None:
            g = GaugeMetricFamily("farebox_archive_files_left_out", "Archive files the last finance query left "
                                  "out: unlisted in the manifest, changed, or listed after a break in its chain.")
            g.add_metric([], self.archive_left_out())
            yield g
        if self.load is not None:
            yield from _load(self.load())
        for name, reader, what in (("farebox_lease_grants", self.lease_grants, "Budget leases granted to this pod."),
                                   ("farebox_lease_returns", self.lease_returns, "Budget leases this pod returned.")):
            if reader is not None:
                c = CounterMetricFamily(name, what)
                c.add_metric([], reader())
                yield c


def _load(reading: Any) -> Iterator:
    """This process's event loop and admission rate (``proxy.overload``)."""
    for name, value, what in (
            ("farebox_cpu_utilisation", reading.utilisation, "Share of one core the process used (every thread), over the last 250 ms."),
            ("farebox_loop_lag_seconds", reading.loop_lag_s, "How late the event loop runs a due timer, smoothed."),
            ("farebox_admission_limited", 0 if reading.limit_rps is None else 1,
             "1 while the pod admits at a measured rate and refuses the rest, else 0."),
            ("farebox_admission_limit_rps", reading.limit_rps or 0.0,
             "The admission rate in force while limited (0 when not limiting)."),
            ("farebox_admitted_rps", reading.admitted_rps, "Model requests admitted per second, smoothed.")):
        g = GaugeMetricFamily(name, what)
        g.add_metric([], value)
        yield g


def _routing(state: RoutingState) -> Iterator:
    now = state.clock()
    breaker = GaugeMetricFamily("farebox_breaker_open", "1 while the deployment's circuit is open, else 0.",
                                labels=["deployment"])
    for dep_id, b in list(state.breakers.items()):
        breaker.add_metric([dep_id], 1.0 if b.state == "open" else 0.0)
    yield breaker
    used = GaugeMetricFamily("farebox_retry_budget_used_ratio",
                             "Retries in the window over the retries the alias's budget allows.", labels=["alias"])
    for alias, budget in list(state.budgets.items()):
        requests, retries = budget.totals(now)
        allowed = (budget.pct * requests + budget.minimum * 100) / 100
        used.add_metric([alias], retries / allowed if allowed else 0.0)
    yield used


def _budgets(rows: Iterable[tuple[str, int, int, int]]) -> Iterator:
    spent = GaugeMetricFamily("farebox_budget_spent_micro", "Settled plus held this month, in micro-units.",
                              labels=["scope"])
    limit = GaugeMetricFamily("farebox_budget_limit_micro", "The scope's monthly limit, in micro-units.",
                              labels=["scope"])
    soft = GaugeMetricFamily("farebox_budget_soft_pct", "The scope's soft threshold, percent of its limit.",
                             labels=["scope"])
    for scope, s, lim, pct in rows:
        spent.add_metric([scope], s)
        limit.add_metric([scope], lim)
        soft.add_metric([scope], pct)
    yield from (spent, limit, soft)
