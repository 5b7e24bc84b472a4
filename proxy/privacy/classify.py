"""The classify step of a chat request: scan, decide both sides, redact once.

A thin shell over the pure core in ``proxy/privacy/``: it turns a
``PrivacyRefusal`` into an OpenAI-shaped error and holds what later steps
need per deployment (the body to send, the map to restore the answer with).

Invariants:
- The redacted body and its ``Redaction`` live only in this object, i.e. in
  the request's memory; neither is logged nor put in an event.
- With no findings the body is not copied: every deployment gets
  ``call.body`` and nothing is restored.
- The choice is per deployment (``body_for``), so failover from a
  self-hosted deployment to an outside one (or back) sends the right body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import GatewayError, PermissionDenied
from proxy.privacy.audit import PrivacyAudit, audit_of, canonical_json
from proxy.privacy.policy import PrivacyRefusal, Sides, decide_sides, parse_data_class_header
from proxy.privacy.redact import ChunkRestorer, Redaction, redact_chat
from proxy.privacy.scanner import ScanResult, scan_chat, scan_text
from proxy.routing.chain import Chain
from proxy.snapshot import Deployment, KeyRecord
from proxy.snapshot.privacy import PrivacyPolicy


class PrivacyError(GatewayError):
    """A request the privacy policy turns away (status and code from the policy)."""

    type = "invalid_request_error"


def gateway_error(refusal: PrivacyRefusal) -> PrivacyError:
    return PrivacyError(refusal.message, status=refusal.status, code=refusal.code, param=refusal.param)


@dataclass(slots=True)
class Classified:
    """One request's privacy decision and, when redaction applies, its redacted body and map."""

    sides: Sides
    redacted_body: dict[str, Any] | None = None
    redaction: Redaction | None = None

    @property
    def data_class(self) -> str:
        """The request's class (key default, header and findings)."""
        return self.sides.inside.data_class

    @property
    def outside_class(self) -> str | None:
        """What a deployment outside the network receives, or None when the policy refuses them."""
        return None if self.sides.outside is None else self.sides.outside.sent_class

    def refusal(self) -> PrivacyError | None:
        """The error that refuses every outside deployment, if any."""
        r = self.sides.outside_refusal
        return None if r is None else gateway_error(r)

    def audit(self, policy: PrivacyPolicy, first: Deployment, messages: Any) -> PrivacyAudit:
        """The audit record for the events, as decided for the first candidate."""
        return audit_of(policy, self.sides.for_deployment(first.self_hosted), messages, orjson_canonical)

    def redacts(self, dep: Deployment) -> bool:
        """Whether ``dep`` gets the redacted body (its answer must then be restored)."""
        return self.redaction is not None and not dep.self_hosted

    def body_for(self, dep: Deployment, body: dict[str, Any]) -> dict[str, Any]:
        if self.redacts(dep):
            assert self.redacted_body is not None
            return self.redacted_body
        return body

    def restorer_for(self, dep: Deployment) -> ChunkRestorer | None:
        """What puts the redacted values back into ``dep``'s streamed chunks (None: it saw the original)."""
        return ChunkRestorer(self.redaction) if self.redacts(dep) and self.redaction else None


def classify_chat(policy: PrivacyPolicy, key: KeyRecord, header: str | None, body: dict[str, Any]) -> Classified:
    """Scan the chat body and decide; raises ``PrivacyError`` when every deployment is refused."""
    try:
        hdr = parse_data_class_header(header)
        scan = scan_chat(body, policy.max_scan_chars)
        sides = _decide(policy, key, hdr, scan)
    except PrivacyRefusal as refusal:
        raise gateway_error(refusal) from None
    out = Classified(sides)
    if sides.outside is not None and sides.outside.action == "redact":
        out.redacted_body, out.redaction = redact_chat(body, scan.findings)
    return out


def classify_texts(policy: PrivacyPolicy, key: KeyRecord, header: str | None, texts: Sequence[str]) -> Classified:
    """Embeddings input: classify and refuse; nothing is redacted (an outside redact decision excludes them)."""
    try:
        hdr = parse_data_class_header(header)
        total = sum(len(t) for t in texts)
        if total > policy.max_scan_chars:
            scan = ScanResult((), complete=False, scanned_chars=0)
        else:
            counts: dict[str, int] = {}
            for i, text in enumerate(texts):
                for f in scan_text(text, ("input", i)):
                    counts[f.kind] = counts.get(f.kind, 0) + 1
            scan = ScanResult((), complete=True, scanned_chars=total, counts=dict(sorted(counts.items())))
        sides = _decide(policy, key, hdr, scan)
    except PrivacyRefusal as refusal:
        raise gateway_error(refusal) from None
    if sides.outside is not None and sides.outside.action == "redact":
        found = ", ".join(f"{n} {k}" for k, n in sides.outside.kinds.items())
        sides = Sides(sides.inside, None, PrivacyRefusal(
            f"Embeddings input carries data of class '{sides.outside.data_class}' (found: {found}), which is "
            "redacted before a deployment outside your network; embeddings input is not redacted, so it is "
            "not sent there.", status=403, code="data_class_refused"))
    return Classified(sides)


def _decide(policy: PrivacyPolicy, key: KeyRecord, hdr: str | None, scan: ScanResult) -> Sides:
    return decide_sides(policy, key_default=key.default_data_class, header_class=hdr, kinds=scan.counts,
                        scan_complete=scan.complete, ceiling=key.data_class_ceiling)


async def routed(privacy: Classified, planning: Awaitable[Chain]) -> Chain:
    """The chain, or the privacy refusal when the policy's exclusion of outside deployments left none."""
    try:
        return await planning
    except PermissionDenied as exc:
        refusal = privacy.refusal()
        if exc.code == "data_class_not_routable" and refusal is not None:
            raise refusal from None
        raise


def orjson_canonical(messages: Any) -> bytes:
    """``canonical_json``'s bytes, by orjson (several times faster); what orjson refuses goes the slow way."""
    try:
        return orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return canonical_json(messages)
