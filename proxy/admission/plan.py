"""What a request may cost before it is sent: estimates, output cap, the hold.

Pure. The hold prices the estimate at the most expensive candidate (none is
chosen yet), so settlement only ever releases money, except when the input
estimate was low (recorded as overrun at settlement).
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from pricing.calibration import Estimate, Estimator
from pricing.errors import PricingError
from pricing.rating import top_rates, worst_case_at
from pricing.tokenizer import encoding_for_model
from pricing.tokens import estimate_tokens
from proxy.errors import GatewayError, InvalidRequest
from proxy.metering.settlement import Plan
from proxy.snapshot import Alias, Deployment, Snapshot


def output_cap(alias: Alias, requested: int | None, param: str = "max_completion_tokens") -> int:
    """The caller's cap, else the alias default; never the model's maximum."""
    if requested is None:
        return alias.default_max_output_tokens
    if requested > alias.max_output_tokens_cap:
        raise InvalidRequest(
            f"'{param}' is {requested}, above this alias's limit of {alias.max_output_tokens_cap}.",
            param=param,
            code="invalid_value",
        )
    return requested


def chat_input_estimates(estimator: Estimator, body: dict, key_id: str, cands: Sequence[Deployment]) -> dict[str, Estimate]:
    """Input tokens per candidate: exact where the model's tokenizer is known, else calibrated chars.

    Candidates sharing a tokenizer (or, for the chars path, a provider) share one count.
    """
    out: dict[str, Estimate] = {}
    seen: dict[tuple[str | None, str | None], Estimate] = {}
    for dep in cands:
        encoding = encoding_for_model(dep.model, dep.tokenizer)
        family = None if encoding else dep.provider
        kind = (encoding, family)
        if kind not in seen:
            seen[kind] = estimator.estimate(body, key_id=key_id, model_family=family, encoding=encoding)
        out[dep.id] = seen[kind]
    return out


def embeddings_input_estimate(texts: Sequence[str]) -> int:
    return sum(estimate_tokens(len(t)) for t in texts)


def hold(
    snapshot: Snapshot,
    candidates: Sequence[Deployment],
    est_input: int,
    max_output: int,
    at: datetime,
    tier: str | None = None,
) -> Plan:
    """The hold: the worst case over the candidates at the tier asked for (its price where a deployment has one,
    else the standard one). A provider serving a dearer tier than asked is an overrun, recorded at settlement."""
    return holds(snapshot, candidates, est_input, max_output, at, tier)[0]


def holds(snapshot: Snapshot, candidates: Sequence[Deployment], est_input: int, max_output: int, at: datetime,
          tier: str | None = None, *outputs: int) -> tuple[Plan, ...]:
    """``hold`` at ``max_output``, then at each of ``outputs`` (a learned output cap), priced once."""
    try:
        version = snapshot.price_book.in_force(at)
        rates = top_rates([version.served(d.id, tier) for d in candidates],
                          lambda p: snapshot.fx.rate(p.currency, snapshot.currency, at))
        return tuple(Plan(est_input, out, worst_case_at(est_input, out, rates), version.version)
                     for out in (max_output, *outputs))
    except PricingError as exc:
        # Never serve what cannot be priced: refuse before any upstream byte.
        raise GatewayError(f"This request cannot be priced: {exc}.", status=503, code="pricing_unavailable") from None
