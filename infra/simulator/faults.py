"""Which fault (if any) a request suffers: seeded draws over a profile's rates.

Kinds: ``429``, ``500``, ``503``, ``529``, ``hang``, ``disconnect``,
``content_policy``, ``context_length``, ``stream_error``. ``x-sim-fault``
forces one (``none`` forces none). One uniform draw is taken per chat request
in arrival order from ``random.Random(seed)``, so a fixed request sequence
sees a fixed fault sequence.

Phases: ``429/500/503/529/content_policy/context_length`` refuse the request
before generation (not billed); ``hang`` accepts and never answers (not
billed); ``disconnect`` sends ``disconnect_after_tokens`` tokens then aborts
the connection; ``stream_error`` sends them then an in-stream error event
(both billed for what was sent).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from infra.simulator.config import FaultProfile
from infra.simulator.generation import RequestError

FAULT_KINDS = ("429", "500", "503", "529", "hang", "disconnect", "content_policy",
               "context_length", "stream_error")
PRE_GENERATION = frozenset({"429", "500", "503", "529", "content_policy", "context_length"})
_ALIASES = {"rate_limit": "429", "overloaded": "529", "timeout": "hang"}
_ORDER = (("rate_429", "429"), ("rate_500", "500"), ("rate_503", "503"), ("rate_hang", "hang"),
          ("rate_disconnect", "disconnect"), ("rate_content_policy", "content_policy"),
          ("rate_stream_error", "stream_error"))

OUTCOME = {  # fault kind -> stats outcome name
    "429": "rate_limited", "500": "server_error", "503": "unavailable", "529": "overloaded",
    "hang": "hang", "disconnect": "disconnect", "content_policy": "content_policy",
    "context_length": "context_length", "stream_error": "stream_error",
}


def normalise(kind: str | None) -> str | None:
    """Validate an ``x-sim-fault`` value; ``None``/``none`` means no forced fault."""
    if kind is None or kind == "none":
        return kind
    kind = _ALIASES.get(kind, kind)
    if kind not in FAULT_KINDS:
        raise RequestError(400, "invalid_request",
                           f"x-sim-fault must be one of {', '.join(FAULT_KINDS)} or none",
                           param="x-sim-fault")
    return kind


@dataclass(slots=True)
class FaultDecider:
    """Draws faults from a seeded RNG; ``reset()`` restarts the sequence."""

    seed: int = 0
    rng: random.Random = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def reset(self) -> None:
        self.rng = random.Random(self.seed)

    def draw(self, faults: FaultProfile, forced: str | None) -> str | None:
        u = self.rng.random()  # always draw, so the sequence depends on request order only
        forced = normalise(forced)
        if forced == "none":
            return None
        if forced is not None:
            return forced
        acc = 0.0
        for attr, kind in _ORDER:
            acc += getattr(faults, attr)
            if u < acc:
                return kind
        return None


def policy_message() -> str:
    return ("Your request was rejected as a result of our safety system. Your prompt may contain "
            "text that is not allowed by our content policy.")
