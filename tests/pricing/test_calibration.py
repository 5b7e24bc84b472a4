"""Per-key calibration of the chars fallback, and the Estimator facade."""

import random

import pytest

from ledger.usage import TokenUsage
from pricing.calibration import Calibrator, Estimate, Estimator
from pricing.tokenizer import O200K_BASE, count_chat_input
from pricing.tokens import estimate_chat_input, raw_tokens


def _body(text: str) -> dict:
    return {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]}


def test_factor_starts_at_one():
    cal = Calibrator()
    assert cal.factor("k", "claude") == 1.0
    assert cal.ratio("k", "claude") == 1.0
    assert cal.samples("k", "claude") == 0


@pytest.mark.parametrize("true_ratio", [0.8, 1.0, 1.6, 2.4])
def test_converges_to_a_constant_true_ratio(true_ratio):
    cal = Calibrator(alpha=0.2)
    for _ in range(60):
        cal.observe("k", "claude", 1000, round(1000 * true_ratio))
    assert cal.ratio("k", "claude") == pytest.approx(true_ratio, rel=1e-3)
    assert cal.factor("k", "claude") == pytest.approx(true_ratio, rel=1e-3)  # no noise, no margin left


def test_noisy_ratio_mean_converges_and_factor_keeps_headroom():
    rng = random.Random(7)
    cal = Calibrator(alpha=0.1, margin=1.0)
    covered = total = 0
    for i in range(2000):
        actual = round(1000 * rng.uniform(1.1, 1.5))
        if i >= 200:  # after warm-up: how often does factor x base cover the actual?
            total += 1
            covered += cal.factor("k", "llama") * 1000 >= actual
        cal.observe("k", "llama", 1000, actual)
    assert cal.ratio("k", "llama") == pytest.approx(1.3, abs=0.06)
    assert cal.factor("k", "llama") > cal.ratio("k", "llama")
    assert covered / total > 0.7


def test_movement_is_gradual_and_deterministic():
    a, b = Calibrator(alpha=0.2, margin=0.0), Calibrator(alpha=0.2, margin=0.0)
    a.observe("k", "f", 100, 200)
    assert a.factor("k", "f") == pytest.approx(0.8 * 1.0 + 0.2 * 2.0)
    seq = [(100, 150), (400, 300), (50, 90), (1000, 1700)]
    for est, act in seq:
        a.observe("x", "f", est, act)
        b.observe("x", "f", est, act)
    assert a.factor("x", "f") == b.factor("x", "f")
    assert a.snapshot()[-1] == b.snapshot()[-1]


def test_clamped_to_range():
    cal = Calibrator(min_factor=0.5, max_factor=3.0, margin=0.0)
    for _ in range(200):
        cal.observe("hi", "f", 100, 100_000)
        cal.observe("lo", "f", 100_000, 1)
    assert cal.factor("hi", "f") == 3.0
    assert cal.factor("lo", "f") == pytest.approx(0.5)
    assert 0.5 <= cal.ratio("lo", "f") and cal.ratio("hi", "f") <= 3.0


def test_non_positive_observations_are_ignored():
    cal = Calibrator()
    cal.observe("k", "f", 0, 100)
    cal.observe("k", "f", 100, 0)
    assert cal.samples("k", "f") == 0 and len(cal) == 0


def test_keys_and_families_are_separate():
    cal = Calibrator(margin=0.0)
    for _ in range(50):
        cal.observe("a", "claude", 100, 200)
    assert cal.factor("a", "claude") > 1.9
    assert cal.factor("a", "llama") == 1.0
    assert cal.factor("b", "claude") == 1.0
    assert cal.factor("a", None) == 1.0


def test_lru_bound():
    cal = Calibrator(max_entries=3)
    for key in ("a", "b", "c"):
        cal.observe(key, "f", 100, 200)
    cal.observe("a", "f", 100, 200)  # a is now most recent; b is the oldest
    cal.observe("d", "f", 100, 200)
    assert len(cal) == 3
    assert cal.samples("b", "f") == 0
    assert cal.samples("a", "f") == 2 and cal.samples("c", "f") == 1 and cal.samples("d", "f") == 1
    for i in range(10_000):
        cal.observe(f"k{i}", "f", 100, 150)
    assert len(cal) == 3


