"""The scanner finds valid identifiers in every place a provider reads, and leaves look-alikes alone."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.privacy import detectors
from proxy.privacy.scanner import chat_texts, scan_chat, scan_text
from tests.proxy.privacy.prompts import aadhaar, card, prompt

AADHAAR_OK = "2345 6789 0124"  # Verhoeff-valid
AADHAAR_BAD = "2345 6789 0125"  # one digit off: fails Verhoeff
CARD_OK = "4111 1111 1111 1111"
CARD_BAD = "4111 1111 1111 1112"  # fails Luhn


def kinds(text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start:f.end]) for f in scan_text(text)]


@pytest.mark.parametrize("value,kind", [
    (AADHAAR_OK, "aadhaar"), ("234567890124", "aadhaar"),
    ("ABCPK1234F", "pan"),
    (CARD_OK, "card"), ("4111-1111-1111-1111", "card"), ("4111111111111111", "card"),
    ("HDFC0001234", "ifsc"),
    ("ravi.k@okaxis", "upi"),
    ("+91 98765 43210", "phone"), ("9876543210", "phone"), ("+44 20 7946 0958", "phone"), ("+1 415-555-2671", "phone"),
    ("priya.sharma@example.co.in", "email"),
    ("sk-proj-abcDEF1234567890abcdXYZ", "secret"), ("AKIAIOSFODNN7EXAMPLE", "secret"),
    ("ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "secret"), ("tok_9fK2LmQ8zP4xV7cR1tY6wB3n", "secret"),
])
def test_finds_each_kind_in_prose(value, kind):
    text = f"Please check {value}, thanks."
    assert kinds(text) == [(kind, value)]


@pytest.mark.parametrize("text", [
    f"aadhaar {AADHAAR_BAD}", f"card {CARD_BAD}", "pan ABCXK1234F",  # X is no PAN holder type
    "order 4521 shipped on 2024-03-11 for rs 1,250.00 at 10:45", "version 1.2.3456789",
    "call_the_function_with_the_longest_name_ever", "tok_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",  # low entropy
    "ABCDE", "user@", "<EMAIL_1>",
])
def test_look_alikes_are_left_alone(text):
    assert kinds(text) == []


def test_valid_and_invalid_side_by_side():
    text = f"good {AADHAAR_OK} bad {AADHAAR_BAD}; good {CARD_OK} bad {CARD_BAD}"
    assert kinds(text) == [("aadhaar", AADHAAR_OK), ("card", CARD_OK)]


def test_a_trailing_number_does_not_hide_a_card():
    text = f"card {CARD_OK} 2 items"
    assert kinds(text) == [("card", CARD_OK)]


def test_generated_identifiers_validate():
    rng = random.Random(5)
    for _ in range(200):
        a, c = aadhaar(rng), card(rng)
        assert kinds(f"a {a} c {c}") == [("aadhaar", a), ("card", c)]


def test_one_pass_has_one_group_per_candidate_shape():
    assert set(detectors.PATTERN.groupindex) == {"at", "secret", "tok", "pan", "ifsc", "num"}


BODY = {
    "model": "chat-default",
    "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": [{"type": "text", "text": "My PAN is ABCPK1234F"},
                                     {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"email": "a@b.com"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Card on file: 4111 1111 1111 1111"},
    ],
}


def test_scans_strings_parts_tool_arguments_and_results():
    result = scan_chat(BODY, max_chars=10_000)
    assert result.complete
    assert [(f.kind, f.path) for f in result.findings] == [
        ("pan", ("messages", 1, "content", 0, "text")),
        ("email", ("messages", 2, "tool_calls", 0, "function", "arguments")),
        ("card", ("messages", 3, "content")),
    ]
    assert result.counts == {"card": 1, "email": 1, "pan": 1}


def test_findings_hold_no_values():
    result = scan_chat(BODY, max_chars=10_000)
    assert "ABCPK1234F" not in repr(result)
    assert "a@b.com" not in repr(result)


def test_too_large_to_scan_is_reported_not_guessed():
    total = sum(len(t) for _, t in chat_texts(BODY))
    result = scan_chat(BODY, max_chars=total - 1)
    assert not result.complete and result.findings == () and result.counts == {}
    assert scan_chat(BODY, max_chars=total).complete


def test_malformed_messages_are_skipped():
    assert scan_chat({"messages": "nope"}, 100).findings == ()
    assert scan_chat({"messages": [1, {"content": 3}, {"tool_calls": [None]}]}, 100).findings == ()


# candidates() must be PATTERN.finditer() exactly: same matches, same groups, same order.
_PIECES = ["a", "k", "z", ".", "%", "+", "-", "_", "@", "(", ")", " ", ",", "\n", "0", "4", "9", "९", "A", "Z", "é",
           "sk-", "sk-proj-", "AKIA", "ASIA", "ghp_", "xoxb-", "AIza", "tok_", "ABCPK", "HDFC0", "1234", "+91 ",
           "4111 1111 1111 1111", "2345 6789 0124", "ravi.k@okaxis", "a.b@example.co.in", "9F2kLmQ8zP4xV7cR1tY6wB3n"]


def _spans(matches) -> list[tuple[str | None, int, int]]:
    return [(m.lastgroup, m.start(), m.end()) for m in matches]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60))
def test_candidates_are_exactly_the_one_pass_matches(pieces):
    text = "".join(pieces)
    assert _spans(detectors.candidates(text)) == _spans(detectors.PATTERN.finditer(text))


# ASCII text takes its own way to the starts (a map of character classes read backwards): every ASCII
# character class that way tells apart, at every position it can hold.
_ASCII_PIECES = [p for p in _PIECES if p.isascii()] + list("\t!\"#$&'*/:;<=>?[\\]^`{|}~Q") + ["((", "(a", "a(", "__", "@@"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_ASCII_PIECES), max_size=60))
def test_ascii_candidates_are_exactly_the_one_pass_matches(pieces):
    text = "".join(pieces)
    assert text.isascii()
    assert _spans(detectors.candidates(text)) == _spans(detectors.PATTERN.finditer(text))


def test_candidates_match_the_one_pass_on_realistic_prompts():
    rng = random.Random(11)
    for ids in (0, 6, 20):
        for _ in range(30):
            text = prompt(rng, 4096, ids)
            assert _spans(detectors.candidates(text)) == _spans(detectors.PATTERN.finditer(text))


# Pieces at the edges of where a candidate can start: a secret's prefix one character short of its
# length, 7 and 8 characters of a number, four capitals, a bare @, digits outside ASCII.
_EDGES = ["sk-" + "a1" * 10, "sk-" + "a1b" * 6 + "c", "tok_" + "9fK2" * 6, "tok_" + "9fK2" * 5 + "9fK", "AIza" + "x9_-" * 8 + "x9_",
          "ghp_", "xoxb-12345", "1234567", "12345678", "(1234567", "(98765) 43210", "+9", "+91 98765 43210",
          "98765-43210", "ABCD", "ABCD0", "ABCDE", "a@", "@b", "1@x.io", "९८७६५४३२१०", " ", " ", "-", "(", ")", "_"]


def _reference(text: str) -> list[tuple[str, int, int]]:
    """Findings straight from PATTERN.finditer(), every position tried."""
    found = []
    for m in detectors.PATTERN.finditer(text):
        group = "secret" if m.lastgroup == "tok" else m.lastgroup
        confirmed = detectors.confirm(group, m.group(group), m)
        if confirmed is not None:
            found.append((confirmed[0], m.start(), m.start() + confirmed[1]))
    return found


def test_findings_equal_the_every_position_reference_on_a_generated_corpus():
    rng = random.Random(13)
    texts = [prompt(rng, 4096, ids) for ids in (0, 6, 20) for _ in range(10)]
    texts += ["".join(rng.choice(_PIECES + _EDGES) for _ in range(rng.randrange(1, 40))) for _ in range(3000)]
    assert sum(bool(_reference(t)) for t in texts) > 1000
    for text in texts:
        assert [(f.kind, f.start, f.end) for f in scan_text(text)] == _reference(text), text
