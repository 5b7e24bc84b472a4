"""What a gateway pod holds while it runs, handed to the aiohttp app.

The composition root (``farebox/``) builds one ``Runtime`` per pod, with one
adapter per port, and never changes it: which mode the pod runs in is
decided there, once. What does change while the pod runs sits in
``PodState``: the snapshot (swapped whole, one reference change), the
in-flight count, the drain flags and the open client watches. Handlers read
the runtime through the typed ``RUNTIME`` app key; nothing here reads the
environment or the config database.
"""

from __future__ import annotations

import asyncio
import random
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from aiohttp import web

from ledger.output_sketch import OutputLearner
from pricing.calibration import Estimator
from proxy.admission.budget_port import BudgetPort
from proxy.batches.records import BatchStore
from proxy.bodylog import BodyLog
from proxy.cache import CachePort, Flights, MemoryCache, MemoryVectors, VectorStore
from proxy.idempotency import IdempotencyStore, MemoryIdempotency
from proxy.limits import Buckets
from proxy.limits.mirror_sync import MirrorSync
from proxy.limits.settler import LimitSettler
from proxy.metering.recorder import Recorder
from proxy.observe.metrics import Metrics
from proxy.overload import LoadShedder, OverloadSettings
from proxy.ports import ControlStore, Rerater
from proxy.routing.state import RoutingState
from proxy.snapshot import Secrets, Snapshot
from proxy.stored_responses import MemoryResponses, ResponseStore
from proxy.upstream.limit_headers import provider_remaining
from proxy.upstream.relay import UpstreamClient


@dataclass(frozen=True, slots=True)
class ProxyOptions:
    pod_id: str
    max_body_bytes: int = 4 * 1024 * 1024
    hold_ttl_s: int = 900
    max_in_flight: int = 2000  # model requests in flight per pod; above: fast 503 + Retry-After (0 = no cap)
    # admission at the measured capacity (``proxy.overload``): a pod built in code sheds only when asked;
    # ``farebox serve`` reads ``server.overload``, on by default
    overload: OverloadSettings = OverloadSettings(enabled=False)
    drain_timeout_s: float = 25.0  # SIGTERM: how long streams may finish (below aiohttp's shutdown timeout)
    idempotency_ttl_s: int = 86_400  # how long an Idempotency-Key's stored answer is replayed
    idempotency_max_answer_bytes: int = 1024 * 1024  # larger answers are not stored (a retry runs again)
    budget_wait_s: float = 20.0  # how long a request may wait for in-flight holds to settle (default)
    budget_wait_max_s: float = 30.0  # the most a caller may ask for with x-fb-max-wait-ms
    cache_ttl_s: int = 3600  # how long a response-cache entry is served
    cache_max_temperature: float = 1.0  # above this temperature a request is never cached
    cache_max_entry_bytes: int = 1024 * 1024  # larger answers are not stored
    stored_responses_ttl_s: int = 30 * 86_400  # how long a stored Responses answer is readable
    stored_responses_max_bytes: int = 8 * 1024 * 1024  # a larger response with its context is not kept
    batch_max_file_bytes: int = 200 * 1024 * 1024  # a Files API upload
    batch_max_lines: int = 50_000  # requests in one batch
    batch_reserve_pct: int = 20  # of each provider-limit mirror, kept for interactive requests
    canary_team: str = "platform"  # who pays for the synthetic canary's probes (``proxy.batches.canary``)
    batch_cpu_ceiling: float = 0.3  # a process busier than this share of a core takes no batch line ...
    batch_cpu_ceiling_beside: float = 0.12  # ... or than this share while it serves interactive requests
    # whether batches of ``batch_via: provider`` aliases may go to a provider's batch API (whole-batch holds that
    # live a day: in distributed mode funded from a lease like any hold, which the ledger keeps held past the
    # lease until its own TTL, settled by whichever pod reads the results)
    provider_batches: bool = True
    auth_failures_per_minute: int = 30  # failed authentications per source before 429s (0: no throttling)
    metrics_token: str | None = field(default=None, repr=False)  # GET /metrics asks for it as a bearer token


class Watch(Protocol):
    """An open request watched for its caller leaving (``proxy.api.watch.ClientWatch``)."""

    fired: str | None

    def check(self) -> bool: ...


BATCH_TURN_S = 0.25  # how long a batch line waits at the door for a gap in interactive work before 503 server_busy
INTERACTIVE_RECENT_S = 1.0  # interactive traffic is "present" this long after its last request came

# A request outside a config canary's slice is served the baseline's snapshot: set for its task by the gateway
# middleware (``proxy.api.app``), read through ``PodState.snapshot`` everywhere the request path looks.
SERVED: ContextVar[Snapshot | None] = ContextVar("farebox_served_snapshot", default=None)


