"""Realistic chat prompts for the privacy tests and benchmark: prose with identifiers mixed in."""

from __future__ import annotations

import random

from stdnum import luhn, verhoeff

WORDS = ("the customer asked about their loan statement and the branch reply was delayed because the "
         "verification of documents took longer than expected please summarise the thread and draft a "
         "polite answer order 4521 shipped on 2024-03-11 for rs 1,250.00 at 10:45 am ref INV-2231").split()


def aadhaar(rng: random.Random) -> str:
    base = str(rng.randint(2, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(10))
    n = base + verhoeff.calc_check_digit(base)
    return f"{n[:4]} {n[4:8]} {n[8:]}"


def card(rng: random.Random) -> str:
    base = "4" + "".join(str(rng.randint(0, 9)) for _ in range(14))
    n = base + luhn.calc_check_digit(base)
    return " ".join(n[i:i + 4] for i in range(0, 16, 4))


def identifier(rng: random.Random) -> str:
    return rng.choice((
        aadhaar(rng), card(rng), "ABCPK1234F", "HDFC0001234", "ravi.k@okaxis", "+91 98765 43210",
        "priya.sharma@example.co.in", "sk-proj-" + "".join(rng.choice("abcdefXYZ0123456789") for _ in range(32)),
    ))


def prompt(rng: random.Random, size: int = 4096, identifiers: int = 6) -> str:
    """About ``size`` characters of prose with ``identifiers`` identifiers at random places."""
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS))
    for _ in range(identifiers):
        words.insert(rng.randrange(len(words)), identifier(rng))
    return " ".join(words)[:size]
