"""Two people for the changes that matter: one admin proposes, a different one approves.

Over the admin API these changes wait as *pending* until a second person approves them (seed: "admin
actions are audited with their approver"):

* minting an admin token of any role (so admin cannot mint an auditor token alone);
* raising a budget's monthly limit above ``approve_budgets_above`` (the config's threshold, if set);
* adding a deployment;
* routing an alias to a provider it did not use before (a new alias counts as new to every provider).

``needs_approval`` decides (pure: the pod's snapshot and the request); ``Approvals`` stores proposals in the
config database and, on approval by someone else, runs the change as the proposer with the approver's name
beside it in the audit record (``audit_log.approved_by``). A proposal is validated when it is made (a
change that could never apply is a 400 at once), runs again in full when approved, and expires after
``PENDING_TTL``. The CLI on the config host skips all this: it is the break-glass path, audited as
``cli:<user>``.

Invariants: the proposer never approves their own change; a change runs at most once (the row is claimed in
a transaction before it runs); a minted token's plaintext is returned once, to the approver, and never
stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from proxy.control.policies import budget_limit_from
from proxy.control.problems import Problems, Reader
from proxy.snapshot import Snapshot

# Actions whose approval this module can run, and the roles that may propose or approve each.
ROLES = {
    "admin_tokens.create": ("admin",),
    "budgets.set": ("admin", "finance"),
    "deployments.put": ("admin",),
    "aliases.put": ("admin",),
}
PENDING_TTL_S = 7 * 86_400  # a proposal nobody approved within a week is void


def needs_approval(snapshot: Snapshot, action: str, params: Mapping[str, Any],
                   budget_threshold_micro: int | None) -> str | None:
    """Why this admin-API change needs a second person; None when one may make it alone."""
    if action == "admin_tokens.create":
        return f"minting an admin token (role {params.get('role')}) takes a second admin"
    if action == "deployments.put":
        if params["id"] not in snapshot.deployments:
            return "adding a deployment takes a second admin"
        return None
    if action == "aliases.put":
        return _new_provider(snapshot, str(params["name"]), params.get("body") or {})
    if action == "budgets.set" and budget_threshold_micro is not None:
        return _budget_raise(snapshot, str(params["scope"]), params.get("body") or {}, budget_threshold_micro)
    return None


def _new_provider(snapshot: Snapshot, name: str, body: Mapping[str, Any]) -> str | None:
    wanted = body.get("deployments")
    if not isinstance(wanted, list):
        return None  # the change itself will be refused with a clear problem
    current = snapshot.aliases.get(name)
    before = {snapshot.deployments[d].provider for d in (current.deployments if current else ())
              if d in snapshot.deployments}
    after = {snapshot.deployments[d].provider for d in wanted if isinstance(d, str) and d in snapshot.deployments}
    new = sorted(after - before)
    return f"routing alias {name} to a new provider ({', '.join(new)}) takes a second admin" if new else None


def _budget_raise(snapshot: Snapshot, scope: str, body: Mapping[str, Any], threshold_micro: int) -> str | None:
    problems = Problems()
    limit = budget_limit_from(Reader(dict(body), f"budgets.{scope}", problems)).limit_micro
    if problems.items or limit is None or limit <= threshold_micro:
        return None  # a bad body is refused by the change itself, with every problem listed
    current = snapshot.budgets.limit_for(scope)
    if current is not None and current.limit_micro is not None and limit <= current.limit_micro:
        return None  # a cut, or no raise, needs no second person
    shown = Decimal(threshold_micro) / Decimal(1_000_000)
    return f"raising a budget above {shown:f} {snapshot.currency} takes a second person"
