"""Admin API, re-rating: ``POST /admin/v1/rerate`` (role finance or admin).

Body: ``{"from": "YYYY-MM-DD", "to": "YYYY-MM-DD", "price_version": N, "reason": "...", "dry_run": true}``.
``price_version`` defaults to the newest version of the pod's current book;
``dry_run`` defaults to true. The answer is the report ``farebox rerate
--format json`` prints (rows per team x deployment x day, totals, correction
ids, skipped requests) plus the window. With ``dry_run: false`` the
``rating.corrected`` events are appended through the pod's event log and
folded into its projection before the answer, and the apply is audited
(``rerate.apply``); the ids are deterministic and the ``Rerater`` remembers
what it appended, so posting the same re-rate again appends nothing.

The re-rating itself is the ``Rerater`` port (``proxy.ports``), wired by
``farebox/`` to ``reconcile``; this module only reads the body, checks it
against the live price book and hands it on. Every bad field is a 400 naming
it (audited as ``rejected``); nothing is appended then.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timezone
from typing import Any

from aiohttp import web

from ledger.events import Event
from proxy.body import parse_json_object
from proxy.control.admin.access import allowed, control
from proxy.errors import GatewayError, InvalidRequest
from proxy.ports import Rerater, RerateRefused
from proxy.runtime import RUNTIME

ACTION = "rerate.apply"
FIELDS = ("from", "to", "price_version", "reason", "dry_run")


def _day(body: dict[str, Any], name: str) -> date:
    raw = body.get(name)
    if not isinstance(raw, str):
        raise InvalidRequest(f"'{name}' is required: a UTC day like 2026-11-30.", param=name)
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a UTC day like 2026-11-30, got {raw!r}.", param=name) from None


def read_body(body: dict[str, Any], known_versions: Sequence[int]) -> tuple[date, date, int, str, bool]:
    """(start, end, version, reason, dry_run) from the body; ``InvalidRequest`` naming the first bad field."""
    for name in body:
        if name not in FIELDS:
            raise InvalidRequest(f"Unknown field '{name}'; expected one of {', '.join(FIELDS)}.", param=name)
    start, end = _day(body, "from"), _day(body, "to")
    if start > end:
        raise InvalidRequest(f"'from' ({start}) is after 'to' ({end}).", param="from")
    version = body.get("price_version")
    if version is None:
        if not known_versions:
            raise InvalidRequest("The price book has no version to re-rate under.", param="price_version")
        version = max(known_versions)
    elif isinstance(version, bool) or not isinstance(version, int):
        raise InvalidRequest(f"'price_version' must be an integer, got {version!r}.", param="price_version")
    elif version not in known_versions:
        known = ", ".join(str(v) for v in known_versions) or "none"
        raise InvalidRequest(f"Unknown price version {version}; the book has {known}.", param="price_version")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 500:
        raise InvalidRequest("'reason' must be a string of at most 500 characters.", param="reason")
    dry_run = body.get("dry_run", True)
    if not isinstance(dry_run, bool):
        raise InvalidRequest(f"'dry_run' must be true or false, got {dry_run!r}.", param="dry_run")
    return start, end, version, reason, dry_run


def _rerater(request: web.Request) -> Rerater:
    svc = request.app[RUNTIME].rerater
    if svc is None:
        raise GatewayError("This pod has no archive to re-rate from.", status=501, code="rerate_unavailable")
    return svc


async def post_rerate(request: web.Request) -> web.Response:
    token = await allowed(request, ACTION, "rerate", "finance")
    rt = request.app[RUNTIME]
    rerater = _rerater(request)
    snap = rt.snapshot
    try:
        start, end, version, reason, dry_run = read_body(parse_json_object(await request.read()),
                                                         [v.version for v in snap.price_book.versions])
    except InvalidRequest as exc:
        if rt.control is not None:
            await rt.control.rejected(token.name, ACTION, "rerate", [f"{exc.param}: {exc.message}"])
        raise
    audit = None if dry_run else control(request)  # an apply is audited: no control store, no apply

    async def append(events: Sequence[Event]) -> None:
        for event in events:  # in order: a chain's corrections follow each other in the log
            await rt.recorder.record(event)

    try:
        report, corrections = await rerater.rerate(
            start, end, snap.price_book, snap.fx, version, now=datetime.now(timezone.utc),
            reason=reason or f"re-rated under price version {version} by {token.name}",
            append=None if dry_run else append)
    except RerateRefused as exc:
        if rt.control is not None:
            await rt.control.rejected(token.name, ACTION, "rerate", [f"{exc.field}: {exc}"])
        raise InvalidRequest(str(exc), param=exc.field) from None
    report = {**report, "from": start.isoformat(), "to": end.isoformat(), "applied": not dry_run}
    if audit is not None:
        await audit.recorded(token.name, ACTION, f"rerate:{start}..{end}", {
            "from": start.isoformat(), "to": end.isoformat(), "price_version": version, "reason": reason,
            "corrections": len(corrections), "diff_micro": report["diff_micro"],
            "correction_ids": [e.id for e in corrections]})
    return web.json_response(report)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/admin/v1/rerate", post_rerate)
