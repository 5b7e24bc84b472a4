"""A batch farebox runs itself, admitted whole: every line's hold is taken when the batch is created. Pure.

A provider batch is one request of the ledger (``provider_money``). A batch the gateway runs is many: each line
is a request of its own, routed, metered and settled on whichever process runs it. So its whole-batch admission
is a hold per line, all funded at creation: the budget port funds the sum once (the batch is refused 429 with
nothing kept when it does not fit) and one ``request.admitted`` per line (request id ``<batch>-<n>``, the line's
first run) records its share, in the same event-loop turn. No ledger learns a new event: each line's hold is an
ordinary hold, closed by the line's own ``request.settled`` when it runs, wherever it runs.

* A line's hold is its worst case over every deployment it could reach (its alias's, a split's variants', the
  fallback alias's) at the standard price; the line's run uses that hold instead of asking the budget again
  (``x-fb-batch-held``), so a batch never waits on, or is refused by, money spent after it was admitted.
* A line the gateway turned away before admitting it (busy, paused, its rate limits) keeps its id and its hold.
  A line whose run closed its hold and must run again (the provider said "not now" after admission) runs under a
  new id and is admitted on its own, as any request (never past the budget; it may wait for money).
* When the batch ends, the holds of its lines that never ran (cancelled, expired) are released: one
  ``request.settled`` each, charging nothing (``released``). A line left claimed by a process that died is not
  released (it may have been served): its hold expires, charged in full, as any request's that never settled.
* A line that cannot be held (its body would be refused anyway) is held at nothing and admitted on its own when
  it runs (it is refused there, with the error its own request would get).

The holds live for the window and a day more (``HOLD_MARGIN_S``): unrun lines are released by the first process
that sees the batch end, and only a gateway down for a day past the window lets them expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import orjson

from ledger.admission import exceeds_cost_cap
from ledger.events import RequestAdmitted, RequestSettled
from ledger.request_events import BATCH_TAG, PRIORITY_TAG, RESERVED_TAG
from ledger.usage import TokenUsage
from pricing.calibration import Estimator
from proxy.admission.plan import chat_input_estimates, embeddings_input_estimate, hold, output_cap
from proxy.batches.lines import Line
from proxy.errors import GatewayError
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot

HOLD_MARGIN_S = 86_400
EMBEDDINGS = "/v1/embeddings"

Native = Callable[[dict], tuple[dict, int | None]]
"""A Messages line's check (raising ``GatewayError``): its body in chat form (for the estimate) and its output cap."""


@dataclass(frozen=True, slots=True)
class Reservation:
    holds: list[int | None]  # per line, in order: its hold (None: held at nothing, admitted on its own)
    estimates: list[tuple[int, int]]  # per line: (input estimate, output cap); (0, 0) where not held
    total: int
    dearest: int  # the dearest line's worst case: the per-request cap applies to each line
    price_version: int
    est_input: int
    max_output: int


def reach(snapshot: Snapshot, alias: Alias) -> list[Deployment]:
    """Every deployment a line naming ``alias`` could be served by: its own, its split's variants', its
    fallback alias's (one level each: what routing follows)."""
    names = [alias.name, *(v.alias for v in (alias.split.variants if alias.split else ()))]
    if alias.fallback_alias:
        names.append(alias.fallback_alias)
    out: dict[str, Deployment] = {}
    for name in names:
        a = snapshot.aliases.get(name)
        for dep_id in a.deployments if a is not None else ():
            if (dep := snapshot.deployments.get(dep_id)) is not None:
                out[dep.id] = dep
    return list(out.values())


