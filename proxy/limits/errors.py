"""Errors of the rate limiter.

Hierarchy::

    LimitsError (500)          base of this package; a GatewayError, so it has an HTTP meaning
      InvalidBucket (500)      a spec, amount or time outside the exact-integer range: a bug
                               or a bad config, never the caller's request
      BackendError (500)       the shared store answered with an error that falling back
                               would hide (WRONGTYPE on a key, a broken script)

A limit being hit is *not* an error here: ``reserve`` returns a ``Reservation``
with ``ok=False`` and the HTTP layer turns it into ``RateLimited`` (429). An
unreachable Redis is not one either: the adapter answers from local buckets.
"""

from __future__ import annotations

from proxy.errors import GatewayError


class LimitsError(GatewayError):
    status = 500
    type = "server_error"
    code = "rate_limiter_error"
    retryable = False


class InvalidBucket(LimitsError):
    code = "rate_limiter_invalid_bucket"


class BackendError(LimitsError):
    code = "rate_limiter_backend_error"
