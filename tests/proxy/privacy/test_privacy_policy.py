"""The policy decides a request's class and action from key, header and findings; refusals name kinds only."""

from __future__ import annotations

import pytest

from proxy.privacy.policy import PrivacyRefusal, decide, decide_sides, parse_data_class_header
from proxy.snapshot.privacy import DEFAULT_MAX_SCAN_CHARS, PrivacyPolicy, policy_from_mapping

POLICY = PrivacyPolicy()


def run(kinds=None, key_default="internal", header=None, complete=True, self_hosted=False, ceiling="restricted",
        policy=POLICY):
    return decide(policy, key_default=key_default, header_class=header, kinds=kinds or {}, scan_complete=complete,
                  self_hosted=self_hosted, ceiling=ceiling)


def test_nothing_found_keeps_the_declared_class_and_allows():
    d = run()
    assert (d.data_class, d.declared_class, d.action, d.kinds, d.scan_skipped) == ("internal", "internal", "allow", {},
                                                                                  False)


def test_header_raises_the_class_never_lowers_it():
    assert run(header="confidential").data_class == "confidential"
    assert run(key_default="confidential", header="public").data_class == "confidential"


def test_pii_found_is_redacted_before_an_external_deployment():
    d = run({"aadhaar": 1, "email": 2})
    assert (d.data_class, d.declared_class, d.action, d.kinds) == ("confidential", "internal", "redact",
                                                                   {"aadhaar": 1, "email": 2})


def test_self_hosted_gets_the_original():
    d = run({"card": 1}, self_hosted=True)
    assert (d.data_class, d.action) == ("confidential", "allow")


def test_restricted_is_refused_outside_naming_kinds_only():
    with pytest.raises(PrivacyRefusal) as exc:
        run({"secret": 1, "pan": 2})
    assert exc.value.status == 403 and exc.value.code == "data_class_refused"
    assert "1 secret" in exc.value.message and "2 pan" in exc.value.message
    assert run({"secret": 1}, self_hosted=True).data_class == "restricted"


def test_above_the_key_ceiling_is_403_even_self_hosted():
    with pytest.raises(PrivacyRefusal) as exc:
        run({"card": 1}, ceiling="internal", self_hosted=True)
    assert exc.value.status == 403 and exc.value.code == "data_class_not_allowed" and "1 card" in exc.value.message


def test_declared_confidential_with_nothing_found_is_allowed_not_redacted():
    assert run(key_default="confidential").action == "allow"


def test_too_large_fails_closed_or_open_per_declared_class():
    with pytest.raises(PrivacyRefusal) as exc:
        run(key_default="confidential", complete=False)
    assert exc.value.status == 413 and exc.value.code == "prompt_not_scannable"
    d = run(key_default="public", complete=False)
    assert (d.action, d.scan_skipped, d.data_class) == ("allow", True, "public")


def test_allow_per_class_is_configurable():
    policy = policy_from_mapping({"classes": {"confidential": {"action": "allow"}},
                                  "kind_classes": {"email": "internal"}}, version=3)
    assert run({"email": 1}, policy=policy).data_class == "internal"
    assert run({"card": 1}, policy=policy).action == "allow"


@pytest.mark.parametrize("value,expected", [(None, None), ("Confidential ", "confidential"), ("public", "public")])
def test_header_parses(value, expected):
    assert parse_data_class_header(value) == expected


@pytest.mark.parametrize("value", ["", "secret", "top-secret", "1"])
def test_malformed_header_is_400_naming_it(value):
    with pytest.raises(PrivacyRefusal) as exc:
        parse_data_class_header(value)
    assert exc.value.status == 400 and exc.value.param == "x-fb-data-class" and "x-fb-data-class" in exc.value.message


def test_policy_value_has_version_and_content_hash():
    a, b = PrivacyPolicy(), policy_from_mapping({}, version=1)
    assert a.content_hash == b.content_hash and len(a.content_hash) == 64
    changed = policy_from_mapping({"classes": {"internal": {"fail": "closed"}}}, version=2)
    assert changed.content_hash != a.content_hash and changed.version == 2
    assert a.max_scan_chars == DEFAULT_MAX_SCAN_CHARS


def test_bad_policy_reports_every_problem_at_once():
    with pytest.raises(ValueError) as exc:
        policy_from_mapping({"kind_classes": {"dna": "restricted", "email": "top"},
                             "classes": {"secretish": {}, "public": {"action": "drop", "fail": "maybe"}},
                             "max_scan_chars": -1, "extra": 1})
    lines = str(exc.value).splitlines()
    assert len(lines) == 7
    assert any("privacy.kind_classes.dna" in x for x in lines) and any("privacy.extra" in x for x in lines)


def test_sides_give_the_class_each_deployment_receives():
    sides = decide_sides(POLICY, key_default="internal", header_class=None, kinds={"email": 1}, scan_complete=True)
    assert sides.for_deployment(True).sent_class == "confidential"
    assert sides.for_deployment(False).sent_class == "internal" and sides.for_deployment(False).action == "redact"
    secret = decide_sides(POLICY, key_default="internal", header_class=None, kinds={"secret": 1}, scan_complete=True)
    assert secret.for_deployment(True).sent_class == "restricted"
    with pytest.raises(PrivacyRefusal) as exc:
        secret.for_deployment(False)
    assert exc.value.code == "data_class_refused"
    with pytest.raises(PrivacyRefusal):
        decide_sides(POLICY, key_default="internal", header_class=None, kinds={"secret": 1}, scan_complete=True,
                     ceiling="confidential")


def test_content_hash_is_per_policy_when_policies_alternate():
    a, b = PrivacyPolicy(), policy_from_mapping({"max_scan_chars": 1000})
    first_a, first_b = a.content_hash, b.content_hash
    assert first_a != first_b
    assert (a.content_hash, b.content_hash, a.content_hash) == (first_a, first_b, first_a)
