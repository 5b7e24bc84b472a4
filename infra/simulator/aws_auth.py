"""The simulator's AWS side: SigV4 verification (by botocore's own signer) and event-stream message encoding.

``verify`` recomputes a request's signature with ``botocore.auth.SigV4Auth`` from the headers the request says
it signed, at the time it says it signed them, and compares in constant time; a signature more than five
minutes off the simulator's clock is refused, as AWS does. ``frame`` writes one event-stream message: a
12-byte prelude (total length, headers length, CRC32 of the two), string headers, the payload and a CRC32 of
everything before it, exactly what ``botocore.eventstream`` decodes.
"""

from __future__ import annotations

import datetime as dt
import hmac
import re
import struct
import zlib
from collections.abc import Callable, Mapping

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([a-z0-9;\-]+), Signature=([0-9a-f]{64})$")
SKEW = dt.timedelta(minutes=5)


class SignatureError(ValueError):
    """Why a request's signature is not accepted (AWS's own wording where it has one)."""

    def __init__(self, message: str, kind: str = "InvalidSignatureException") -> None:
        super().__init__(message)
        self.kind = kind


def verify(method: str, url: str, headers: Mapping[str, str], body: bytes,
           secret_for: Callable[[str], str | None], now: dt.datetime | None = None) -> str:
    """The access key id of a correctly signed request; raises ``SignatureError`` otherwise."""
    raw = headers.get("Authorization") or headers.get("authorization")
    if not raw:
        raise SignatureError("Missing Authentication Token", "MissingAuthenticationTokenException")
    match = _AUTH.match(raw)
    if match is None:
        raise SignatureError("Authorization header requires 'Credential', 'Signature' and 'SignedHeaders'.",
                             "IncompleteSignatureException")
    key_id, day, region, service, signed, signature = match.groups()
    secret = secret_for(key_id)
    if secret is None:
        raise SignatureError("The security token included in the request is invalid.", "UnrecognizedClientException")
    stamp = headers.get("X-Amz-Date") or headers.get("x-amz-date") or ""
    try:
        when = dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise SignatureError("X-Amz-Date is missing or malformed.", "IncompleteSignatureException") from None
    now = now or dt.datetime.now(dt.UTC)
    if abs(now - when) > SKEW:
        raise SignatureError("Signature expired: the request time is more than 5 minutes from the server's.")
    if stamp[:8] != day:
        raise SignatureError("The credential scope's date does not match X-Amz-Date.")
    lower = {k.lower(): v for k, v in headers.items()}
    names = signed.split(";")
    if "host" not in names or any(n not in lower for n in names):
        raise SignatureError("A signed header is missing from the request.")
    request = AWSRequest(method=method, url=url, data=body,
                         headers={n: lower[n] for n in names if n not in ("host",)})
    request.context["timestamp"] = stamp
    token = lower.get("x-amz-security-token")
    signer = SigV4Auth(Credentials(key_id, secret, token), service, region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, signature):
        raise SignatureError("The request signature we calculated does not match the signature you provided.")
    return key_id


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("!B", len(raw_name)) + raw_name + b"\x07" + struct.pack("!H", len(raw_value)) + raw_value


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack("!II", total, len(head))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + head + payload
    return message + struct.pack("!I", zlib.crc32(message))


def event(kind: str, payload: bytes) -> bytes:
    return frame({":event-type": kind, ":content-type": "application/json", ":message-type": "event"}, payload)


def exception(kind: str, payload: bytes) -> bytes:
    return frame({":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
                 payload)
