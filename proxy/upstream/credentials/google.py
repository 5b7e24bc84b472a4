"""Google OAuth tokens for Vertex AI, from google-auth (never hand-made JWTs).

A deployment's ``api_key_env`` (a declared, host-checked secret) holds a service account's JSON key; google-auth
signs its assertion and exchanges it at the key's ``token_uri``. Without a secret, application default
credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's user credentials, the metadata server). The token is
refreshed on a thread five minutes before it expires, one refresh at a time per credential, never on the event
loop; the token goes only to the deployment's host, as ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import orjson

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
EARLY = dt.timedelta(minutes=5)


class GoogleCredentialsError(ValueError):
    """The secret is not a service-account key, or no default credentials exist (never shows the key)."""


def _request():
    import urllib3
    from google.auth.transport.urllib3 import Request

    return Request(urllib3.PoolManager(timeout=urllib3.Timeout(connect=5.0, read=10.0)))


class GoogleTokens:
    """One credential's access tokens: ``current()`` is the token to send (refreshed when near expiry)."""

    def __init__(self, service_account_json: str | None) -> None:
        self._info = service_account_json
        self._creds = None
        self._lock = asyncio.Lock()

    def _build(self):
        if self._info is None:
            import google.auth

            try:
                creds, _project = google.auth.default(scopes=[SCOPE])
            except google.auth.exceptions.DefaultCredentialsError:
                raise GoogleCredentialsError("google-auth found no application default credentials") from None
            return creds
        from google.oauth2 import service_account

        try:
            info = orjson.loads(self._info)
            return service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError):
            raise GoogleCredentialsError("the secret is not a service account's JSON key") from None

    def _valid(self) -> str | None:
        creds = self._creds
        if creds is None or not creds.token:
            return None
        expiry = creds.expiry  # naive UTC, as google-auth keeps it
        if expiry is not None and expiry - EARLY <= dt.datetime.now(dt.UTC).replace(tzinfo=None):
            return None
        return creds.token

    def _refresh(self) -> str:
        import google.auth.exceptions

        if self._creds is None:
            self._creds = self._build()
        try:
            self._creds.refresh(_request())
        except google.auth.exceptions.GoogleAuthError as exc:
            raise GoogleCredentialsError(f"the token exchange failed ({type(exc).__name__})") from None
        return self._creds.token

    async def current(self) -> str:
        token = self._valid()
        if token is not None:
            return token
        async with self._lock:
            token = self._valid()  # another request refreshed it while this one waited
            if token is not None:
                return token
            return await asyncio.to_thread(self._refresh)
