"""A batch the gateway runs is held line by line when it is created (``proxy.batches.reserve``): each line at the
worst case of every deployment it could reach, a line that would be refused held at nothing, and the events that
hold and release a line are the ledger's ordinary ones."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import orjson

from ledger.balances import Ledger
from pricing.calibration import Estimator
from proxy.admission.plan import chat_input_estimates, hold
from proxy.batches import reserve
from proxy.batches.lines import Line
from proxy.snapshot import KeyRecord
from tests.proxy.fakes import NOW_S, example_tree, snapshot

AT = datetime.fromtimestamp(NOW_S, timezone.utc)
KEY = KeyRecord(key_id="fb-key-1", key_hash="", team="platform", app="playground", business_unit=None,
                aliases=frozenset({"chat-default", "embed-default"}), env="prod")


def _chat(n: int, max_tokens: int | None = 200, model: str = "chat-default") -> Line:
    body: dict = {"model": model, "messages": [{"role": "user", "content": f"Tag ticket {n} please."}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return Line(n, f"c{n}", model, orjson.dumps(body))


def test_each_line_is_held_at_its_worst_case_over_every_deployment_it_could_reach() -> None:
    snap = snapshot()
    lines = [_chat(1, 200), _chat(2, None), _chat(3, 4000)]
    planned = reserve.plan(snap, KEY, "/v1/chat/completions", lines, Estimator(), AT)
    alias = snap.aliases["chat-default"]
    deps = reserve.reach(snap, alias)
    assert {d.id for d in deps} == set(alias.deployments)
    for line, held, (est, cap) in zip(lines, planned.holds, planned.estimates):
        body = orjson.loads(line.body)
        assert est == max(e.tokens for e in chat_input_estimates(Estimator(), body, KEY.key_id, deps).values())
        assert cap == body.get("max_tokens", alias.default_max_output_tokens)
        assert held == hold(snap, deps, est, cap, AT).hold_micro
    assert planned.total == sum(planned.holds) and planned.dearest == max(planned.holds)  # type: ignore[arg-type]


def test_a_line_that_would_be_refused_is_held_at_nothing() -> None:
    snap = snapshot()
    lines = [_chat(1), _chat(2, 10_000_000), Line(3, "c3", "nope", b'{"model": "nope"}'), _chat(4)]
    planned = reserve.plan(snap, KEY, "/v1/chat/completions", lines, Estimator(), AT)
    assert planned.holds[1] is None and planned.holds[2] is None  # above the alias's cap; no such alias
    assert planned.holds[0] and planned.holds[3] and planned.total == planned.holds[0] + planned.holds[3]


def test_a_line_dearer_than_the_per_request_cap_is_held_at_nothing() -> None:
    lines = [_chat(1, 200), _chat(2, 16000)]
    (small, _) = reserve.plan(snapshot(), KEY, "/v1/chat/completions", lines, Estimator(), AT).holds
    assert small is not None
    planned = reserve.plan(snapshot(), KEY, "/v1/chat/completions", lines, Estimator(), AT, cap_micro=small)
    assert planned.holds == [small, None] and planned.total == small


def test_a_split_or_fallback_alias_holds_at_the_dearest_deployment_it_may_reach() -> None:
    tree = example_tree()
    cheap = next(a for a in tree["aliases"] if a["name"] == "chat-default")
    tree["aliases"].append({**cheap, "name": "chat-narrow", "deployments": ["sim-openai-mumbai"],
                            "fallback_alias": "chat-default"})
    snap = snapshot(tree)
    deps = reserve.reach(snap, snap.aliases["chat-narrow"])
    assert {d.id for d in deps} == set(snap.aliases["chat-default"].deployments)


def test_embeddings_lines_hold_their_input_only() -> None:
    snap = snapshot()
    line = Line(1, "e1", "embed-default", orjson.dumps({"model": "embed-default", "input": ["a b c d", "e f"]}))
    planned = reserve.plan(snap, KEY, "/v1/embeddings", [line], Estimator(), AT)
    assert planned.estimates == [(planned.est_input, 0)] and planned.est_input > 0


def test_a_line_held_then_released_leaves_nothing_held_and_nothing_charged() -> None:
    snap = snapshot()
    block = reserve.block(KEY, ["team:platform", "key:fb-key-1"], "INR", 1, 86_400)
    assert block["hold_ttl_s"] == 86_400 + reserve.HOLD_MARGIN_S
    admitted = reserve.admitted("batch_x", _chat(7), 5_000, (40, 200), block, KEY, snap, "chat", "pod-a",
                                {}, AT)
    assert admitted.request_id == "batch_x-7" and dict(admitted.holds) == {"team:platform": 5000, "key:fb-key-1": 5000}
    ledger = Ledger(ZoneInfo("Asia/Kolkata"))
    assert ledger.apply(admitted)
    period = next(iter(ledger.balances()))[1]
    assert ledger.balance("team:platform", period).held == 5000
    released = reserve.released("batch_x", 7, 5000, block, AT)
    assert ledger.apply(released) and not ledger.apply(released)  # once
    bal = ledger.balance("team:platform", period)
    assert (bal.held, bal.settled, bal.requests) == (0, 0, 1)
