"""The audit record carries kinds, counts, policy version/hash and a prompt hash: never a body or a value."""

from __future__ import annotations

import hashlib
import json

from proxy.privacy.audit import audit_of, prompt_hash, refused_audit
from proxy.privacy.policy import decide
from proxy.privacy.scanner import scan_chat
from proxy.snapshot.privacy import PrivacyPolicy

MESSAGES = [{"role": "user", "content": "Mail priya@example.com and ravi@example.org about PAN ABCPK1234F"}]


def test_audit_of_a_redaction():
    policy = PrivacyPolicy(version=4)
    scan = scan_chat({"messages": MESSAGES}, policy.max_scan_chars)
    decision = decide(policy, key_default="internal", header_class=None, kinds=scan.counts,
                      scan_complete=scan.complete, self_hosted=False)
    audit = audit_of(policy, decision, MESSAGES)
    fields = audit.to_event_fields()
    assert fields == {
        "privacy_kinds": {"email": 2, "pan": 1}, "privacy_action": "redact", "privacy_policy_version": 4,
        "privacy_policy_hash": policy.content_hash, "prompt_hash": prompt_hash(MESSAGES),
        "privacy_scan_skipped": False,
    }
    assert audit.summary() == "redacted 2 email, 1 pan"
    dumped = json.dumps(fields) + repr(audit)
    assert "priya" not in dumped and "ABCPK1234F" not in dumped


def test_prompt_hash_is_sha256_of_canonical_json():
    canonical = '[{"content":"héllo","role":"user"}]'
    assert prompt_hash([{"role": "user", "content": "héllo"}]) == hashlib.sha256(canonical.encode()).hexdigest()
    assert prompt_hash([{"content": "héllo", "role": "user"}]) == prompt_hash([{"role": "user", "content": "héllo"}])
    long = [{"role": "user", "content": "héllo wörld " * 800}]  # past one 2,047-byte update
    canonical = json.dumps(long, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert prompt_hash(long) == hashlib.sha256(canonical.encode()).hexdigest()
    assert prompt_hash([{"role": "user", "content": "hello"}]) != prompt_hash([{"role": "user", "content": "héllo"}])


def test_refused_audit():
    audit = refused_audit(PrivacyPolicy(), {"secret": 1}, MESSAGES)
    assert audit.action == "refuse" and audit.summary() == "refused for 1 secret"


def test_the_gateways_orjson_encoding_hashes_as_the_canonical_json():
    from proxy.privacy.audit import canonical_json
    from proxy.privacy.classify import orjson_canonical

    text = "".join(chr(c) for c in range(0x250)) + "\u2028\u2029\ufeff😀 \"q\" \\ /"
    messages = [{"role": "user", "content": text, "name": "n"},
                {"role": "assistant", "content": [{"type": "text", "text": text}], "tool_calls": None,
                 "n": -5, "ok": True}]
    assert orjson_canonical(messages) == canonical_json(messages)
    assert prompt_hash(messages, orjson_canonical) == prompt_hash(messages)
    big = [{"role": "user", "content": "x", "seed": 2**70}]  # orjson refuses it: the slow way, same bytes
    assert orjson_canonical(big) == canonical_json(big)
