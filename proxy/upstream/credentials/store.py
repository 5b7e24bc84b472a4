"""What a deployment authenticates with, per request: ``UpstreamClient.credential`` asks here.

``key`` and ``entra`` deployments send their declared secret (an API key, an Entra bearer token); ``aws_sigv4``
ones get an ``AwsSigner`` (static keys from the secret, else botocore's chain, AWS hosts only);
``google_oauth`` ones a current access token from google-auth. The secret itself is always handed out by
``Secrets.for_url`` (declared, and only for its declared hosts). Credential sources are kept per secret value or
profile, so tokens and role credentials are fetched once and refreshed, not per request. Failures are
``UpstreamAuth`` naming the deployment and the reason, never a value.
"""

from __future__ import annotations

import hashlib

from proxy.errors import UpstreamAuth
from proxy.snapshot import Deployment
from proxy.upstream.base import Credential
from proxy.upstream.credentials.aws import (
    AwsCredentialsError,
    AwsSigner,
    ChainCredentials,
    aws_host,
    static_credentials,
)
from proxy.upstream.credentials.google import GoogleCredentialsError, GoogleTokens

MAX_STATIC_SIGNERS = 256  # static-key signers kept (keys x regions); past it the cache starts again


def _fingerprint(secret: str | None) -> str:
    return "adc" if secret is None else hashlib.sha256(secret.encode()).hexdigest()


class CredentialSources:
    """Long-lived credential sources of one pod (AWS chains by profile, Google tokens by key)."""

    def __init__(self) -> None:
        self._aws: dict[str | None, ChainCredentials] = {}
        self._static: dict[tuple[str, str], AwsSigner] = {}  # (secret, region) -> signer
        self._google: dict[str, GoogleTokens] = {}

    async def for_deployment(self, dep: Deployment, secret: str | None) -> Credential:
        if dep.auth in ("key", "entra"):
            return secret
        try:
            if dep.auth == "aws_sigv4":
                return await self._aws_signer(dep, secret)
            if dep.auth == "google_oauth":
                key = _fingerprint(secret)
                tokens = self._google.get(key)
                if tokens is None:
                    tokens = self._google[key] = GoogleTokens(secret)
                return await tokens.current()
        except (AwsCredentialsError, GoogleCredentialsError) as exc:
            raise UpstreamAuth(f"Deployment {dep.id} cannot be called: {exc}.",
                               code="provider_credentials_failed") from None
        raise UpstreamAuth(f"Deployment {dep.id} has an unknown auth kind.", code="provider_credentials_failed")

    async def _aws_signer(self, dep: Deployment, secret: str | None) -> AwsSigner:
        if secret is not None:  # static keys: one signer per key and region, kept (a key rotated is a new one)
            key = (secret, dep.region)  # (in memory only, as the secret itself is)
            signer = self._static.get(key)
            if signer is None:
                if len(self._static) >= MAX_STATIC_SIGNERS:
                    self._static.clear()
                signer = self._static[key] = AwsSigner(static_credentials(secret), dep.region)
            return signer
        if not aws_host(dep.base_url):
            raise AwsCredentialsError("botocore's credentials chain signs only for AWS hosts; declare static keys "
                                      "in api_key_env for this host")
        chain = self._aws.get(dep.aws_profile)
        if chain is None:
            chain = self._aws[dep.aws_profile] = ChainCredentials(dep.aws_profile)
        return AwsSigner(await chain.current(), dep.region)
