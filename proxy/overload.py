"""Overload protection at the door: admit new model requests at the rate this process can serve, refuse the rest.

Past its knee a gateway that admits everything queues without bound: every
request's latency grows until clients time out. :class:`LoadShedder` keeps the
event loop out of that state by measuring, every ``tick_s`` (20 ms):

* the **utilisation**: the CPU the process used over the last ``window_ticks``
  ticks divided by their wall time (``time.process_time``: every thread, since
  the event-log writer's Python work holds the interpreter lock the event loop
  needs; measured on the loop thread alone, a loop at 80% queued requests for
  hundreds of milliseconds behind a busy writer);
* the **loop lag**: how late the sampler's own timer fired, the smallest over
  the same window (a standing queue of ready work, not one slow callback); it
  counts only while the loop is at least half as busy as its target (a loop
  behind while idle is starved of a core by others, and refusing would not help).

While both are under their targets nothing is limited and :meth:`admit` costs
a clock read and a comparison. Once either is over (or the event-loop thread
itself was on CPU through the last three ticks: past the knee, waiting for the
window would let a queue build), the shedder sets an admission rate from what
it measured: the rate it admitted scaled by ``target / utilisation`` (the rate
that would have kept the process at its target at the CPU per request just
measured, never below half; a lag over its target cuts a further 20%), and
from then on admits through a token bucket of that rate (a burst of ``burst_s``
worth). While limiting and under target the rate grows (at most 5% a tick);
after ``release_s`` with no refusal the limit is lifted. So the capacity is
measured, not configured: it follows the request mix, the machine and whatever
else shares the cores.

A refused request costs almost nothing: the caller answers it with a 503
(``server_overloaded``, Anthropic's 529 on that surface) and ``Retry-After``
before authentication, body parsing, holds or events. Refusals count towards
the utilisation the shedder measures, so past many times the knee the
admitted rate shrinks to what is left after refusing.

Invariants: pure (the clocks are injected; the sampler in ``proxy.api.app``
drives :meth:`tick`); never limits below ``min_rate`` requests/s; ``admit``
never blocks.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class OverloadSettings:
    """``server.overload`` in the config; ``enabled`` false leaves only the in-flight cap."""

    enabled: bool = True
    target_utilisation: float = 0.8  # of one core, by the whole process, 0-1
    max_loop_lag_ms: float = 5.0  # the sampler's timer late by more than this on every tick of a window
    tick_s: float = 0.02
    window_ticks: int = 12  # the signals are read over this many ticks (240 ms)
    saturated_ticks: int = 3  # this many ticks in a row at >= 95% CPU start limiting at once
    burst_s: float = 0.05  # the token bucket holds this many seconds of the admission rate
    release_s: float = 2.0  # this long limiting with no refusal: the limit is lifted
    min_rate: float = 5.0  # requests/s always admitted, however loaded


@dataclass(frozen=True, slots=True)
class LoadReading:
    """What the shedder measured last, for metrics, the admin API and the web page."""

    utilisation: float
    loop_lag_s: float
    limit_rps: float | None  # None: not limiting
    admitted_rps: float
    refused_total: int
    admitted_total: int


class LoadShedder:
    """Token-bucket admission at a rate measured from the event loop's utilisation and lag (module docstring)."""

    def __init__(self, settings: OverloadSettings = OverloadSettings(),
                 clock: Callable[[], float] = time.monotonic, cpu: Callable[[], float] = time.process_time,
                 loop_cpu: Callable[[], float] = time.thread_time) -> None:
        self.settings = settings
        self._clock, self._cpu, self._loop_cpu = clock, cpu, loop_cpu
        now = clock()
        self._last_tick, self._last_cpu, self._last_loop_cpu = now, cpu(), loop_cpu()
        # (wall, process cpu, admitted, lag, loop-thread cpu) per tick
        self._window: deque[tuple[float, float, int, float, float]] = deque()
        self.utilisation = 0.0
        self.lag_s = 0.0
        self.limit: float | None = None
        self._tokens = 0.0
        self._refill_at = now
        self._admitted_tick = 0
        self._admitted_rate = 0.0
        self._last_refusal = -math.inf
        self.admitted_total = 0
        self.refused_total = 0

    def admit(self) -> bool:
        """Whether to serve a new request now; counts it either way.

        A sampler tick overdue by more than one tick means the loop is behind (its timer cannot fire): the
        request that noticed takes the sample itself, so a sudden surge is met within a tick or two, not once
        the loop gets round to the timer."""
        now = self._clock()
        if now - self._last_tick > 2 * self.settings.tick_s:
            self.tick(now - self._last_tick - self.settings.tick_s)
        if self.limit is None:
            self._admitted_tick += 1
            self.admitted_total += 1
            return True
        cap = max(1.0, self.limit * self.settings.burst_s)
        self._tokens = min(cap, self._tokens + (now - self._refill_at) * self.limit)
        self._refill_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self._admitted_tick += 1
            self.admitted_total += 1
            return True
        self.refused_total += 1
        self._last_refusal = now
        return False

    def busy_for_batch(self, ceiling: float) -> bool:
        """Whether batch work should wait: the door is limiting, or the process is busier than ``ceiling`` (a
        share of one core). Batch lines yield the process to interactive requests first."""
        return self.limit is not None or self.utilisation >= ceiling

    def retry_after_s(self) -> int:
        """Seconds a refused caller should wait: the limit is re-measured every tick, so one is enough."""
        return 1

    def tick(self, lag_s: float) -> None:
        """One sample: ``lag_s`` is how late the sampler's timer fired. Updates the readings and the limit.

        The signals are windowed over ``window_ticks``: the utilisation is the CPU over the window's wall time,
        the lag its smallest sample (a standing queue, not one stall: a single slow callback or a moment without
        a core is no reason to refuse anyone)."""
        s = self.settings
        now, cpu, loop_cpu = self._clock(), self._cpu(), self._loop_cpu()
        wall = now - self._last_tick
        if wall <= 0:
            return
        self._window.append((wall, cpu - self._last_cpu, self._admitted_tick, max(0.0, lag_s),
                             loop_cpu - self._last_loop_cpu))
        self._last_tick, self._last_cpu, self._last_loop_cpu, self._admitted_tick = now, cpu, loop_cpu, 0
        if len(self._window) > s.window_ticks:
            self._window.popleft()
        span = sum(w[0] for w in self._window)
        self.utilisation = min(1.0, max(0.0, sum(w[1] for w in self._window) / span))
        self.lag_s = min(w[3] for w in self._window)
        self._admitted_rate = sum(w[2] for w in self._window) / span
        if not s.enabled or len(self._window) < s.window_ticks:
            self.limit = None
            return
        hot = self.utilisation > s.target_utilisation
        recent = list(self._window)[-s.saturated_ticks:]
        if len(recent) == s.saturated_ticks and all(w[4] >= 0.95 * w[0] for w in recent):
            # the loop thread itself saturated on the last ticks (the process's CPU reaches a core with two
            # threads half busy, so it is not the test here): act on those ticks, not on the window's average,
            # which lags (past the knee what is admitted meanwhile is a queue the admitted requests wait
            # behind); while the saturation lasts the limit keeps falling, a fifth a tick
            span = sum(w[0] for w in recent)
            self.utilisation = min(1.0, sum(w[1] for w in recent) / span)
            self._admitted_rate = sum(w[2] for w in recent) / span
            hot = True
        # a loop behind while mostly idle is starved by others (a noisy neighbour), not overloaded by us
        lagging = self.lag_s * 1000 > s.max_loop_lag_ms and self.utilisation >= s.target_utilisation / 2
        if hot or lagging:
            # the rate that, at the CPU per request just measured, would have kept the loop at its target
            factor = max(0.5, s.target_utilisation / self.utilisation) if hot else 1.0
            if lagging:
                factor *= 0.8
            limit = max(s.min_rate, self._admitted_rate * factor)
            if self.limit is None:
                self._tokens, self._refill_at = limit * s.burst_s, now
            self.limit = limit if self.limit is None else min(self.limit, limit)
            return
        if self.limit is None:
            return
        if now - self._last_refusal >= s.release_s:
            self.limit = None
            return
        headroom = (s.target_utilisation - self.utilisation) / s.target_utilisation
        self.limit = max(s.min_rate, self.limit * (1.0 + min(0.05, max(0.0, headroom))))

    def reading(self) -> LoadReading:
        return LoadReading(self.utilisation, self.lag_s, self.limit, self._admitted_rate, self.refused_total,
                           self.admitted_total)
