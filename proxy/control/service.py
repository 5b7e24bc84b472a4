"""The control plane's write side, shared by the admin API and the CLI.

Each call validates its input, runs one ``ConfigDB.change`` in a worker
thread (the database is never touched on the event loop), tells the
publisher, and — on a gateway pod — adopts the new snapshot locally before
returning, so a change is live on the pod that made it when the caller hears
back; other pods pick it up at their next poll.

The changes that take two people over the admin API (``proxy.control.approvals``) are proposed here,
validated by a dry run, and run on approval as the proposer, with the approver audited beside them
(``APPROVER``, read by ``run``). The CLI calls the same methods directly: the break-glass path.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Awaitable, Callable, Mapping

import sqlalchemy as sa

from proxy.control import changes, price_changes
from proxy.control.apply import apply_tree
from proxy.control.approvals import PENDING_TTL_S, ROLES, needs_approval
from proxy.control.db import pending
from proxy.control.db.models import AdminTokenRow, KeyRow, PriceRow, PriceVersionRow
from proxy.control.db.store import ConfigDB, Mutation, Published, build_document, price_record
from proxy.control.errors import ConfigRejected
from proxy.control.publish import DatabasePublisher, SnapshotPublisher
from proxy.errors import GatewayError, PermissionDenied
from proxy.snapshot import Snapshot
from proxy.snapshot.secrets import SecretHosts

Adopt = Callable[[int, dict[str, Any]], Awaitable[None]]
APPROVER: ContextVar[str | None] = ContextVar("approver", default=None)  # set while an approved change runs


class ControlService:
    """Implements ``proxy.ports.ControlStore``; built once, with everything it tells and reads."""

    def __init__(self, db: ConfigDB, *, price_change_factor: Decimal = Decimal(2),
                 publisher: SnapshotPublisher | None = None, adopt: Adopt | None = None,
                 status: Callable[[], dict[str, Any]] | None = None,
                 secret_hosts: SecretHosts | None = None, approve_budgets_above_micro: int | None = None) -> None:
        self.db = db
        self.budget_threshold_micro = approve_budgets_above_micro  # a raise past it takes two people (None: never)
        self.secret_hosts = secret_hosts  # the pod's declared provider secrets: the admin API cannot move a key
        self.factor = price_change_factor
        self.publisher = publisher or DatabasePublisher()
        self.adopt = adopt
        self._status = status

    def snapshot_status(self) -> dict[str, Any]:
        """How this pod follows the config (the follower's status); {} without a follower (the CLI)."""
        return self._status() if self._status is not None else {}

    def now(self) -> datetime:
        return self.db.now()

    async def run(self, actor: str, action: str, obj: str, mutation: Mutation) -> Published:
        published = await asyncio.to_thread(self.db.change, actor, action, obj, mutation, approved_by=APPROVER.get())
        if published.changed:
            self.publisher.publish(published.version, published.document)
            if self.adopt is not None:
                await self.adopt(published.version, published.document)
        return published

    async def denied(self, actor: str, action: str, obj: str) -> None:
        await asyncio.to_thread(self.db.record, actor, action, obj, "denied")

    async def accessed(self, actor: str, action: str, obj: str) -> None:
        """Audit a sensitive read before it is answered; raises ``ControlUnavailable`` when it cannot be."""
        await asyncio.to_thread(self.db.record_access, actor, action, obj)

    async def rejected(self, actor: str, action: str, obj: str, problems: list[str]) -> None:
        await asyncio.to_thread(self.db.record, actor, action, obj, "rejected", None, {"problems": problems})

    async def recorded(self, actor: str, action: str, obj: str, after: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self.db.record, actor, action, obj, "ok", None, dict(after))

    # -- keys ---------------------------------------------------------------------------------

    async def create_key(self, actor: str, body: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        mutation, minted = changes.create_key(changes.key_spec(body), actor, self.now())
        done = await self.run(actor, "keys.create", f"key:{minted.record['id']}", mutation)
        return done.after, minted.plaintext

    async def revoke_key(self, actor: str, key_id: str) -> dict[str, Any]:
        return (await self.run(actor, "keys.revoke", f"key:{key_id}", changes.revoke_key(key_id, self.now()))).after

    async def rotate_key(self, actor: str, key_id: str, overlap_s: float,
                         pins: Mapping[str, list[str]] | None = None) -> tuple[dict[str, Any], str]:
        """``pins``: new ``regions`` / ``deployments`` for the new key (default: the old key's)."""
        mutation, minted = changes.rotate_key(key_id, overlap_s, actor, self.now(), pins)
        done = await self.run(actor, "keys.rotate", f"key:{key_id}", mutation)
        return done.after, minted[0].plaintext

    async def list_keys(self) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            with self.db.read() as s:
                return [changes.key_view(k) for k in s.scalars(sa.select(KeyRow).order_by(KeyRow.created_at))]

        return await asyncio.to_thread(read)

    # -- budgets, teams, apps, business units ---------------------------------------------------------

    async def set_budget(self, actor: str, scope: str, body: Mapping[str, Any]) -> dict[str, Any]:
        spec = changes.budget_spec(body, scope)
        return (await self.run(actor, "budgets.set", f"budget:{scope}", changes.set_budget(scope, spec))).after

    async def put_team(self, actor: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        _only(body, "business_unit", "cost_centre", "body_log")
        mutation = changes.put_team(name, body)
        return (await self.run(actor, "teams.put", f"team:{name}", mutation)).after

    async def put_app(self, actor: str, team: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        _only(body, "cost_centre")
        return (await self.run(actor, "apps.put", f"app:{team}/{name}", changes.put_app(team, name, body))).after

    async def put_business_unit(self, actor: str, name: str) -> dict[str, Any]:
        return (await self.run(actor, "business_units.put", f"bu:{name}", changes.put_business_unit(name))).after

    # -- aliases, deployments, prices -------------------------------------------------------------

    async def put_alias(self, actor: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return (await self.run(actor, "aliases.put", f"alias:{name}", changes.put_alias(name, body))).after

    async def put_deployment(self, actor: str, dep_id: str, body: Mapping[str, Any], allow_large_change: bool = False
                             ) -> dict[str, Any]:
        factor = None if allow_large_change else self.factor
        mutation = changes.put_deployment(dep_id, body, self.now(), actor, factor,
                                          self.secret_hosts or SecretHosts({}))
        return (await self.run(actor, "deployments.put", f"deployment:{dep_id}", mutation)).after

    async def add_prices(self, actor: str, body: Mapping[str, Any], number: int | None = None) -> dict[str, Any]:
        body = dict(body)
        allow = body.pop("allow_large_change", False) is True
        raw_from = body.pop("valid_from", None)
        table = price_changes.price_table(body.pop("prices", None))
        if body:
            raise ConfigRejected([f"{k}: unknown field" for k in body], "price version")
        valid_from = _when(raw_from) if raw_from is not None else self.now()
        mutation = price_changes.add_price_version(number, valid_from, table, actor, None if allow else self.factor)
        return (await self.run(actor, "prices.add", f"prices:v{number or 'next'}", mutation)).after

    async def list_prices(self) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            with self.db.read() as s:
                rows = s.scalars(sa.select(PriceRow)).all()
                return [{"version": v.version, "valid_from": v.valid_from.replace(tzinfo=v.valid_from.tzinfo or timezone.utc).isoformat(),
                         "created_by": v.created_by,
                         "prices": {p.deployment: price_record(p) for p in rows if p.version == v.version}}
                        for v in s.scalars(sa.select(PriceVersionRow).order_by(PriceVersionRow.version))]

        return await asyncio.to_thread(read)

    # -- admin tokens, declarative apply, reads ---------------------------------------------------

    async def create_admin_token(self, actor: str, name: str, role: str) -> tuple[dict[str, Any], str]:
        mutation, minted = changes.create_admin_token(name, role, self.now())
        done = await self.run(actor, "admin_tokens.create", f"admin_token:{name}", mutation)
        return done.after, minted.plaintext

    async def revoke_admin_token(self, actor: str, name: str) -> dict[str, Any]:
        mutation = changes.revoke_admin_token(name, self.now())
        return (await self.run(actor, "admin_tokens.revoke", f"admin_token:{name}", mutation)).after

    async def list_admin_tokens(self) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            with self.db.read() as s:
                return [{"name": t.name, "role": t.role, "revoked": t.revoked_at is not None}
                        for t in s.scalars(sa.select(AdminTokenRow).order_by(AdminTokenRow.name))]

        return await asyncio.to_thread(read)

    async def apply(self, actor: str, tree: Mapping[str, Any], allow_large_change: bool = False) -> tuple[list[str], Published]:
        diff: list[str] = []
        mutation = apply_tree(tree, self.now(), actor, None if allow_large_change else self.factor, diff)
        done = await self.run(actor, "config.apply", "config", mutation)
        return diff, done

    # -- two-person changes -----------------------------------------------------------------------

    def needs_approval(self, action: str, params: Mapping[str, Any], snapshot: Snapshot) -> str | None:
        return needs_approval(snapshot, action, params, self.budget_threshold_micro)

    async def propose(self, actor: str, action: str, obj: str, params: Mapping[str, Any], reason: str
                      ) -> dict[str, Any]:
        """Store a change for a second person, once a dry run says it would apply now."""
        await asyncio.to_thread(self.db.change, actor, action, obj, self._mutation(actor, action, params),
                                dry_run=True)
        return await asyncio.to_thread(pending.propose, self.db, actor, action, obj, params, reason, PENDING_TTL_S)

    async def approve(self, actor: str, role: str, change_id: int) -> dict[str, Any]:
        """Run a pending change proposed by someone else, as its proposer, with ``actor`` audited as approver;
        the result (a minted token's plaintext, once) comes back in ``result``."""
        action = (await asyncio.to_thread(pending.found, self.db, change_id))["action"]
        if role not in ROLES.get(action, ()):
            raise PermissionDenied(f"A {role} token cannot approve {action}.", code="insufficient_role")
        change = await asyncio.to_thread(pending.claim, self.db, actor, change_id)
        token = APPROVER.set(actor)
        try:
            result = await self._execute(change["proposed_by"], change["action"], change["params"])
        except GatewayError as exc:  # the state moved since the proposal: recorded as failed, told as it is
            await asyncio.to_thread(pending.settle, self.db, change_id, False, exc.to_body()["error"])
            raise
        finally:
            APPROVER.reset(token)
        kept = {k: v for k, v in result.items() if k != "token"}  # the plaintext is never stored
        return {**await asyncio.to_thread(pending.settle, self.db, change_id, True, kept), "result": result}

    async def reject(self, actor: str, change_id: int) -> dict[str, Any]:
        return await asyncio.to_thread(pending.reject, self.db, actor, change_id)

    async def list_changes(self, status: str | None, limit: int = 100) -> list[dict[str, Any]]:
        return await asyncio.to_thread(pending.listed, self.db, status, limit)

    def _mutation(self, actor: str, action: str, p: Mapping[str, Any]) -> Mutation:
        if action == "admin_tokens.create":
            return changes.create_admin_token(str(p["name"]), str(p["role"]), self.now())[0]
        if action == "budgets.set":
            return changes.set_budget(str(p["scope"]), changes.budget_spec(p["body"], str(p["scope"])))
        if action == "deployments.put":
            factor = None if p.get("allow_large_change") else self.factor
            return changes.put_deployment(str(p["id"]), p["body"], self.now(), actor, factor,
                                          self.secret_hosts or SecretHosts({}))
        if action == "aliases.put":
            return changes.put_alias(str(p["name"]), p["body"])
        raise ConfigRejected([f"{action}: not a change that waits for approval"])

    async def _execute(self, proposer: str, action: str, p: Mapping[str, Any]) -> dict[str, Any]:
        if action == "admin_tokens.create":
            view, plaintext = await self.create_admin_token(proposer, str(p["name"]), str(p["role"]))
            return {**view, "token": plaintext}
        if action == "budgets.set":
            return await self.set_budget(proposer, str(p["scope"]), p["body"])
        if action == "deployments.put":
            return await self.put_deployment(proposer, str(p["id"]), p["body"], bool(p.get("allow_large_change")))
        if action == "aliases.put":
            return await self.put_alias(proposer, str(p["name"]), p["body"])
        raise ConfigRejected([f"{action}: not a change that waits for approval"])

    # -- reads --------------------------------------------------------------------------------------

    async def audit(self, limit: int = 100, object_prefix: str | None = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.db.audit, limit, object_prefix)

    async def current_document(self) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            with self.db.read() as s:
                return build_document(s)

        return await asyncio.to_thread(read)


def _only(body: Mapping[str, Any], *allowed: str) -> None:
    extra = [k for k in body if k not in allowed]
    if extra:
        raise ConfigRejected([f"{k}: unknown field" for k in extra])


def _when(raw: Any) -> datetime:
    try:
        at = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
        if at.tzinfo is None:
            raise ValueError
    except ValueError:
        raise ConfigRejected([f"valid_from: must be an ISO-8601 time with a zone, got {raw!r}"], "price version") from None
    return at.astimezone(timezone.utc)