def plan(snapshot: Snapshot, key: KeyRecord, endpoint: str, lines: list[Line], estimator: Estimator, at: datetime,
         native: Native | None = None, cap_micro: int | None = None) -> Reservation:
    """Each line's worst case (module docstring); ``native``: the lines are Messages requests; a line dearer than
    the per-request cap ``cap_micro`` is held at nothing (its run is refused for it, as its own request would be)."""
    holds: list[int | None] = []
    estimates: list[tuple[int, int]] = []
    total = dearest = version = est_sum = out_sum = 0
    for line in lines:
        alias = snapshot.aliases.get(line.model)
        deps = reach(snapshot, alias) if alias is not None else []
        try:
            if not deps or alias is None:
                raise GatewayError("no deployment", status=400)
            est, cap = _estimate(orjson.loads(line.body), endpoint, alias, key, deps, estimator, native)
            worst = hold(snapshot, deps, est, cap, at)
            if exceeds_cost_cap(worst.hold_micro, cap_micro):
                raise GatewayError("above the per-request cap", status=400)
        except (GatewayError, ValueError, TypeError, AttributeError):  # refused when it runs: held at nothing
            holds.append(None)
            estimates.append((0, 0))
            continue
        holds.append(worst.hold_micro)
        estimates.append((est, cap))
        total += worst.hold_micro
        dearest = max(dearest, worst.hold_micro)
        version, est_sum, out_sum = worst.price_version, est_sum + est, out_sum + cap
    return Reservation(holds, estimates, total, dearest, version, est_sum, out_sum)


def _estimate(body: Any, endpoint: str, alias: Alias, key: KeyRecord, deps: list[Deployment], estimator: Estimator,
              native: Native | None) -> tuple[int, int]:
    if endpoint == EMBEDDINGS:
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else [t if isinstance(t, str) else " " * 4 * len(t) for t in raw]
        return embeddings_input_estimate(texts), 0
    body, cap = line_cap(body, alias, native)
    estimates = chat_input_estimates(estimator, body, key.key_id, deps)
    return max(e.tokens for e in estimates.values()), cap


def line_cap(body: Any, alias: Alias, native: Native | None) -> tuple[Any, int]:
    """A chat or Messages line's body in chat form and its output cap (the alias's cap over what it asks);
    ``native`` raises ``GatewayError`` for a Messages line it refuses."""
    if native is not None:
        body, asked = native(body)
    else:
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
    return body, output_cap(alias, asked if isinstance(asked, int) and not isinstance(asked, bool) else None)


def line_id(batch_id: str, number: int) -> str:
    """The line's first run's request id: the hold's (``proxy.batches.runner.line_request_id`` at generation 0)."""
    return f"{batch_id}-{number}"


def block(key: KeyRecord, scopes: list[str], currency: str, price_version: int, window_s: int) -> dict[str, Any]:
    """The batch's ``reserved`` block: what releasing its unrun lines needs, whatever the key or config become."""
    return {"team": key.team, "key_id": key.key_id, "scopes": scopes, "currency": currency,
            "price_version": price_version, "hold_ttl_s": window_s + HOLD_MARGIN_S, "release": None}


def admitted(batch_id: str, line: Line, held: int, estimate: tuple[int, int], r: dict[str, Any], key: KeyRecord,
             snapshot: Snapshot, api: str, pod: str, leases: dict[str, str], now: datetime) -> RequestAdmitted:
    """A line's share of the batch's admission: its hold on every scope its request touches."""
    return RequestAdmitted(
        time=now, request_id=line_id(batch_id, line.number), team=key.team, key_id=key.key_id,
        business_unit=key.business_unit or "", app=key.app, run_id=None, alias=line.model,
        data_class=key.data_class_ceiling, est_input_tokens=estimate[0], max_output_tokens=estimate[1], holds=dict.fromkeys(r["scopes"], held), currency=r["currency"],
        price_version=r["price_version"], pod=pod, hold_ttl_s=r["hold_ttl_s"], stream=False, leases=leases,
        cost_centre=snapshot.cost_centre_of(key.team, key.app),
        tags={BATCH_TAG: batch_id, PRIORITY_TAG: "batch", RESERVED_TAG: "1"}, api=api)


def released(batch_id: str, number: int, held: int, r: dict[str, Any], now: datetime) -> RequestSettled:
    """An unrun line's hold given back whole: charged nothing (499: the batch ended without it)."""
    scopes = r["scopes"]
    return RequestSettled(
        time=now, request_id=line_id(batch_id, number), team=r["team"], final_status=499, attempts=0,
        deployment=None, usage=TokenUsage(), cost_micro=0, currency=r["currency"],
        cost_by_scope=dict.fromkeys(scopes, 0), hold_released=dict.fromkeys(scopes, held), overrun_micro=0,
        cache_hit=False, latency_ms=0, cache_saved_micro=0, cache_kind=None, cache_similarity=None)
