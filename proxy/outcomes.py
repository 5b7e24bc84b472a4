"""The words the request path's stages pass each other about how an attempt ended.

Attempt outcomes, as routing's health and breakers count them (``proxy.routing.state.RoutingState.finish``):
``ok`` answered, ``failed`` the deployment's fault, ``rate_limited`` a provider 429, ``neutral`` nobody's
fault (the caller left, the pod drained).

Why an attempt's task was cancelled, the message passed to ``Task.cancel``: it lost a hedge, the caller
closed the connection, or the pod's drain deadline passed.

The stages import these from here, so the stream relay (``proxy.upstream``) and the client watch
(``proxy.api``) speak routing's words without importing routing.
"""

from __future__ import annotations

OK, FAILED, RATE_LIMITED, NEUTRAL = "ok", "failed", "rate_limited", "neutral"

HEDGE_LOST, CLIENT_CLOSED, DRAIN = "hedge_lost", "client_closed", "drain"
