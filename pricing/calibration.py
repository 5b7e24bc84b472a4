"""Input-token estimates for admission: exact where the tokenizer is known,
calibrated characters otherwise.

The chars fallback (:func:`pricing.tokens.estimate_chat_input`, chars/4 x 1.3
plus fixed framing) is the *base* estimate. For each (key id, model family) a
:class:`Calibrator` learns how provider-reported input tokens compare with
that base and scales it: a key that sends code or CJK text (more tokens per
character) gets a bigger factor, one that sends plain English a smaller one.

Calibration state is pure (no clock, no I/O, no randomness): the same
observations in the same order give the same factors. It is per process and
bounded by an LRU of (key, family) entries; :meth:`Calibrator.snapshot` and
:meth:`Calibrator.restore` let a caller persist or share it. Not thread-safe:
use it from one event loop (or guard it).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from ledger.usage import TokenUsage
from pricing.tokenizer import count_chat_input
from pricing.tokens import (
    IMAGE_PART_TOKENS,
    chat_input_chars,
    estimate_tokens,
    raw_tokens,
)

Method = Literal["exact", "chars"]

DEFAULT_FAMILY = "default"


@dataclass(slots=True)
class _Entry:
    ratio: float  # EW mean of actual / base
    deviation: float  # EW mean absolute deviation of that ratio
    samples: int


class Calibrator:
    """Per (key id, family) exponentially weighted ratio actual / base estimate.

    ``factor`` starts at 1.0 (so the padded 1.3x applies until data arrives),
    moves toward the observed ratio with weight ``alpha`` per observation, adds
    ``margin`` mean absolute deviations of headroom (0 for the bare mean), and
    is clamped to ``[min_factor, max_factor]``. At most ``max_entries``
    (key, family) pairs are kept; the least recently used is dropped first.
    """

    def __init__(
        self,
        *,
        alpha: float = 0.2,
        margin: float = 1.0,
        min_factor: float = 0.5,
        max_factor: float = 3.0,
        max_entries: int = 10_000,
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError("alpha must be in (0, 1]")
        if not 0.0 < min_factor <= 1.0 <= max_factor:
            raise ValueError("need 0 < min_factor <= 1 <= max_factor")
        if margin < 0 or max_entries < 1:
            raise ValueError("margin must be >= 0 and max_entries >= 1")
        self.alpha = alpha
        self.margin = margin
        self.min_factor = min_factor
        self.max_factor = max_factor
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def observe(self, key: str, family: str | None, estimated: int, actual: int) -> float:
        """Fold one (base estimate, provider-reported input tokens) pair; returns the new factor.

        ``estimated`` must be the *uncalibrated* base (``Estimate.base``), not the
        calibrated figure, or the ratio would chase its own output. Pairs with
        a non-positive side carry no information and are ignored.
        """
        ident = (key, family or DEFAULT_FAMILY)
        if estimated <= 0 or actual <= 0:
            return self.factor(*ident)
        ratio = self._clamp(actual / estimated)
        entry = self._entries.get(ident)
        if entry is None:
            entry = _Entry(ratio=1.0, deviation=0.0, samples=0)
            self._entries[ident] = entry
            if len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(ident)
        a = self.alpha
        entry.deviation = (1.0 - a) * entry.deviation + a * abs(ratio - entry.ratio)
        entry.ratio = self._clamp((1.0 - a) * entry.ratio + a * ratio)
        entry.samples += 1
        return self._factor(entry)

    def factor(self, key: str, family: str | None) -> float:
        """The multiplier for this key's base estimates (1.0 with no data)."""
        entry = self._entries.get((key, family or DEFAULT_FAMILY))
        if entry is None:
            return 1.0
        return self._factor(entry)

    def ratio(self, key: str, family: str | None) -> float:
        """The bare EW mean ratio actual / base, without the margin (1.0 with no data)."""
        entry = self._entries.get((key, family or DEFAULT_FAMILY))
        return 1.0 if entry is None else entry.ratio

    def samples(self, key: str, family: str | None) -> int:
        entry = self._entries.get((key, family or DEFAULT_FAMILY))
        return 0 if entry is None else entry.samples

    def _factor(self, entry: _Entry) -> float:
        return self._clamp(entry.ratio + self.margin * entry.deviation)

    def _clamp(self, value: float) -> float:
        if math.isnan(value):
            return 1.0
        return min(self.max_factor, max(self.min_factor, value))

    def snapshot(self) -> list[tuple[str, str, float, float, int]]:
        """(key, family, ratio, deviation, samples), least recently used first."""
        return [(k, f, e.ratio, e.deviation, e.samples) for (k, f), e in self._entries.items()]

    def restore(self, rows: list[tuple[str, str, float, float, int]]) -> None:
        """Replace the state with a :meth:`snapshot` (order kept; trimmed to ``max_entries``)."""
        self._entries.clear()
        for key, family, ratio, deviation, samples in rows[-self.max_entries :]:
            self._entries[(key, family)] = _Entry(float(ratio), float(deviation), int(samples))


@dataclass(frozen=True, slots=True)
class Estimate:
    """An input-token estimate for admission.

    ``tokens`` is what to hold. ``base`` is the uncalibrated figure (the exact
    count, or the padded chars estimate) to hand back to
    :meth:`Estimator.observe`; ``floor`` the raw chars/4 count that a chars
    estimate never goes below; ``factor`` the calibration applied (1.0 for exact).
    """

    tokens: int
    method: Method
    factor: float
    base: int
    floor: int


class Estimator:
    """Exact when an encoding is known, else chars x per-key calibration."""

    def __init__(self, calibrator: Calibrator | None = None, *, image_tokens: int = IMAGE_PART_TOKENS) -> None:
        self.calibrator = calibrator if calibrator is not None else Calibrator()
        self.image_tokens = image_tokens

    def estimate(
        self,
        body: dict,
        *,
        key_id: str,
        model_family: str | None = None,
        encoding: str | None = None,
    ) -> Estimate:
        if encoding is not None:
            tokens = count_chat_input(body, encoding, image_tokens=self.image_tokens)
            return Estimate(tokens=tokens, method="exact", factor=1.0, base=tokens, floor=tokens)
        chars, fixed = chat_input_chars(body)
        if self.image_tokens != IMAGE_PART_TOKENS:
            fixed += _image_delta(body, self.image_tokens)
        base = estimate_tokens(chars) + fixed
        floor = raw_tokens(chars) + fixed
        factor = self.calibrator.factor(key_id, model_family)
        tokens = base if factor == 1.0 else max(math.ceil(base * factor), floor)
        return Estimate(tokens=tokens, method="chars", factor=factor, base=base, floor=floor)

    def observe(
        self,
        estimate: Estimate,
        actual: int | TokenUsage,
        *,
        key_id: str,
        model_family: str | None = None,
    ) -> None:
        """Feed settled usage back. Exact estimates and estimated usage teach nothing and are skipped.

        ``actual`` is the provider's prompt tokens (a :class:`TokenUsage` is
        read as ``prompt_tokens``, cached and cache-write input included).
        """
        if estimate.method != "chars":
            return
        if isinstance(actual, TokenUsage):
            if actual.source != "provider":
                return
            actual = actual.prompt_tokens
        self.calibrator.observe(key_id, model_family, estimate.base, actual)


def _image_delta(body: dict, image_tokens: int) -> int:
    """Adjustment when a non-default per-image estimate is configured for the chars path."""
    images = 0
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in ("image_url", "input_image"):
                    images += 1
    return images * (image_tokens - IMAGE_PART_TOKENS)
