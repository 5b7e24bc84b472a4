"""The caller's cost-allocation tags: the ``x-fb-tags`` request header, checked before anything is held.

Shape: ``key=value`` pairs separated by commas (``project=atlas, env=prod``);
whitespace around a pair, its key or its value is ignored. Bounds, so a tag
is always a small, plain value finance can group by:

* at most ``MAX_TAGS`` pairs, each key at most ``MAX_KEY`` characters, each
  value at most ``MAX_VALUE``;
* a key starts with a letter and holds letters, digits and ``_ . : / -``;
  a value holds letters, digits and ``_ . : / @ + -`` (no spaces, quotes or
  separators), and neither may be empty;
* a key appears once;
* a key starting ``fb.`` is farebox's own (``fb.batch``: the batch a request is a line of; ``fb.priority``;
  ``fb.variant``: the variant of a split; ``fb.shadow``: the alias a shadow leg copies), never a caller's.

Anything else is a 400 naming the header (``param: x-fb-tags``). The message
names the pair by position and quotes only text that passed the charset, so
it never echoes arbitrary bytes. Pure: a string in, a dict or an error out.
"""

from __future__ import annotations

import re

from proxy.errors import InvalidRequest

HEADER = "x-fb-tags"
RESERVED = "fb."  # farebox's own tags
MAX_TAGS = 10
MAX_KEY = 64
MAX_VALUE = 128
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.:/-]*")
_VALUE = re.compile(r"[A-Za-z0-9_.:/@+-]+")


class InvalidTags(InvalidRequest):
    code = "invalid_tags"

    def __init__(self, why: str) -> None:
        super().__init__(f"The {HEADER} header is invalid: {why}. Send up to {MAX_TAGS} comma-separated key=value "
                         f"pairs (key: a letter then letters, digits, _ . : / -, at most {MAX_KEY} characters; "
                         f"value: letters, digits, _ . : / @ + -, at most {MAX_VALUE} characters).", param=HEADER)


def parse_tags(header: str | None) -> dict[str, str]:
    """The tags of ``x-fb-tags`` (absent or blank: none), or ``InvalidTags``."""
    if header is None or not header.strip():
        return {}
    pairs = header.split(",")
    if len(pairs) > MAX_TAGS:
        raise InvalidTags(f"{len(pairs)} pairs, at most {MAX_TAGS} are allowed")
    tags: dict[str, str] = {}
    for n, pair in enumerate(pairs, 1):
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise InvalidTags(f"pair {n} is not key=value with a non-empty key and value")
        if len(key) > MAX_KEY or not _KEY.fullmatch(key):
            raise InvalidTags(f"pair {n} has a key longer than {MAX_KEY} characters" if len(key) > MAX_KEY
                              else f"pair {n} has a key with a character outside the allowed set")
        if len(value) > MAX_VALUE or not _VALUE.fullmatch(value):
            raise InvalidTags(f"the value of {key!r} is longer than {MAX_VALUE} characters" if len(value) > MAX_VALUE
                              else f"the value of {key!r} has a character outside the allowed set")
        if key.startswith(RESERVED):
            raise InvalidTags(f"pair {n} has a key starting {RESERVED!r}, which farebox keeps for its own tags")
        if key in tags:
            raise InvalidTags(f"the key {key!r} appears more than once")
        tags[key] = value
    return tags
