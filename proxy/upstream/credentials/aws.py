"""AWS credentials for Bedrock, signed by botocore (SigV4), never by hand.

Where the credentials come from, in order:

* the deployment's ``api_key_env`` (a declared, host-checked secret) holding
  ``ACCESS_KEY_ID:SECRET_ACCESS_KEY`` or ``ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN``;
* else botocore's own credentials chain for ``aws_profile`` (shared files, SSO, ``role_arn`` role assumption)
  or, without a profile, its default chain (environment, shared files, container and instance roles).
  Chain credentials sign only for AWS hosts (``*.amazonaws.com``, ``*.amazonaws.com.cn``, ``*.api.aws``):
  a deployment pointed elsewhere gets no signature.

A signature covers the method, URL (so the host), the signed headers and a hash of the body, and names the
access key id, never the secret. Refreshable chain credentials (roles) are refreshed on a thread, never on
the event loop.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Mapping

from botocore.auth import SIGNED_HEADERS_BLACKLIST, SigV4Auth, _host_from_url
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.session import Session

from proxy.hashing import sha256_hex
from proxy.snapshot.secrets import host_matches, host_of

SERVICE = "bedrock"
AWS_HOSTS = ("*.amazonaws.com", "*.amazonaws.com.cn", "*.api.aws")
# Headers a signature covers besides host and x-amz-*: what the dialect itself sets.
_SIGNED = frozenset({"content-type", "accept"})


@functools.lru_cache(maxsize=256)
def _host(origin: str) -> str:
    """The host header botocore signs for ``origin`` (scheme://host[:port]): botocore's own reading of it."""
    return _host_from_url(origin)


class AwsCredentialsError(ValueError):
    """No usable credentials (malformed secret, empty chain): the attempt fails naming why, never the value."""


def static_credentials(value: str) -> ReadOnlyCredentials:
    """``ACCESS_KEY_ID:SECRET[:SESSION_TOKEN]`` from a secret's value."""
    parts = value.strip().split(":", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise AwsCredentialsError("the secret must hold ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]")
    return ReadOnlyCredentials(parts[0], parts[1], parts[2] if len(parts) == 3 and parts[2] else None)


def aws_host(url: str) -> bool:
    host, port = host_of(url)
    return any(host_matches(p, host, port) for p in AWS_HOSTS)


class _Headers(dict):
    """A request's headers as botocore's ``SigV4Auth`` reads and writes them (case-insensitive; one value per
    name), without the ``email.message`` machinery of its ``HTTPHeaders``: two fifths of a signature's time and
    most of its allocations. The canonical request, string to sign and HMACs are still botocore's."""

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name.lower()) if isinstance(name, str) else False

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def __setitem__(self, name: str, value: str) -> None:
        dict.__setitem__(self, name.lower(), value)

    def __delitem__(self, name: str) -> None:
        dict.__delitem__(self, name.lower())

    def get_all(self, name: str) -> list[str]:
        return [dict.__getitem__(self, name.lower())]


class _Request:
    """What ``SigV4Auth`` reads of an ``AWSRequest``: method, URL, body, headers, context, params."""

    __slots__ = ("method", "url", "body", "headers", "context", "params")

    def __init__(self, method: str, url: str, body: bytes, headers: _Headers) -> None:
        self.method, self.url, self.body, self.headers, self.context, self.params = method, url, body, headers, {}, {}


class _SigV4(SigV4Auth):
    """botocore's SigV4 signer, handed its headers to sign in ``_Headers`` (its own choice of them: every header
    but its blacklist) instead of a fresh ``HTTPHeaders``, and the body's hash taken without releasing the GIL."""

    def headers_to_sign(self, request: _Request) -> _Headers:  # type: ignore[override]
        return _Headers({k: v for k, v in request.headers.items() if k not in SIGNED_HEADERS_BLACKLIST})

    def payload(self, request: _Request) -> str:  # type: ignore[override]
        """The body's SHA-256, as botocore's (the body is bytes here), hashed keeping the GIL
        (``proxy.hashing``): a 4 KB prompt hashed in one call handed the event loop to another thread."""
        return sha256_hex(request.body) if request.body else super().payload(request)


@dataclass(frozen=True, slots=True)
class AwsSigner:
    """Signs one request with SigV4 for ``region`` (botocore's ``SigV4Auth``); a ``Signer``."""

    credentials: ReadOnlyCredentials
    region: str
    service: str = SERVICE
    _auth: SigV4Auth = field(init=False, repr=False, compare=False)  # botocore's signer, built once

    def __post_init__(self) -> None:
        creds = self.credentials
        object.__setattr__(self, "_auth", _SigV4(Credentials(creds.access_key, creds.secret_key, creds.token),
                                                 self.service, self.region))

    def sign(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        signed = _Headers({k.lower(): v for k, v in headers.items()
                           if k.lower() in _SIGNED or k.lower().startswith("x-amz-")})
        # the host header botocore signs, worked out by botocore once per origin (it would parse the URL twice
        # per request: a quarter of a signature's time)
        dict.__setitem__(signed, "host", _host(url[: url.find("/", url.find("//") + 2)] if url.count("/") > 2 else url))
        request = _Request(method, url, body, signed)
        creds = self.credentials
        self._auth.add_auth(request)
        out = {"authorization": request.headers["Authorization"], "x-amz-date": request.headers["X-Amz-Date"]}
        if creds.token:
            out["x-amz-security-token"] = creds.token
        return out

    def __repr__(self) -> str:  # never the secret key
        return f"AwsSigner({self.credentials.access_key[:4]}…, {self.region})"


class ChainCredentials:
    """botocore's credentials chain for one profile (None: the default chain), resolved and refreshed on a
    thread; ``current()`` gives frozen credentials to sign with."""

    def __init__(self, profile: str | None) -> None:
        self.profile = profile
        self._creds = None  # botocore Credentials (possibly refreshable)
        self._lock = asyncio.Lock()

    def _resolve(self) -> ReadOnlyCredentials:
        if self._creds is None:
            session = Session(profile=self.profile) if self.profile else Session()
            self._creds = session.get_credentials()
            if self._creds is None:
                where = f"profile {self.profile!r}" if self.profile else "the default chain"
                raise AwsCredentialsError(f"botocore found no AWS credentials in {where}")
        return self._creds.get_frozen_credentials()

    def _fresh(self) -> ReadOnlyCredentials | None:
        """Frozen credentials without I/O when they need no refresh; None when a thread must fetch them."""
        creds = self._creds
        if creds is None:
            return None
        needs = getattr(creds, "refresh_needed", None)
        if needs is not None and needs():
            return None
        return creds.get_frozen_credentials()

    async def current(self) -> ReadOnlyCredentials:
        fresh = self._fresh()
        if fresh is not None:
            return fresh
        async with self._lock:
            return await asyncio.to_thread(self._resolve)
