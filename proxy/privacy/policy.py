"""The privacy decision: what a request's findings mean under the configured policy (``proxy.snapshot.privacy``).

Data classes are ordered public < internal < confidential < restricted. A
request's class is the highest of the key's default, the caller's
``x-fb-data-class`` header and the classes of the kinds the scanner found.

Per class the policy says what happens before a deployment that is NOT
self-hosted sees the request (``redact`` | ``refuse`` | ``allow``) and what
happens when the prompt is too large to scan within budget (``fail``:
``closed`` refuses, ``open`` sends it unscanned with an audit flag). A
self-hosted deployment always gets the original body.

Invariants:
- ``decide`` is pure: no clock, no I/O; the same inputs give the same decision.
- Messages name kinds found, never values.
- A ``PrivacyPolicy`` is a value: its ``content_hash`` is the SHA-256 of its
  canonical JSON, carried beside ``version`` in every audit record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.snapshot.privacy import DATA_CLASSES, RANK, PrivacyPolicy

HEADER = "x-fb-data-class"


class PrivacyRefusal(Exception):
    """A request the policy turns away; knows its HTTP status and OpenAI error code.

    400 ``invalid_data_class`` (malformed header), 403 ``data_class_not_allowed``
    (above the key's ceiling), 403 ``data_class_refused`` (the class's action is
    refuse), 413 ``prompt_not_scannable`` (too large to scan, class fails closed).
    """

    def __init__(self, message: str, *, status: int, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.code, self.param = message, status, code, param


def parse_data_class_header(value: str | None) -> str | None:
    """The caller's ``x-fb-data-class`` tag, or None when absent; malformed is a 400 naming the header."""
    if value is None:
        return None
    tag = value.strip().lower()
    if tag not in RANK:
        raise PrivacyRefusal(f"{HEADER} must be one of {list(DATA_CLASSES)}, got {value!r}.",
                             status=400, code="invalid_data_class", param=HEADER)
    return tag


@dataclass(frozen=True, slots=True)
class Decision:
    data_class: str  # the request's class: key default, header and findings
    declared_class: str  # key default and header only: what remains once findings are redacted
    action: str  # for this deployment: redact | allow (refusals raise)
    kinds: Mapping[str, int]  # kind -> count of findings
    scan_skipped: bool  # too large to scan; sent anyway because the class fails open

    @property
    def sent_class(self) -> str:
        """The class of what the deployment actually receives: redaction removes what the findings added."""
        return self.declared_class if self.action == "redact" else self.data_class


@dataclass(frozen=True, slots=True)
class Sides:
    """A request's decision for each side of the network, decided once before routing."""

    inside: Decision  # self-hosted deployments
    outside: Decision | None  # the rest; None when the policy refuses them
    outside_refusal: PrivacyRefusal | None

    def for_deployment(self, self_hosted: bool) -> Decision:
        """The decision for one deployment; raises the outside refusal for a non-self-hosted one."""
        if self_hosted:
            return self.inside
        if self.outside is None:
            assert self.outside_refusal is not None
            raise self.outside_refusal
        return self.outside


def decide_sides(
    policy: PrivacyPolicy, *, key_default: str, header_class: str | None, kinds: Mapping[str, int],
    scan_complete: bool, ceiling: str = "restricted",
) -> Sides:
    """Both decisions; raises only what refuses every deployment (ceiling, unscannable and failing closed)."""
    def side(self_hosted: bool) -> Decision:
        return decide(policy, key_default=key_default, header_class=header_class, kinds=kinds,
                      scan_complete=scan_complete, self_hosted=self_hosted, ceiling=ceiling)

    inside = side(True)
    try:
        return Sides(inside, side(False), None)
    except PrivacyRefusal as refusal:
        return Sides(inside, None, refusal)


def _top(*classes: str) -> str:
    return max(classes, key=RANK.__getitem__)


def _named(kinds: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"


def decide(
    policy: PrivacyPolicy, *, key_default: str, header_class: str | None, kinds: Mapping[str, int],
    scan_complete: bool, self_hosted: bool, ceiling: str = "restricted",
) -> Decision:
    """The class of a request and what to do before sending it to one deployment; raises ``PrivacyRefusal``.

    ``kinds`` counts the scanner's findings by kind. The decision depends on the
    deployment only through ``self_hosted``: call it again when failover moves to
    a deployment on the other side.
    """
    declared = _top(key_default, header_class or key_default)
    if not scan_complete:
        rule = policy.rules[declared]
        if rule.fail == "closed":
            raise PrivacyRefusal(
                f"The prompt is too large to scan for personal data (over {policy.max_scan_chars} characters) "
                f"and data of class '{declared}' is not sent unscanned.", status=413, code="prompt_not_scannable")
        if RANK[declared] > RANK[ceiling]:
            raise _above_ceiling(declared, ceiling, kinds)
        return Decision(declared, declared, "allow", {}, scan_skipped=True)
    found = [policy.kind_classes[k] for k in kinds]
    cls = _top(declared, *found)
    if RANK[cls] > RANK[ceiling]:
        raise _above_ceiling(cls, ceiling, kinds)
    if self_hosted:
        return Decision(cls, declared, "allow", dict(kinds), scan_skipped=False)
    action = policy.rules[cls].action
    if action == "refuse":
        raise PrivacyRefusal(
            f"This request carries data of class '{cls}' (found: {_named(kinds)}), which is not sent to a "
            "deployment outside your network.", status=403, code="data_class_refused")
    if action == "redact" and not kinds:
        action = "allow"  # declared class with nothing found: nothing to redact
    return Decision(cls, declared, action, dict(kinds), scan_skipped=False)


def _above_ceiling(cls: str, ceiling: str, kinds: Mapping[str, int]) -> PrivacyRefusal:
    return PrivacyRefusal(
        f"Data class '{cls}' (found: {_named(kinds)}) is above this key's ceiling '{ceiling}'.",
        status=403, code="data_class_not_allowed")
