"""Who an internal request is: the gateway's own requests to itself, over the process's private socket.

Two kinds, both carrying the process's runner token (``proxy.batches.runner``; it never leaves the process):

* a **batch line** (``x-fb-batch-key``, ``x-fb-batch-id``, ``x-fb-batch-request``): it runs as the key that created
  the batch, under the line's own request id (a line run again after a crash is billed once);
* a **canary probe** (``x-fb-canary: <deployment>``): the synthetic canary's tiny request, as the platform's
  canary key pinned to that deployment (``proxy.batches.canary``);
* a **shadow leg** (``x-fb-shadow-of: <alias>``): a copy of a request to a shadowed alias, sent to its candidate
  as the platform's own key for that alias (``proxy.control.alias_variants.shadow_keys``), so it is paid by the
  platform's team and never by the caller's.

A wrong token is a 401; so is a shadow leg for an alias that has no shadow, or a line without its request id.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from proxy.admission.auth import authenticate_batch_line, usable
from proxy.batches.canary import CANARY_HEADER
from proxy.batches.runner import BATCH_HEADER, HELD_HEADER, KEY_HEADER, LINE_HEADER, LINE_ID, SHADOW_HEADER
from proxy.errors import AuthenticationFailed
from proxy.runtime import Runtime
from proxy.snapshot import KeyRecord


def _canary_key(rt: Runtime, request: web.Request, dep_id: str) -> KeyRecord:
    """The platform's canary key for one deployment: the canary's team, pinned to that deployment, allowed every
    alias that lists it (``proxy.batches.canary``)."""
    snap = rt.snapshot
    aliases = frozenset(a.name for a in snap.aliases.values() if dep_id in a.deployments)
    if dep_id not in snap.deployments or not aliases:
        raise AuthenticationFailed(f"No deployment {dep_id!r} to probe.", code="invalid_batch_token")
    team = rt.options.canary_team
    request["canary"] = dep_id
    found = snap.teams.get(team)
    return KeyRecord(key_id=f"canary.{dep_id}", key_hash="", team=team, app="canary",
                     business_unit=found.business_unit if found else None, aliases=aliases,
                     deployments=frozenset({dep_id}), env="prod")


def internal_caller(rt: Runtime, request: web.Request, token: str) -> KeyRecord:
    expected = rt.pod.batch_token
    if expected is None or not hmac.compare_digest(token.encode(), expected.encode()):
        raise AuthenticationFailed("Incorrect batch runner token.", code="invalid_batch_token")
    canary = request.headers.get(CANARY_HEADER)
    if canary is not None:
        return _canary_key(rt, request, canary)
    shadow_of = request.headers.get(SHADOW_HEADER)
    if shadow_of is not None:
        alias = rt.snapshot.aliases.get(shadow_of)
        key = rt.snapshot.shadow_keys.get(f"shadow.{shadow_of}")
        if alias is None or alias.shadow is None or key is None:
            raise AuthenticationFailed(f"The alias {shadow_of!r} has no shadow.", code="invalid_batch_token")
        request["shadow_of"] = shadow_of
        return usable(key, rt.clock())
    request["batch_id"] = request.headers.get(BATCH_HEADER)
    line_id = request.headers.get(LINE_HEADER, "")
    if not LINE_ID.fullmatch(line_id):
        raise AuthenticationFailed("A batch line needs its request id.", code="invalid_batch_token")
    request["request_id"] = line_id  # the line's own: a line run again after a crash is billed once
    held = request.headers.get(HELD_HEADER)
    if held is not None and held.isascii() and held.isdigit():
        request["held_micro"] = int(held)  # its batch was admitted whole: this run has its hold
    return authenticate_batch_line(rt.snapshot, request.headers.get(KEY_HEADER), rt.clock())
