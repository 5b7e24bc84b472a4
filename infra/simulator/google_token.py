"""The simulator's OAuth token endpoint for Vertex AI (``POST /token``), as Google's documents it.

A service account's client (google-auth) posts ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` and a
JWT ``assertion`` it signed with the account's private key; the simulator checks the signature against the
configured public key with google-auth's own verifier (issuer, Google's token audience, expiry) and answers an
access token that ``gemini_wire`` then accepts as ``Authorization: Bearer`` for that account.
"""

from __future__ import annotations

import secrets

import orjson
from aiohttp import web
from google.auth import exceptions as google_exceptions
from google.auth import jwt

from infra.simulator.state import STATE

GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
LIFETIME_S = 3599
AUDIENCE = "https://oauth2.googleapis.com/token"  # what google-auth puts in every assertion's ``aud``, as Google expects


def _oauth_error(error: str, description: str, status: int = 400) -> web.Response:
    return web.Response(status=status, content_type="application/json",
                        body=orjson.dumps({"error": error, "error_description": description}))


async def token(request: web.Request) -> web.Response:
    state = request.app[STATE]
    form = await request.post()
    if form.get("grant_type") != GRANT:
        return _oauth_error("unsupported_grant_type", "Invalid grant_type.")
    assertion = form.get("assertion")
    if not isinstance(assertion, str) or not assertion:
        return _oauth_error("invalid_request", "Missing required parameter: assertion")
    for account in state.config.accounts:
        if not account.google_public_key:
            continue
        try:
            claims = jwt.decode(assertion, certs=account.google_public_key, audience=AUDIENCE, clock_skew_in_seconds=30)
        except (google_exceptions.GoogleAuthError, ValueError):
            continue
        if claims.get("iss") != account.google_client_email:
            continue
        access = "ya29.sim-" + secrets.token_urlsafe(24)
        state.google_tokens[access] = account.name
        return web.json_response({"access_token": access, "expires_in": LIFETIME_S, "token_type": "Bearer"})
    return _oauth_error("invalid_grant", "Invalid JWT Signature.")
