"""Offered load for the accuracy checks: Poisson arrivals of random-size requests at a
multiple of a bucket's limit, and per-window accounting of what was admitted."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    at_us: int
    tokens: int  # reserved at admission
    used: int  # what the request really used (settled later), <= tokens


def offered(
    rng: random.Random, limit: int, window_s: int, seconds: float, factor: float,
    sizes: tuple[int, int] = (100, 4000),
) -> list[Request]:
    """Requests whose reserved tokens add up to ``factor x limit`` per window on average."""
    mean = (sizes[0] + sizes[1]) / 2
    rate_per_s = factor * limit / window_s / mean
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate_per_s)
        if t >= seconds:
            return out
        tokens = rng.randint(*sizes)
        out.append(Request(int(t * 1_000_000), tokens, rng.randint(tokens // 4, tokens)))


def per_window(admitted: list[tuple[int, int]], window_s: int, windows: int) -> list[int]:
    """Sum of tokens per window, from (time_us, tokens) pairs."""
    totals = [0] * windows
    for at_us, tokens in admitted:
        index = at_us // (window_s * 1_000_000)
        if index < windows:
            totals[index] += tokens
    return totals