def test_snapshot_restore_round_trip():
    cal = Calibrator(max_entries=10)
    for i in range(5):
        cal.observe(f"k{i}", "f", 100, 100 + 20 * i)
    other = Calibrator(max_entries=10)
    other.restore(cal.snapshot())
    assert other.snapshot() == cal.snapshot()
    assert other.factor("k4", "f") == cal.factor("k4", "f")
    small = Calibrator(max_entries=2)
    small.restore(cal.snapshot())
    assert [row[0] for row in small.snapshot()] == ["k3", "k4"]


def test_bad_parameters_rejected():
    for kwargs in ({"alpha": 0}, {"alpha": 1.5}, {"min_factor": 1.2}, {"max_factor": 0.9}, {"max_entries": 0}, {"margin": -1}):
        with pytest.raises(ValueError):
            Calibrator(**kwargs)


# ------------------------------------------------------------------ Estimator


def test_exact_when_an_encoding_is_known():
    body = _body("hello world")
    est = Estimator().estimate(body, key_id="k", model_family="openai", encoding=O200K_BASE)
    assert est == Estimate(tokens=count_chat_input(body, O200K_BASE), method="exact", factor=1.0, base=est.tokens, floor=est.tokens)
    assert est.tokens == 3 + (3 + 1 + 2) + (3 + 1 + 2)  # "system"/"be brief", "user"/"hello world"


def test_chars_before_any_data_is_the_padded_fallback():
    body = _body("x" * 4000)
    est = Estimator().estimate(body, key_id="k", model_family="claude")
    assert est.method == "chars" and est.factor == 1.0
    assert est.tokens == est.base == estimate_chat_input(body)
    assert est.floor == raw_tokens(4000 + len("be brief")) + 3 + 2 * 4


def test_chars_uses_the_keys_calibration_and_converges():
    estimator = Estimator(Calibrator(alpha=0.3, margin=0.0))
    body = _body("def f(x):\n    return {x: [x]}\n" * 100)
    true_tokens = 2 * estimate_chat_input(body)  # code: twice the padded guess
    for _ in range(40):
        est = estimator.estimate(body, key_id="k", model_family="claude")
        estimator.observe(est, true_tokens, key_id="k", model_family="claude")
    est = estimator.estimate(body, key_id="k", model_family="claude")
    assert est.tokens == pytest.approx(true_tokens, rel=0.01)
    other = estimator.estimate(body, key_id="other", model_family="claude")
    assert other.factor == 1.0


def test_chars_never_below_raw_chars_over_4():
    estimator = Estimator(Calibrator(alpha=1.0, margin=0.0, min_factor=0.5))
    rng = random.Random(3)
    for _ in range(300):
        body = _body("y" * rng.randint(0, 20_000))
        est = estimator.estimate(body, key_id="k", model_family="f")
        assert est.tokens >= est.floor
        assert est.floor >= raw_tokens(sum(len(m["content"]) for m in body["messages"]))
        estimator.observe(est, max(1, est.floor // 10), key_id="k", model_family="f")  # teach it to go low
    assert estimator.calibrator.factor("k", "f") == 0.5
    est = estimator.estimate(_body("z" * 10_000), key_id="k", model_family="f")
    assert est.tokens == est.floor


def test_observe_skips_exact_and_estimated_usage_and_reads_prompt_tokens():
    estimator = Estimator(Calibrator(alpha=1.0, margin=0.0))
    body = _body("x" * 400)
    exact = estimator.estimate(body, key_id="k", encoding=O200K_BASE)
    estimator.observe(exact, 10_000, key_id="k")
    chars = estimator.estimate(body, key_id="k", model_family="f")
    estimator.observe(chars, TokenUsage(input=10_000, source="estimated"), key_id="k", model_family="f")
    assert len(estimator.calibrator) == 0
    usage = TokenUsage(input=chars.base, cached_input=chars.base, source="provider")
    estimator.observe(chars, usage, key_id="k", model_family="f")
    assert estimator.calibrator.factor("k", "f") == pytest.approx(2.0)


def test_custom_image_estimate_applies_to_both_paths():
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}
    base = Estimator().estimate(body, key_id="k")
    big = Estimator(image_tokens=5000).estimate(body, key_id="k")
    assert big.tokens - base.tokens == 5000 - 765
    exact = Estimator(image_tokens=5000).estimate(body, key_id="k", encoding=O200K_BASE)
    assert exact.tokens == 3 + 3 + 1 + 5000
