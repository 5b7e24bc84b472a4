"""What a batch sent to a provider's batch API costs: its whole-batch hold, and each line's metering. Pure.

A provider runs the whole batch at once, so farebox admits it as a whole: one ``request.admitted`` under the
batch's id, holding the sum of its lines' worst cases (each line's input estimate and output cap at the
deployment's ``batch`` tier price) on every scope the key's requests touch, for the batch's window and an hour
more (``hold_ttl_s``). When the provider's results come back every line that ran is one ``request.attempted``
of that request (attempt number = the line's number: the same line metered again has the same event id, and
every consumer keeps the first), priced at the batch tier of what was served (cached input at the batch cached
rate), and one ``request.settled`` replaces the hold by their sum. Lines that never ran (cancelled, expired)
cost nothing: the rest of the hold is released by the same settlement. Usage the provider reports is checked
at the usage boundary like any answer's; what fails it, or is missing, is billed farebox's estimate.

The ``provider`` block (``BatchRecord.provider``) keeps everything settlement needs, so it never depends on the
key, alias or deployment still being configured: who (team, key, scopes), where (the deployment's provider,
account, model, region, project), the price version and currency, the hold and each line's estimate.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from ledger.request_events import BATCH_TAG, PRIORITY_TAG
from ledger.usage import TokenUsage
from pricing.money import to_decimal
from pricing.rating import rate
from pricing.tokens import estimate_tokens
from proxy.metering.settlement import add_usage
from proxy.snapshot import Deployment, KeyRecord, Snapshot
from proxy.upstream.usage_check import estimated_as, needs_estimate, within

TIER = "batch"
HOLD_MARGIN_S = 3600  # the hold outlives the window by this much: results are read after the window ends


def block(snapshot: Snapshot, key: KeyRecord, scopes: list[str], alias: str, dep: Deployment, price_version: int,
          estimates: list[tuple[int, int]], hold_micro: int, dearest_micro: int, native: bool = False
          ) -> dict[str, Any]:
    """A new provider batch's ``provider`` block (``phase: new``: not yet sent; ``native``: Messages requests sent
    and answered as they are)."""
    return {"phase": "new", "deployment": dep.id, "dialect": dep.dialect, "alias": alias, "native": native,
            "where": {"provider": dep.provider, "account": dep.account, "model": dep.model, "region": dep.region,
                      "project": dep.project},
            "team": key.team, "key_id": key.key_id, "scopes": scopes, "price_version": price_version,
            "currency": snapshot.currency, "hold_micro": hold_micro, "dearest_micro": dearest_micro, "estimates": [list(e) for e in estimates]}


def hold_ttl_s(window_s: int) -> int:
    return window_s + HOLD_MARGIN_S


def admitted(batch_id: str, b: dict[str, Any], key: KeyRecord, snapshot: Snapshot, pod: str, window_s: int,
             leases: dict[str, str], now: datetime) -> RequestAdmitted:
    """The batch's ``request.admitted``: its hold on every scope (``leases``: what funds it, distributed mode),
    tagged with the batch."""
    ests = b["estimates"]
    return RequestAdmitted(
        time=now, request_id=batch_id, team=key.team, key_id=key.key_id, business_unit=key.business_unit or "",
        app=key.app, run_id=None, alias=b["alias"], data_class=key.data_class_ceiling,
        est_input_tokens=sum(e[0] for e in ests), max_output_tokens=sum(e[1] for e in ests),
        holds=dict.fromkeys(b["scopes"], b["hold_micro"]), currency=b["currency"], price_version=b["price_version"],
        pod=pod, hold_ttl_s=hold_ttl_s(window_s), stream=False, leases=leases,
        cost_centre=snapshot.cost_centre_of(key.team, key.app), tags={BATCH_TAG: batch_id, PRIORITY_TAG: "batch",
                                                                      "fb.batch_via": "provider"})


def line_usage(reported: TokenUsage | None, estimate: tuple[int, int], answer: Any, bound: int) -> TokenUsage:
    """What a line is billed for: the provider's usage within ``bound`` tokens, else farebox's estimate (input
    as estimated, output from the answer's length), always at the batch tier."""
    usage = within(reported, bound) if reported is not None else None
    if needs_estimate(usage):
        usage = estimated_as(usage, input_tokens=estimate[0],
                             output_tokens=min(estimate[1], estimate_tokens(len(_text(answer)))))
    assert usage is not None
    return replace(usage, service_tier=TIER)


def _text(answer: Any) -> str:
    try:
        return str(answer["choices"][0]["message"].get("content") or "")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""


def cost(snapshot: Snapshot, b: dict[str, Any], usage: TokenUsage, now: datetime) -> int:
    if not (usage.prompt_tokens or usage.completion_tokens):
        return 0
    price = snapshot.price_book.get(b["price_version"]).served(b["deployment"], usage.service_tier)
    return rate(usage, price, snapshot.fx.rate(price.currency, b["currency"], now))


def attempted(batch_id: str, b: dict[str, Any], number: int, ok: bool, status: int, usage: TokenUsage,
              cost_micro: int, now: datetime) -> RequestAttempted:
    w = b["where"]
    return RequestAttempted(
        time=now, request_id=batch_id, team=b["team"], attempt=number, deployment=b["deployment"],
        provider=w["provider"], account=w["account"], model=w["model"], region=w["region"],
        outcome="ok" if ok else "error", status=status, ttft_ms=None, latency_ms=0, usage=usage,
        cost_micro=cost_micro, currency=b["currency"], price_version=b["price_version"],
        error_code=None if ok else "batch_line_error",
        usage_received=usage.received if usage.source == "provider_invalid" else None, project=w["project"])


def settled(batch_id: str, b: dict[str, Any], attempts: list[RequestAttempted], final: str,
            now: datetime) -> RequestSettled:
    """The batch's ``request.settled``: the hold replaced by what its lines cost (0 for a batch none of whose
    lines ran)."""
    total = sum(a.cost_micro for a in attempts)
    usage = TokenUsage(source="provider")
    for a in attempts:
        usage = add_usage(usage, a.usage)
    return RequestSettled(
        time=now, request_id=batch_id, team=b["team"], final_status=200 if final == "completed" else 499,
        attempts=len(attempts), deployment=b["deployment"], usage=usage, cost_micro=total, currency=b["currency"],
        cost_by_scope=dict.fromkeys(b["scopes"], total), hold_released=dict.fromkeys(b["scopes"], b["hold_micro"]),
        overrun_micro=max(total - b["hold_micro"], 0), cache_hit=False, latency_ms=0, cache_saved_micro=0,
        cache_kind=None, cache_similarity=None)


def output_line(batch_id: str, number: int, custom_id: str, alias: str, ok: bool, status: int, answer: Any,
                cost_micro: int, b: dict[str, Any], created: int) -> bytes:
    """The line as farebox's output (or error) file has it: OpenAI's batch output line, the answer stamped with
    the line's request id and the alias, and its ``x_farebox`` cost."""
    rid = f"{batch_id}-{number}"
    if ok and isinstance(answer, dict) and b.get("native"):  # Anthropic's Message as it came, ours where it says
        answer = {**answer, "id": rid, "model": alias, "x_farebox": _x_farebox(rid, cost_micro, b)}
    elif ok and isinstance(answer, dict):
        answer = {"id": rid, "object": "chat.completion", "created": created, "model": alias, **answer,
                  "x_farebox": _x_farebox(rid, cost_micro, b)}
    return orjson.dumps({"id": f"batch_req_{batch_id.removeprefix('batch_')}_{number}", "custom_id": custom_id,
                         "response": {"status_code": status, "request_id": rid, "body": answer}, "error": None})


def _x_farebox(rid: str, cost_micro: int, b: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": rid, "deployment": b["deployment"], "cost": str(to_decimal(cost_micro)),
            "cost_micro": cost_micro, "currency": b["currency"], "price_version": b["price_version"],
            "service_tier": TIER}
