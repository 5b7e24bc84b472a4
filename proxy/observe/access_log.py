"""The access log: one structured line per request, on the ``farebox.access`` logger.

``access_line`` is pure: it reads the request's own record (ids, key id,
team, alias) and, for a model request that reached admission, its meter (the
deployment, attempts, TTFT, tokens and cost it was settled with). It never
reads a body, a header value other than the caller's request id, or a
secret: the key is named by its display id, never by its value or hash. The
line is handed to the logger as the record's ``access`` field; the handler
``farebox/`` installs renders it as JSON (or text), at the configured level.

``log_access`` only queues the request; the lines of one event-loop turn are
built and logged together in a callback after that turn, so the response is
written first and the logging machinery runs once per turn's batch rather
than inside each request. Lines keep the order their requests finished in.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

ACCESS = logging.getLogger("farebox.access")
INFO = logging.INFO


def access_line(request: Mapping[str, Any], method: str, path: str, status: int, latency_s: float) -> dict:
    """The request's fields; ``request`` is the aiohttp request's per-request store."""
    line: dict[str, Any] = {
        "request_id": request.get("request_id"),
        "client_request_id": request.get("client_request_id"),
        "method": method,
        "path": path,
        "status": status,
        "latency_ms": round(latency_s * 1000, 3),
    }
    key = request.get("key")
    if key is not None:
        line["key_id"], line["team"], line["app"] = key.key_id, key.team, key.app
    admin = request.get("admin")
    if admin is not None:
        line["admin"] = getattr(admin, "name", None)
    meter = request.get("meter")
    if meter is None:
        return line
    tab = meter.tab
    line["alias"] = tab.alias.name
    line["attempts"] = tab.attempts
    if meter.final is not None:
        line["status"], dep = meter.final
        line["deployment"] = dep.id if dep is not None else None
    line["ttft_ms"] = None if meter.ttft_s is None else round(meter.ttft_s * 1000, 3)
    usage = tab.total_usage
    line["tokens"] = {"input": usage.prompt_tokens, "output": usage.completion_tokens,
                      "cached_input": usage.cached_input, "reasoning": usage.reasoning, "source": usage.source}
    line["cost_micro"] = tab.total_cost
    line["currency"] = tab.snapshot.currency
    line["price_version"] = tab.plan.price_version if tab.plan is not None else None
    return line


_pending: list[tuple[Any, int, float]] = []


def log_access(request: Any, status: int, latency_s: float) -> None:
    """Queue the request's line for the end of this loop turn (the caller checked ``ACCESS.isEnabledFor(INFO)``)."""
    if not _pending:
        try:
            asyncio.get_running_loop().call_soon(flush_access)
        except RuntimeError:  # no loop: write it now
            _write(request, status, latency_s)
            return
    _pending.append((request, status, latency_s))


def flush_access() -> None:
    """Write every queued line, in order."""
    batch = _pending[:]
    _pending.clear()
    for request, status, latency_s in batch:
        _write(request, status, latency_s)


def _write(request: Any, status: int, latency_s: float) -> None:
    ACCESS.info("%s %s %d", request.method, request.path, status,
                extra={"access": access_line(request, request.method, request.path, status, latency_s)})
