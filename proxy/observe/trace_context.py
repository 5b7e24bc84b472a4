"""The trace context one request's task carries to the provider calls it makes.

``proxy.observe.tracing`` sets ``TRACE_HEADERS`` (the request span's ``traceparent``) for the request's task
and the attempts it starts; ``proxy.upstream.relay`` adds them to every upstream call. Unset (None) when
tracing is off, so the relay adds nothing.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Mapping

TRACE_HEADERS: ContextVar[Mapping[str, str] | None] = ContextVar("farebox_trace_headers", default=None)
