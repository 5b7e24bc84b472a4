"""Audit without bodies: what the privacy step did to a request, as the values its events carry.

Invariants:
- Nothing here holds a prompt, a found value or a placeholder map: only kinds
  and counts, the policy's version and hash, and a hash of the prompt.
- ``prompt_hash`` is the SHA-256 of the canonical JSON of the messages as the
  caller sent them (keys sorted, no whitespace, UTF-8), so an investigator
  holding a suspected prompt can recompute it. ``canonical_json`` is that
  encoding; a caller may pass a faster encoder producing the same bytes
  (``proxy.privacy.classify`` passes orjson's, equal for the strings, integers,
  booleans, nulls, lists and objects messages hold).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.hashing import sha256_hex
from proxy.privacy.policy import Decision
from proxy.snapshot.privacy import PrivacyPolicy

Canonical = Callable[[Any], bytes]


def canonical_json(messages: Any) -> bytes:
    """Keys sorted, no whitespace, UTF-8."""
    return json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def prompt_hash(messages: Any, canonical: Canonical = canonical_json) -> str:
    """SHA-256 (hex) of the canonical JSON of ``messages``."""
    return sha256_hex(canonical(messages))


@dataclass(frozen=True, slots=True)
class PrivacyAudit:
    """The privacy fields of ``request.admitted``."""

    kinds: Mapping[str, int]  # kind -> findings, e.g. {"email": 2}
    action: str  # redact | allow | refuse
    policy_version: int
    policy_hash: str
    prompt_hash: str
    scan_skipped: bool  # too large to scan, sent because its class fails open

    def to_event_fields(self) -> dict[str, Any]:
        return {
            "privacy_kinds": dict(sorted(self.kinds.items())),
            "privacy_action": self.action,
            "privacy_policy_version": self.policy_version,
            "privacy_policy_hash": self.policy_hash,
            "prompt_hash": self.prompt_hash,
            "privacy_scan_skipped": self.scan_skipped,
        }

    def summary(self) -> str:
        """A line for humans, e.g. "redacted 2 email, 1 pan"."""
        what = ", ".join(f"{n} {k}" for k, n in sorted(self.kinds.items())) or "nothing"
        verb = {"redact": "redacted", "refuse": "refused for", "allow": "found"}[self.action]
        return f"{verb} {what}" + (" (scan skipped: too large)" if self.scan_skipped else "")


def audit_of(policy: PrivacyPolicy, decision: Decision, messages: Any,
             canonical: Canonical = canonical_json) -> PrivacyAudit:
    """The audit record of a decision (``messages`` as the caller sent them, before any redaction)."""
    return PrivacyAudit(
        kinds=dict(decision.kinds), action=decision.action, policy_version=policy.version,
        policy_hash=policy.content_hash, prompt_hash=prompt_hash(messages, canonical),
        scan_skipped=decision.scan_skipped,
    )


def refused_audit(policy: PrivacyPolicy, kinds: Mapping[str, int], messages: Any) -> PrivacyAudit:
    """The audit record of a request the policy refused (for a log line or a refusal metric)."""
    return PrivacyAudit(kinds=dict(kinds), action="refuse", policy_version=policy.version,
                        policy_hash=policy.content_hash, prompt_hash=prompt_hash(messages), scan_skipped=False)
