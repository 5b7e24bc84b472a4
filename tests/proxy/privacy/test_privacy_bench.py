"""``make bench-privacy``'s parts still run (tiny counts, no timing asserts), and its labelled pairs are sound.

The semantic bench's model needs the semantic-bench extra (torch), which the test suite does not install:
here its arithmetic runs on hand-made vectors through the same gateway functions it calls.
"""

from __future__ import annotations

import asyncio
import json
import math
import tempfile
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path

import pytest

from proxy.cache.similarity import normalised
from tests.harness import generous_limits, running_stack
from tests.proxy.privacy import bench_redaction, bench_semantic


def test_the_labelled_pairs_are_a_few_hundred_each_negative_a_question_of_its_own() -> None:
    groups = json.loads(bench_semantic.DATA.read_text())["groups"]
    stored, pairs = bench_semantic.load_pairs()
    assert len(stored) == len(groups) == len(set(stored)) >= 80 and len(pairs) >= 300
    assert {g["topic"] for g in groups} == {"hr", "it", "finance"}
    for g in groups:
        assert g["close"] and len(g["same"]) >= 2 and len(g["different"]) >= 2, g["q"]
        asked = [*g["close"], *g["same"], *g["different"]]
        assert len(set(asked)) == len(asked) and g["q"] not in asked, g["q"]
    kinds = {k: sum(p.kind == k for p in pairs) for k, _ in bench_semantic.KINDS}
    assert kinds["close"] == len(groups) and kinds["reworded"] >= 2 * len(groups) <= kinds["negative"]


def _vec(degrees: float):  # type: ignore[no-untyped-def]
    v = normalised([math.cos(math.radians(degrees)), math.sin(math.radians(degrees))])
    assert v is not None
    return v


def test_rates_and_the_cache_run_count_right_and_wrong_answers_through_the_gateways_store() -> None:
    P = bench_semantic.Pair
    pairs = [P(0, "q0", "close0", "close"), P(0, "q0", "far0", "reworded"), P(0, "q0", "neg0", "negative"),
             P(1, "q1", "close1", "close")]
    vectors = {"q0": _vec(0), "q1": _vec(90), "close0": _vec(5), "far0": _vec(40), "neg0": _vec(10),
               "close1": _vec(80)}
    scores = [(p, float(sum(a * b for a, b in zip(vectors[p.stored], vectors[p.asked])))) for p in pairs]
    t = Decimal("0.95")  # cos 5 = 0.996, cos 10 = 0.985, cos 40 = 0.766
    assert bench_semantic.rates(scores, t) == (2 / 3, 1.0)
    assert bench_semantic.hit_share(scores, t, "close") == 1.0
    right, wrong, served = asyncio.run(bench_semantic.cache_run(["q0", "q1"], vectors, pairs, t))
    assert (right, wrong, served) == (2 / 3, 1 / 3, 3)
    sweep = [(Decimal("0.9"), 0.5, 0.02), (Decimal("0.95"), 0.4, 0.01), (Decimal("0.99"), 0.1, 0.0)]
    assert bench_semantic.chosen(sweep) == Decimal("0.95")


@pytest.mark.e2e
def test_the_redaction_bench_measures_both_gateways_and_sees_them_differ() -> None:
    with tempfile.TemporaryDirectory(prefix="farebox-test-redaction-") as tmp, ExitStack() as stack:
        on = stack.enter_context(running_stack(Path(tmp) / "on", aliases="chat-openai", mutate=generous_limits))
        off = stack.enter_context(running_stack(Path(tmp) / "off", aliases="chat-openai",
                                                mutate=bench_redaction._allow_confidential))
        got = asyncio.run(bench_redaction.measure({"off": off, "on": on}, rounds=3))
    assert {arm: len(v) for arm, v in got.items()} == {"direct": 3, "off": 3, "on": 3}
    assert all(x > 0 for v in got.values() for x in v)
    assert len(bench_redaction.report(got)) == 7
