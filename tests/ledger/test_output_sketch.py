"""The output learner: a high quantile of output / cap per key and alias, bounded, quick to distrust."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.output_sketch import BUCKETS, OutputLearner, ratio_per_mille


def test_no_answer_before_enough_samples_then_the_quantile() -> None:
    learner = OutputLearner(min_samples=20)
    for _ in range(19):
        learner.observe("k1", "chat", 20, 400)
    assert learner.ratio("k1", "chat") is None and learner.output_tokens("k1", "chat", 400) == 400
    learner.observe("k1", "chat", 20, 400)
    # 20/400 = 50 per-mille: the first bucket's upper edge
    assert learner.ratio("k1", "chat") == 50
    assert learner.output_tokens("k1", "chat", 400) == 20
    assert learner.ratio("k2", "chat") is None and learner.ratio("k1", "other") is None


def test_the_quantile_ignores_a_rare_tail_but_not_a_recent_one() -> None:
    learner = OutputLearner(min_samples=10, quantile_per_mille=990)
    for _ in range(300):
        learner.observe("k", "a", 40, 400)
    learner.observe("k", "a", 400, 400)  # one at the cap: recent, so the answer is the cap
    assert learner.ratio("k", "a") == 1000
    for _ in range(8):  # it has left the recent window; 1 in 309 is below the 1% tail
        learner.observe("k", "a", 40, 400)
    assert learner.ratio("k", "a") == 100


def test_an_adversarial_key_is_held_at_its_cap_from_its_next_request() -> None:
    learner = OutputLearner(min_samples=5)
    for _ in range(1000):
        learner.observe("bad", "a", 10, 500)
    assert learner.output_tokens("bad", "a", 500) == 25  # 20 per-mille, held at its bucket's edge: 50
    learner.observe("bad", "a", 500, 500)
    assert learner.output_tokens("bad", "a", 500) == 500


def test_memory_is_bounded_by_groups_and_buckets() -> None:
    learner = OutputLearner(max_groups=3, min_samples=1)
    for i in range(10):
        learner.observe(f"k{i}", "a", 1, 10)
    assert len(learner) == 3 and learner.ratio("k0", "a") is None and learner.ratio("k9", "a") == 100


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        OutputLearner(quantile_per_mille=0)


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 4096)), min_size=1, max_size=300))
def test_the_answer_covers_the_quantile_of_what_the_window_saw(samples: list[tuple[int, int]]) -> None:
    learner = OutputLearner(min_samples=1, quantile_per_mille=990, window=10_000)
    for out, cap in samples:
        learner.observe("k", "a", out, cap)
    ratios = sorted(ratio_per_mille(o, c) for o, c in samples)
    answer = learner.ratio("k", "a")
    assert answer is not None and 0 < answer <= 1000 and answer % (1000 // BUCKETS) == 0
    covered = sum(1 for r in ratios if r <= answer)
    assert covered * 1000 >= len(ratios) * 990  # at least 99% of what it saw is at or below the answer
    assert answer >= max(ratio_per_mille(o, c) for o, c in samples[-8:])  # never below a recent ratio
