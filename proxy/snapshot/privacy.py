"""The privacy policy as configured: data classes, which detector kind makes which class, the rule per class.

Values only, carried in the snapshot (``Snapshot.privacy``); what a request's findings mean under it is decided
in ``proxy.privacy.policy``. A ``PrivacyPolicy`` is a value: its ``content_hash`` is the SHA-256 of its canonical
JSON, carried beside ``version`` in every audit record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# The kinds the scanner (``proxy.privacy.detectors``) finds, by name.
AADHAAR, PAN, CARD, IFSC, UPI, PHONE, EMAIL, SECRET = (
    "aadhaar", "pan", "card", "ifsc", "upi", "phone", "email", "secret")
KINDS = (AADHAAR, PAN, CARD, IFSC, UPI, PHONE, EMAIL, SECRET)

DATA_CLASSES = ("public", "internal", "confidential", "restricted")
RANK = {name: i for i, name in enumerate(DATA_CLASSES)}
ACTIONS = ("redact", "refuse", "allow")
FAIL_MODES = ("closed", "open")


@dataclass(frozen=True, slots=True)
class ClassRule:
    action: str  # before a deployment that is not self-hosted: redact | refuse | allow
    fail: str  # when the prompt cannot be scanned within budget: closed | open


DEFAULT_KIND_CLASSES: Mapping[str, str] = MappingProxyType({
    AADHAAR: "confidential", PAN: "confidential", CARD: "confidential", SECRET: "restricted",
    IFSC: "internal", UPI: "confidential", PHONE: "confidential", EMAIL: "confidential",
})
DEFAULT_RULES: Mapping[str, ClassRule] = MappingProxyType({
    "public": ClassRule("allow", "open"),
    "internal": ClassRule("allow", "open"),
    "confidential": ClassRule("redact", "closed"),
    "restricted": ClassRule("refuse", "closed"),
})
DEFAULT_MAX_SCAN_CHARS = 512 * 1024  # ~128 ms of scanning at the 1 ms / 4 KB budget


@dataclass(frozen=True, slots=True)
class PrivacyPolicy:
    version: int = 1
    kind_classes: Mapping[str, str] = field(default_factory=lambda: DEFAULT_KIND_CLASSES)
    rules: Mapping[str, ClassRule] = field(default_factory=lambda: DEFAULT_RULES)
    max_scan_chars: int = DEFAULT_MAX_SCAN_CHARS

    def canonical(self) -> dict[str, Any]:
        return {
            "kind_classes": dict(sorted(self.kind_classes.items())),
            "classes": {c: {"action": r.action, "fail": r.fail} for c, r in sorted(self.rules.items())},
            "max_scan_chars": self.max_scan_chars,
        }

    @property
    def content_hash(self) -> str:
        last = _last_hashed
        if last[0] is self:  # every request's audit asks the live snapshot's policy: hash it once
            return last[1]
        raw = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(raw.encode()).hexdigest()
        _last_hashed[:] = [self, digest]  # the policy is frozen (its mappings read-only), so the hash stays true
        return digest


_last_hashed: list[Any] = [None, ""]  # [policy, its content_hash] of the policy hashed last


def policy_from_mapping(data: Mapping[str, Any] | None, version: int = 1) -> PrivacyPolicy:
    """Parse the YAML/admin ``privacy:`` block over the defaults; every problem is reported at once (ValueError)."""
    data = data or {}
    problems: list[str] = []
    for unknown in sorted(set(data) - {"kind_classes", "classes", "max_scan_chars"}):
        problems.append(f"privacy.{unknown}: unknown setting")
    kinds = dict(DEFAULT_KIND_CLASSES)
    for kind, cls in (data.get("kind_classes") or {}).items():
        if kind not in KINDS:
            problems.append(f"privacy.kind_classes.{kind}: unknown kind (one of {', '.join(KINDS)})")
        elif cls not in RANK:
            problems.append(f"privacy.kind_classes.{kind}: {cls!r} is not a data class {list(DATA_CLASSES)}")
        else:
            kinds[kind] = cls
    rules = dict(DEFAULT_RULES)
    for cls, rule in (data.get("classes") or {}).items():
        if cls not in RANK:
            problems.append(f"privacy.classes.{cls}: not a data class {list(DATA_CLASSES)}")
            continue
        rule = rule or {}
        action, fail = rule.get("action", rules[cls].action), rule.get("fail", rules[cls].fail)
        if action not in ACTIONS:
            problems.append(f"privacy.classes.{cls}.action: {action!r} is not one of {list(ACTIONS)}")
        if fail not in FAIL_MODES:
            problems.append(f"privacy.classes.{cls}.fail: {fail!r} is not one of {list(FAIL_MODES)}")
        rules[cls] = ClassRule(action, fail)
    max_chars = data.get("max_scan_chars", DEFAULT_MAX_SCAN_CHARS)
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars <= 0:
        problems.append(f"privacy.max_scan_chars: must be a positive integer, got {max_chars!r}")
        max_chars = DEFAULT_MAX_SCAN_CHARS
    if problems:
        raise ValueError("\n".join(problems))
    return PrivacyPolicy(version, MappingProxyType(kinds), MappingProxyType(rules), max_chars)