@dataclass(slots=True)
class PodState:
    """The part of a pod that changes while it serves."""

    current: Snapshot  # the head: what every request is served unless a config canary keeps it on the baseline
    in_flight: int = 0  # model requests being served now
    interactive: int = 0  # ... of them, interactive ones (not batch lines, shadow legs or canaries)
    interactive_idle: asyncio.Event = field(default_factory=asyncio.Event)  # set while ``interactive`` is 0
    interactive_at: float = -1e9  # when the last interactive request came (``time.monotonic``)
    draining: bool = False  # SIGTERM seen: refuse new requests
    drain_expired: bool = False  # drain deadline passed: end the streams still open
    watches: set[Watch] = field(default_factory=set)  # open client watches, checked by one poller
    watch_task: asyncio.Task[None] | None = None
    shedder: LoadShedder = field(default_factory=LoadShedder)  # admission at the measured capacity
    batch_token: str | None = None  # the batch runner's own requests carry it (``proxy.batches.runner``)
    wake_batches: Callable[[], None] = lambda: None  # a batch was created or cancelled: the runner looks now
    # (alias, chat body, data class): a shadow leg sent in the background (``proxy.batches.runner``)
    send_shadow: Callable[[str, bytes, str], None] = lambda alias, body, data_class: None
    deployment_status: dict = field(default_factory=dict)  # the synthetic canary's last word per deployment
    # A config canary running (``proxy.control.rollout_runner``): the rollout (its slice) and the snapshot the
    # requests outside it are served; the runner, where their figures go.
    rollout: Any = None
    baseline: Snapshot | None = None
    rollout_runner: Any = None

    @property
    def snapshot(self) -> Snapshot:
        return SERVED.get() or self.current

    def batch_ceiling(self, options: "ProxyOptions", line: bool = True) -> float:
        """The share of a core past which this process takes no batch work: for a batch line
        ``batch_cpu_ceiling_beside`` while interactive requests come (one in the last ``INTERACTIVE_RECENT_S``),
        else (and for shadow legs) ``batch_cpu_ceiling``."""
        beside = line and time.monotonic() - self.interactive_at < INTERACTIVE_RECENT_S
        return options.batch_cpu_ceiling_beside if beside else options.batch_cpu_ceiling

    async def batch_turn(self, max_wait_s: float = BATCH_TURN_S) -> bool:
        """Wait (up to ``max_wait_s``) until no interactive request is being served in this process: batch work
        starts in the gaps between interactive requests, never beside one. False: none came."""
        if self.interactive == 0:
            return True
        self.interactive_idle.clear()
        try:
            await asyncio.wait_for(self.interactive_idle.wait(), max_wait_s)
        except TimeoutError:
            return self.interactive == 0
        return True

    def swap(self, snapshot: Snapshot) -> None:
        self.current = snapshot


@dataclass(frozen=True, slots=True)
class Runtime:
    pod: PodState
    secrets: Secrets
    options: ProxyOptions
    recorder: Recorder  # the event log, then the pod's projection (append first, then fold)
    budgets: BudgetPort  # embedded ledger or lease wallets
    limits: Buckets  # token buckets: in-process, or Redis shared by pods
    upstream: UpstreamClient  # its session opens with the app
    idempotency: IdempotencyStore = field(default_factory=MemoryIdempotency)  # Idempotency-Key records
    control: ControlStore | None = None  # admin writes (None: a pod without a config database)
    cache: CachePort = field(default_factory=MemoryCache)  # exact response cache: in-process LRU, or Redis
    flights: Flights = field(default_factory=Flights)  # identical concurrent cache misses share one call
    vectors: VectorStore = field(default_factory=MemoryVectors)  # semantic cache: in-process, or Redis
    responses: ResponseStore = field(default_factory=MemoryResponses)  # the Responses API's stored responses
    batches: BatchStore | None = None  # files and batches (None: the Files and Batches API is off)
    body_log: BodyLog | None = None  # opt-in encrypted body logging (None: no master key configured)
    rerater: Rerater | None = None  # re-rating archived requests (None: a pod without an archive to read)
    estimator: Estimator = field(default_factory=Estimator)  # input tokens; calibrated per key
    outputs: OutputLearner = field(default_factory=OutputLearner)  # output used per key and alias: right-sized holds
    routing: RoutingState = field(default_factory=RoutingState)  # breakers, health, 429 pauses, retry budgets
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.time
    metrics: Metrics = field(init=False)  # the recorder's: append failures and request counts share one registry
    limit_settler: LimitSettler = field(init=False)

    def __post_init__(self) -> None:
        # Derived once, stored as plain fields: no property call on the hot path.
        object.__setattr__(self, "metrics", self.recorder.metrics)
        object.__setattr__(self, "limit_settler", LimitSettler(self.limits, self.clock))
        # what providers say is left of their limits lowers the deployments' mirrors (proxy.limits.mirror_sync)
        sync = MirrorSync(self.limits, self.clock, lambda: self.pod.snapshot.rate_limits.mirror_pct)
        self.upstream.on_headers = lambda dep, headers: sync.observe(dep, provider_remaining(dep.dialect, headers))

    @property
    def snapshot(self) -> Snapshot:
        return self.pod.snapshot

    def now_us(self) -> int:
        return int(self.clock() * 1_000_000)


RUNTIME = web.AppKey("runtime", Runtime)
