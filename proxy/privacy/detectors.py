"""What the scanner looks for: one compiled alternation, and the validators that confirm a candidate.

Invariants:
- ``PATTERN`` is the only regex run over prompt text: one pass, one named group
  per candidate shape. Validators run only on what it matched.
- ``name@x`` shares one group (``at``): a dotted domain with a TLD makes an
  email, a bare handle (``name@okaxis``) a UPI id.
- Numbers share one candidate group (``num``): a run of digits is a card (13-19
  digits, Luhn), an Aadhaar (12 digits, Verhoeff, via python-stdnum) or a phone
  number (libphonenumber), tried in that order. A look-alike that fails every
  check is not a finding.
- Validators see the candidate text and return a kind or None; they never log it.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import phonenumbers
from stdnum import luhn
from stdnum.in_ import aadhaar, pan

AADHAAR, PAN, CARD, IFSC, UPI, PHONE, EMAIL, SECRET = (
    "aadhaar", "pan", "card", "ifsc", "upi", "phone", "email", "secret")
KINDS = (AADHAAR, PAN, CARD, IFSC, UPI, PHONE, EMAIL, SECRET)

_SECRET = (
    r"sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{20,}"  # OpenAI / Anthropic / Stripe-style keys
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack tokens
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API keys
    r"|(?P<tok>[A-Za-z]{2,12}[_\-][A-Za-z0-9_\-]{24,})"  # prefix + long token: confirmed by entropy
)

# One shared look-behind: every candidate starts a token, so inside a word the pass costs one check per character.
PATTERN = re.compile(
    r"(?<![\w.%+\-@])(?:"
    r"(?P<at>[A-Za-z0-9][A-Za-z0-9._%+\-]{0,255}@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*(?![\w@\-]|\.\w))"
    r"|(?P<secret>(?:" + _SECRET + r")(?![\w\-]))"
    r"|(?P<pan>[A-Z]{5}[0-9]{4}[A-Z](?![\w]))"
    r"|(?P<ifsc>[A-Z]{4}0[A-Z0-9]{6}(?![\w]))"
    r"|(?P<num>(?:\+\d{1,3}[ \-]?)?\(?\d(?:[ \-]|\) ?)?(?:\d(?:[ \-]|\) ?)?){6,18}\d(?![\w]|[.,]\d))"
    r")"
)

_EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,24}")
_UPI_HANDLE = re.compile(r"[A-Za-z][A-Za-z0-9]{1,63}")
_NON_DIGIT = re.compile(r"\D")
_SEPARATOR = re.compile(r"[ \-)]+")
_MIN_ENTROPY_BITS = 3.5  # per character; English words in snake_case sit well below


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_random(token: str) -> bool:
    body = token.split("_", 1)[-1] if "_" in token else token.split("-", 1)[-1]
    has_digit = any(ch.isdigit() for ch in body)
    has_alpha = any(ch.isalpha() for ch in body)
    return has_digit and has_alpha and _entropy(body) >= _MIN_ENTROPY_BITS


def _phone(text: str) -> bool:
    if not text.startswith("+"):
        # Indian numbers without a country code: 10 digits, 0 + 10, or 91 + 10. Anything else (order
        # numbers, dates, amounts) is rejected before the comparatively slow parse.
        digits = _NON_DIGIT.sub("", text)
        n = len(digits)
        if not (n == 10 or (n == 11 and digits[0] == "0") or (n == 12 and digits.startswith("91"))):
            return False
    try:
        number = phonenumbers.parse(text, None if text.startswith("+") else "IN")
    except phonenumbers.NumberParseException:
        return False
    return phonenumbers.is_valid_number(number)


def _number_kind(text: str) -> str | None:
    digits = _NON_DIGIT.sub("", text)
    if text.startswith("+"):
        return PHONE if _phone(text) else None
    if 13 <= len(digits) <= 19 and luhn.is_valid(digits):
        return CARD
    if len(digits) == 12 and aadhaar.is_valid(digits):
        return AADHAAR
    return PHONE if _phone(text) else None


def number_kind(text: str) -> tuple[str, int] | None:
    """The kind of a numeric run and the length of the prefix it covers.

    A run may swallow a neighbouring number ("card 4111 1111 1111 1111 2 items");
    when the whole run fails, shorter prefixes ending at a separator are tried.
    """
    kind = _number_kind(text)
    if kind is not None:
        return kind, len(text)
    ends = [m.start() for m in _SEPARATOR.finditer(text)]
    for end in reversed(ends):
        prefix = text[:end]
        if len(_NON_DIGIT.sub("", prefix)) < 10:
            break
        kind = _number_kind(prefix)
        if kind is not None:
            return kind, end
    return None


def confirm(group: str, text: str, match: re.Match[str]) -> tuple[str, int] | None:
    """(kind, length) when the candidate in ``group`` validates, else None."""
    if group == "num":
        return number_kind(text)
    if group == "at":  # name@domain.tld is an email; name@handle (no dot) a UPI id
        local, _, domain = text.rpartition("@")
        if len(local) <= 64 and _EMAIL_DOMAIN.fullmatch(domain):
            return EMAIL, len(text)
        return (UPI, len(text)) if _UPI_HANDLE.fullmatch(domain) else None
    if group == "secret":
        if match.group("tok") is not None and not _looks_random(text):
            return None
        return SECRET, len(text)
    if group == "pan":
        return (PAN, len(text)) if pan.is_valid(text) else None
    return group, len(text)  # ifsc: the shape is the check
