"""Whether a new batch goes to a provider's batch API, to which deployment, and what it may cost. Pure.

A batch goes to a provider when it calls ``/v1/chat/completions``, every line names one alias, that alias says
``batch_via: provider`` (and ``ProxyOptions.provider_batches`` lets it), and one of the alias's deployments both has a
batch API (``proxy.upstream.batch_api``) and may take the key's requests: it receives the key's data-class
ceiling (lines are not scanned one by one on this path, so the deployment must accept the most sensitive class
the key may send), sits in the key's regions, is among the key's deployments, is not another team's provisioned
capacity. The first such deployment, in the alias's order, runs the whole batch: a batch sticks to it.

Each line is checked and translated exactly as a synchronous request to that deployment would be (its output cap
by the alias's rules, the dialect's own validation), and held at its worst case at the deployment's ``batch``
tier price (the standard price where none is configured). A line that cannot go gives a ``Problem`` and the
batch fails whole, as any batch with a bad line does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import orjson

from pricing.calibration import Estimator
from proxy.admission.plan import chat_input_estimates, hold
from proxy.batches.lines import Line, Problem
from proxy.batches.reserve import Native, line_cap
from proxy.errors import GatewayError
from proxy.routing.router import may_receive
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot
from proxy.upstream.batch_api import has_batch_api
from proxy.upstream.dialects import get_dialect

TIER = "batch"


@dataclass(frozen=True, slots=True)
class ProviderPlan:
    deployment: Deployment
    alias: Alias
    estimates: list[tuple[int, int]]  # (input estimate, output cap) per line, in order
    hold_micro: int  # the sum of the lines' worst cases
    price_version: int
    dearest_micro: int  # the dearest line's worst case (the per-request cap applies to each line)


NATIVE_ENDPOINT = "/v1/messages"  # a Message Batch of the Anthropic surface: sent as it is, to Anthropic only


def target(snapshot: Snapshot, key: KeyRecord, alias: Alias, native: bool = False) -> Deployment | None:
    """The deployment that runs the alias's provider batches for ``key`` (module docstring); None: none can.
    ``native``: the lines are Anthropic Messages requests, which only an Anthropic deployment takes as they are."""
    for dep_id in alias.deployments:
        dep = snapshot.deployments.get(dep_id)
        if (dep is not None and has_batch_api(dep) and (not native or dep.dialect == "anthropic")
                and may_receive(dep, key.data_class_ceiling)
                and (not key.regions or dep.region in key.regions)
                and (not key.deployments or dep.id in key.deployments)
                and dep.provisioned_team in (None, key.team)):
            return dep
    return None


def chosen(snapshot: Snapshot, key: KeyRecord, endpoint: str, lines: list[Line], allowed: bool) -> Alias | None:
    """The alias whose deployment runs this batch at the provider, or None: it runs through the gateway."""
    if not allowed or endpoint not in ("/v1/chat/completions", NATIVE_ENDPOINT) or not lines:
        return None
    names = {line.model for line in lines}
    alias = snapshot.aliases.get(next(iter(names))) if len(names) == 1 else None
    if alias is None or alias.batch_via != "provider" or alias.split is not None:
        return None
    return alias if target(snapshot, key, alias, endpoint == NATIVE_ENDPOINT) is not None else None


def plan(snapshot: Snapshot, key: KeyRecord, alias: Alias, lines: list[Line], estimator: Estimator,
         at: datetime, native: Native | None = None) -> ProviderPlan | list[Problem]:
    """``native``: the lines are Messages requests, checked by it and sent as they are (``NATIVE_ENDPOINT``)."""
    dep = target(snapshot, key, alias, native is not None)
    assert dep is not None  # (``chosen`` checked)
    dialect = get_dialect(dep.dialect)
    estimates: list[tuple[int, int]] = []
    problems: list[Problem] = []
    total, version, dearest = 0, 0, 0
    for line in lines:
        body = orjson.loads(line.body)
        try:
            body, cap = line_cap(body, alias, native)
            if native is None:
                dialect.validate(body, dep)
                dialect.chat_request(body, dep, None, max_output_tokens=cap)  # translates (again at submission)
            est = chat_input_estimates(estimator, body, key.key_id, [dep])[dep.id].tokens
            worst = hold(snapshot, [dep], est, cap, at, tier=TIER)
        except GatewayError as exc:
            problems.append(Problem(exc.code or "invalid_value", exc.message, line.number, exc.param))
            if len(problems) >= 20:
                break
            continue
        estimates.append((est, cap))
        total += worst.hold_micro
        dearest = max(dearest, worst.hold_micro)
        version = worst.price_version
    if problems:
        return problems
    return ProviderPlan(dep, alias, estimates, total, version, dearest)
