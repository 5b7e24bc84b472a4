"""What the scanner looks for: one compiled alternation, and the validators that confirm a candidate.

Invariants:
- ``PATTERN`` is the only regex that matches candidates: one pass, one named
  group per candidate shape. Validators run only on what it matched.
- ``candidates`` yields exactly ``PATTERN.finditer``'s matches but tries
  ``PATTERN`` only where one can start: after a boundary, a run of ``[a-z.%]``
  then a digit, an upper-case letter or one of ``@ _ - + (``, and where the
  text opens as some group's match must (``_LEAD_HINT``). Prose, lower-case
  or with short numbers, is skipped by one search in C instead of an
  alternation tried at each character; ASCII text finds those places from a
  map of its characters' classes, read backwards (``_ascii_starts``).
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
from collections.abc import Iterator

import phonenumbers
from stdnum import luhn
from stdnum.in_ import aadhaar, pan

from proxy.snapshot.privacy import AADHAAR, CARD, EMAIL, PAN, PHONE, SECRET, UPI

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

# Every match of PATTERN starts where its look-behind allows (the text's start, or after a character outside
# [\w.%+\-@]), holds a hint character ([\dA-Z@_\-+(]) and, before its first one, only [a-z.%] (PATTERN's
# classes are ASCII ranges; \d is any digit, as in PATTERN). A change to PATTERN must keep this true:
# tests/proxy/privacy/test_privacy_scanner.py checks candidates() against PATTERN.finditer().
# A second look-ahead, tried only where the first holds, narrows that to the opening a group's match must have
# (prose's "4521", "10:45" or "follow-up" are no candidate's start), so fewer starts reach PATTERN from Python:
# an at's local part then @; a secret's literal prefix or a token's letters, separator and 24 characters; PAN
# and IFSC's four capitals; a number's first 8 characters (8 digits at least, only [\d \-()] after a + or ().
_FIRST_HINT = r"(?=[a-z.%]*+[\dA-Z@_\-+(])"
_OPENING = (r"(?=[A-Za-z0-9][A-Za-z0-9._%+\-]{0,255}+@"
            r"|sk-[A-Za-z0-9_\-]{20}|gh[pousr]_|xox[abposr]-|A(?:KIA|SIA|Iza)|[A-Za-z]{2,12}[_\-][A-Za-z0-9_\-]{24}"
            r"|[A-Z]{4}[A-Z0]"
            r"|[+(\d][\d \-()]{7})")
_LEAD_HINT = _FIRST_HINT + _OPENING
_AT_START = re.compile(_LEAD_HINT)
_AFTER_BOUNDARY = re.compile(r"[^\w.%+\-@]" + _LEAD_HINT)  # match.start() + 1 is where a candidate may start
_OPENS = re.compile(_OPENING)

# ASCII text (most prompts, code, tool arguments) finds the places _FIRST_HINT holds after a boundary without
# a regex tried at every boundary: one C pass (bytes.translate) maps each character to its class: ``a`` for
# [a-z.%], ``H`` for a hint that is no boundary ([0-9A-Z_] are \w for ASCII; + - @ are in the look-behind's
# class), ``(`` for the hint that is a boundary, a space for every other (boundary) character. Read backwards,
# a start is a hint, a run of ``a`` and then a boundary or the text's beginning: ``_BACK_H`` finds those
# opening with the literal ``H`` (a scan for one byte), ``_BACK_PAREN`` those opening with ``(``.
_CLASSES = bytes(
    ord("a") if chr(b) in "abcdefghijklmnopqrstuvwxyz.%"
    else ord("H") if chr(b) in "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_+-@"
    else b if b == ord("(") else ord(" ")
    for b in range(256))
_BACK_H = re.compile(rb"Ha*+(?=[ (]|\Z)")
_BACK_PAREN = re.compile(rb"\(a*+(?=[ (]|\Z)")


def _ascii_starts(text: str) -> list[int]:
    """Where ``_FIRST_HINT`` holds at the text's start or after a boundary, in order (``text`` is ASCII)."""
    back = text.encode("ascii").translate(_CLASSES)[::-1]
    n = len(back)
    starts = [n - m.end() for m in _BACK_H.finditer(back)]
    if b"(" in back:
        starts += [n - m.end() for m in _BACK_PAREN.finditer(back)]
        starts.sort()
    else:
        starts.reverse()
    return starts


def candidates(text: str) -> Iterator[re.Match[str]]:
    """The matches of ``PATTERN.finditer(text)``, in order; ``PATTERN`` is tried only where one can start."""
    match = PATTERN.match
    if text.isascii():
        opens, end = _OPENS.match, 0
        for start in _ascii_starts(text):
            if start >= end and opens(text, start) is not None and (m := match(text, start)) is not None:
                yield m
                end = m.end()  # the next candidate starts after a boundary at or after the match's last character
        return
    search = _AFTER_BOUNDARY.search
    pos = 0  # the next candidate starts after a boundary character at or after pos
    if _AT_START.match(text) and (m := match(text, 0)) is not None:
        yield m
        pos = m.end() - 1
    while (h := search(text, pos)) is not None:
        start = h.start() + 1
        m = match(text, start)
        if m is None:
            pos = start
        else:
            yield m
            pos = m.end() - 1  # the match's last character may itself be the next one's boundary


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


def _phone(text: str, digits: str) -> bool:
    if not text.startswith("+"):
        # Indian numbers without a country code: 10 digits, 0 + 10, or 91 + 10. Anything else (order
        # numbers, dates, amounts) is rejected before the comparatively slow parse.
        n = len(digits)
        if not (n == 10 or (n == 11 and digits[0] == "0") or (n == 12 and digits.startswith("91"))):
            return False
    try:
        number = phonenumbers.parse(text, None if text.startswith("+") else "IN")
    except phonenumbers.NumberParseException:
        return False
    return phonenumbers.is_valid_number(number)


def _number_kind(text: str, digits: str) -> str | None:
    """``digits``: the digits of ``text``."""
    if text.startswith("+"):
        return PHONE if _phone(text, digits) else None
    if 13 <= len(digits) <= 19 and luhn.is_valid(digits):
        return CARD
    if len(digits) == 12 and aadhaar.is_valid(digits):
        return AADHAAR
    return PHONE if _phone(text, digits) else None


def number_kind(text: str) -> tuple[str, int] | None:
    """The kind of a numeric run and the length of the prefix it covers.

    A run may swallow a neighbouring number ("card 4111 1111 1111 1111 2 items");
    when the whole run fails, shorter prefixes ending at a separator are tried.
    Without a ``+``, fewer than 10 digits is no kind (a card has 13, an Aadhaar
    12, a phone 10), and no prefix has more: such runs (dates, order numbers)
    are refused before any other work.
    """
    digits = _NON_DIGIT.sub("", text)
    if len(digits) < 10 and not text.startswith("+"):
        return None
    kind = _number_kind(text, digits)
    if kind is not None:
        return kind, len(text)
    ends = [m.start() for m in _SEPARATOR.finditer(text)]
    for end in reversed(ends):
        prefix = text[:end]
        prefix_digits = _NON_DIGIT.sub("", prefix)
        if len(prefix_digits) < 10:
            break
        kind = _number_kind(prefix, prefix_digits)
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
