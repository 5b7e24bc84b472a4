"""Per-model counters for tests: requests, outcomes, open streams, client closes, and requests being generated
at once (``in_flight`` now, ``peak_in_flight`` the most ever: what a fleet's concurrent sequences would be).

Outcomes: ``ok``, ``bad_request``, ``unauthorized``, ``rate_limited``,
``server_error``, ``unavailable``, ``overloaded``, ``content_policy``,
``context_length``, ``hang``, ``disconnect``, ``stream_error``,
``client_closed``. A client close (the caller dropped the connection before
the simulator finished) is counted in ``closed_by_client`` with its wall-clock
time (``time.time()``) kept in ``last_client_closes`` (newest last) next to
``last_client_close_delays_ms`` (how long after the request arrived).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

KEEP_CLOSES = 50


@dataclass(slots=True)
class ModelStats:
    requests: int = 0
    outcomes: Counter = field(default_factory=Counter)
    open_streams: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    closed_by_client: int = 0
    last_client_closes: deque = field(default_factory=lambda: deque(maxlen=KEEP_CLOSES))
    last_client_close_delays_ms: deque = field(default_factory=lambda: deque(maxlen=KEEP_CLOSES))

    def to_dict(self) -> dict:
        return {
            "requests": self.requests,
            "outcomes": dict(self.outcomes),
            "open_streams": self.open_streams,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "closed_by_client": self.closed_by_client,
            "last_client_closes": list(self.last_client_closes),
            "last_client_close_delays_ms": list(self.last_client_close_delays_ms),
        }


class Stats:
    """Counters keyed by model id."""

    def __init__(self) -> None:
        self.models: dict[str, ModelStats] = {}

    def model(self, model: str) -> ModelStats:
        st = self.models.get(model)
        if st is None:
            st = self.models[model] = ModelStats()
        return st

    def started(self, model: str) -> ModelStats:
        """One more request generating (the caller takes ``in_flight`` down when it ends)."""
        st = self.model(model)
        st.in_flight += 1
        st.peak_in_flight = max(st.peak_in_flight, st.in_flight)
        return st

    def outcome(self, model: str, outcome: str) -> None:
        st = self.model(model)
        st.requests += 1
        st.outcomes[outcome] += 1

    def client_closed(self, model: str, started: float) -> None:
        st = self.model(model)
        now = time.time()
        st.closed_by_client += 1
        st.last_client_closes.append(now)
        st.last_client_close_delays_ms.append(round((now - started) * 1000, 3))

    def to_dict(self) -> dict:
        models = {name: st.to_dict() for name, st in sorted(self.models.items())}
        return {
            "models": models,
            "totals": {
                "requests": sum(st.requests for st in self.models.values()),
                "open_streams": sum(st.open_streams for st in self.models.values()),
                "closed_by_client": sum(st.closed_by_client for st in self.models.values()),
            },
        }

    def reset(self) -> None:
        # open streams stay counted: they are still open
        for st in self.models.values():
            st.requests, st.closed_by_client = 0, 0
            st.outcomes.clear()
            st.last_client_closes.clear()
            st.last_client_close_delays_ms.clear()
