"""What a gateway pod asks of the world outside the request path: the event log and the control store.

The composition root (``farebox/``) wires one adapter per mode; nothing on
the request path asks which one it got. The budget and rate-limit ports live
beside admission (``proxy.admission.budget_port``, ``proxy.limits``).

``ControlStore`` is exactly what the admin API calls; ``ControlService``
(``proxy.control.service``) implements it, and
``tests/proxy/control/test_control_port.py`` holds the two to one signature.

``Rerater`` is re-rating for the admin API (``POST /admin/v1/rerate``):
``farebox/`` wires it to ``reconcile``'s re-rating over the archive, so the
proxy never imports ``reconcile``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import date, datetime
from typing import Any, Mapping, Protocol

from ledger.events import Event
from pricing.book import FxTable, PriceBook


class EventSink(Protocol):
    """The part of the event log the data plane needs: append, never wait.

    ``append`` either accepts the event (the future resolves to its offset
    once durable, or fails) or raises at once when the log cannot take it.
    """

    def append(self, event: Event) -> asyncio.Future[int]: ...


class ControlStore(Protocol):
    """Where admin writes go; a change is live on this pod when the call returns."""

    async def denied(self, actor: str, action: str, obj: str) -> None: ...

    async def rejected(self, actor: str, action: str, obj: str, problems: list[str]) -> None: ...

    async def accessed(self, actor: str, action: str, obj: str) -> None:
        """Audit a sensitive read (outcome ok) before answering it; raises when the audit cannot be written."""
        ...

    async def create_key(self, actor: str, body: Mapping[str, Any]) -> tuple[dict[str, Any], str]: ...

    async def revoke_key(self, actor: str, key_id: str) -> dict[str, Any]: ...

    async def rotate_key(self, actor: str, key_id: str, overlap_s: float,
                         pins: Mapping[str, list[str]] | None = None) -> tuple[dict[str, Any], str]: ...

    async def list_keys(self) -> list[dict[str, Any]]: ...

    async def set_budget(self, actor: str, scope: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def put_team(self, actor: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def put_app(self, actor: str, team: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def put_business_unit(self, actor: str, name: str) -> dict[str, Any]: ...

    async def put_alias(self, actor: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def put_deployment(self, actor: str, dep_id: str, body: Mapping[str, Any],
                             allow_large_change: bool = False) -> dict[str, Any]: ...

    async def add_prices(self, actor: str, body: Mapping[str, Any], number: int | None = None) -> dict[str, Any]: ...

    async def list_prices(self) -> list[dict[str, Any]]: ...

    async def create_admin_token(self, actor: str, name: str, role: str) -> tuple[dict[str, Any], str]: ...

    async def revoke_admin_token(self, actor: str, name: str) -> dict[str, Any]: ...

    async def list_admin_tokens(self) -> list[dict[str, Any]]: ...

    async def recorded(self, actor: str, action: str, obj: str, after: Mapping[str, Any]) -> None:
        """An audit row (outcome ``ok``) for an admin write that is not a config change (an applied re-rate)."""
        ...

    async def audit(self, limit: int = 100, object_prefix: str | None = None) -> list[dict[str, Any]]: ...

    def needs_approval(self, action: str, params: Mapping[str, Any], snapshot: Any) -> str | None:
        """Why this admin-API change takes a second person (``proxy.control.approvals``); None if it does not."""
        ...

    async def propose(self, actor: str, action: str, obj: str, params: Mapping[str, Any], reason: str
                      ) -> dict[str, Any]: ...

    async def approve(self, actor: str, role: str, change_id: int) -> dict[str, Any]: ...

    async def reject(self, actor: str, change_id: int) -> dict[str, Any]: ...

    async def list_changes(self, status: str | None, limit: int = 100) -> list[dict[str, Any]]: ...

    def snapshot_status(self) -> dict[str, Any]:
        """How this pod follows the config (source, versions, last poll); {} when nothing follows it."""
        ...


class RerateRefused(Exception):
    """The re-rate cannot be made as asked (no archive for the window, an unpriceable attempt); ``field`` names
    the request field at fault. Nothing was appended."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


Append = Callable[[Sequence[Event]], Awaitable[None]]


class Rerater(Protocol):
    """Re-prices the requests admitted on the UTC days [start, end] under ``version`` of ``book``.

    Returns the report (the JSON ``farebox rerate --format json`` describes:
    rows per team x deployment x day, totals, correction ids, skipped) and
    the ``rating.corrected`` events. With ``append`` given they are handed to
    it before the call returns, one re-rate at a time, and remembered: a second
    identical call (before or after the archive catches up) finds nothing left
    to correct. Raises ``RerateRefused`` when the re-rate cannot be made.
    """

    async def rerate(self, start: date, end: date, book: PriceBook, fx: FxTable, version: int, *, now: datetime,
                     reason: str, append: Append | None) -> tuple[dict[str, Any], list[Event]]: ...
