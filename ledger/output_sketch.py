"""How much of its output cap a key's requests really use: a bounded, pure quantile sketch.

Holds are priced at the output cap (``max_completion_tokens``) because
nothing better is known when a request arrives; most requests use a fraction
of it. ``OutputLearner`` learns, per (key, alias), a high quantile of
``actual output / cap`` from settled requests, so admission can hold that
figure instead of the cap while the budget has room (``ledger.hold_sizing``).

Invariants a reader must keep:

* Bounded memory: ``BUCKETS`` integer counters and ``RECENT`` ratios per
  group, at most ``max_groups`` groups (least recently observed forgotten).
* Recency: when a group's count reaches ``window`` every counter is halved,
  so old behaviour fades; the answer is never below the largest of the last
  ``RECENT`` ratios, so a key whose outputs suddenly max out is held at its
  full cap from its very next request on.
* No answer (None: hold the full cap) before ``min_samples`` observations.
* Ratios are integer per-mille (0..1000), rounded up; no floats, no clock.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

PER_MILLE = 1000
BUCKETS = 20  # each 50 per-mille wide, (lo, hi]; a bucket answers with its upper edge (rounding up)
RECENT = 8
_WIDTH = PER_MILLE // BUCKETS


def ratio_per_mille(output_tokens: int, cap_tokens: int) -> int:
    """``output / cap`` in per-mille, rounded up, clamped to 0..1000 (1000 when the cap is unknown)."""
    if cap_tokens <= 0:
        return PER_MILLE
    return min(-(-max(output_tokens, 0) * PER_MILLE // cap_tokens), PER_MILLE)


@dataclass(slots=True)
class Sketch:
    """One group's histogram of ratios and its last ``RECENT`` ratios."""

    counts: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    total: int = 0
    seen: int = 0  # observations ever (not halved): the ``min_samples`` gate
    recent: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT))

    def add(self, ratio: int, window: int) -> None:
        self.counts[min(max(ratio - 1, 0) // _WIDTH, BUCKETS - 1)] += 1  # (lo, hi]: an edge is its own bucket
        self.total += 1
        self.seen += 1
        self.recent.append(ratio)
        if self.total >= window:
            self.counts = [c // 2 for c in self.counts]
            self.total = sum(self.counts)

    def quantile(self, q_per_mille: int) -> int:
        """The upper edge of the bucket holding the ``q`` quantile (per-mille of the cap)."""
        need = -(-self.total * q_per_mille // PER_MILLE)  # ceil: at least q of the mass at or below
        run = 0
        for i, count in enumerate(self.counts):
            run += count
            if run >= need and run > 0:
                return (i + 1) * _WIDTH
        return PER_MILLE


class OutputLearner:
    """Per (key, alias) sketches; ``ratio`` answers the per-mille of the cap to hold, or None (hold the cap)."""

    def __init__(self, *, quantile_per_mille: int = 990, min_samples: int = 20, window: int = 512,
                 max_groups: int = 10_000) -> None:
        if not 0 < quantile_per_mille <= PER_MILLE or min_samples < 1 or window < 2 or max_groups < 1:
            raise ValueError("quantile in 1..1000 per-mille, min_samples >= 1, window >= 2, max_groups >= 1")
        self.quantile_per_mille = quantile_per_mille
        self.min_samples = min_samples
        self.window = window
        self.max_groups = max_groups
        self._groups: OrderedDict[tuple[str, str], Sketch] = OrderedDict()

    def observe(self, key_id: str, alias: str, output_tokens: int, cap_tokens: int) -> None:
        """One settled request's real output against the cap it was admitted with."""
        group = (key_id, alias)
        sketch = self._groups.get(group)
        if sketch is None:
            sketch = self._groups[group] = Sketch()
            if len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(group)
        sketch.add(ratio_per_mille(output_tokens, cap_tokens), self.window)

    def ratio(self, key_id: str, alias: str) -> int | None:
        """Per-mille of the cap to hold: max(quantile, recent maximum); None until ``min_samples``."""
        sketch = self._groups.get((key_id, alias))
        if sketch is None or sketch.seen < self.min_samples:
            return None
        return max(sketch.quantile(self.quantile_per_mille), max(sketch.recent, default=0))

    def output_tokens(self, key_id: str, alias: str, cap_tokens: int) -> int:
        """The output tokens to hold for a request capped at ``cap_tokens`` (the cap itself when unlearned)."""
        ratio = self.ratio(key_id, alias)
        if ratio is None:
            return cap_tokens
        return min(-(-cap_tokens * ratio // PER_MILLE), cap_tokens)

    def __len__(self) -> int:
        return len(self._groups)
