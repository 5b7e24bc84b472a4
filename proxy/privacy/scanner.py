"""The PII scanner: finds identifiers and secrets in a chat request's text.

Reads every text a provider would see: message content (a string or an array
of content parts), tool-call arguments of assistant turns, and tool results
(``role: tool`` content). Each text is scanned in one pass of
``detectors.PATTERN`` (``detectors.candidates``: its matches, tried only where
one can start); validators run only on its candidates.

Invariants:
- A ``Finding`` holds a kind, where the text is and the span: never the value.
  Whoever needs the value (redaction) slices the text it already holds.
- Spans are ``[start, end)`` in the Python string at ``path``, sorted and
  non-overlapping within one text.
- Past ``max_chars`` of text the scan stops and says so (``complete=False``):
  the policy's fail rule, not the scanner, decides what that means.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.privacy.detectors import candidates, confirm

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Finding:
    """One confirmed identifier: its kind, the text it is in (``path`` into the body) and its span."""

    kind: str
    path: Path
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class ScanResult:
    findings: tuple[Finding, ...]
    complete: bool  # False: the text exceeded the scan limit and was not (fully) scanned
    scanned_chars: int
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self.counts)


def scan_text(text: str, path: Path = ()) -> list[Finding]:
    """Confirmed findings in one string, in order."""
    found: list[Finding] = []
    for match in candidates(text):
        group = match.lastgroup
        if group == "tok":  # the nested group of a prefixed token: the candidate is the whole secret
            group = "secret"
        assert group is not None
        confirmed = confirm(group, match.group(group), match)
        if confirmed is not None:
            kind, length = confirmed
            found.append(Finding(kind, path, match.start(), match.start() + length))
    return found


def chat_texts(body: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
    """Every (path, text) of a chat request a provider would read, in message order."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            continue
        content = msg.get("content")
        if isinstance(content, str):
            yield ("messages", i, "content"), content
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    yield ("messages", i, "content", j, "text"), part["text"]
        for k, call in enumerate(msg.get("tool_calls") or ()):
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
                yield ("messages", i, "tool_calls", k, "function", "arguments"), fn["arguments"]
        legacy = msg.get("function_call")
        if isinstance(legacy, Mapping) and isinstance(legacy.get("arguments"), str):
            yield ("messages", i, "function_call", "arguments"), legacy["arguments"]


def scan_chat(body: Mapping[str, Any], max_chars: int) -> ScanResult:
    """Scan a chat request body; stops (``complete=False``) once its texts exceed ``max_chars``."""
    texts = list(chat_texts(body))
    total = sum(len(t) for _, t in texts)
    if total > max_chars:
        return ScanResult((), complete=False, scanned_chars=0)
    findings: list[Finding] = []
    for path, text in texts:
        findings.extend(scan_text(text, path))
    counts = Counter(f.kind for f in findings)
    return ScanResult(tuple(findings), complete=True, scanned_chars=total, counts=dict(sorted(counts.items())))
