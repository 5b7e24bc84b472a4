"""The embedded state files of earlier releases, imported into the config database.

``state_dir/keys.jsonl``, ``budgets.jsonl`` and ``admin-tokens.jsonl`` were the
embedded control state before the config database. They keep working as an
*inbox*: whatever is appended to them (by an older CLI, a script) is imported
into the database by the next pod poll, once (the byte offset reached per
file is stored in ``state_imports`` in the same transaction), then published
like any other change. The database is the source of truth; the files are
never rewritten.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy.orm import Session

from proxy.control import statefile
from proxy.control.db.models import AdminTokenRow, BudgetRow, ImportRow, KeyRow
from proxy.control.db.store import Mutation
from proxy.control.errors import ConfigRejected

FILES = (statefile.KEYS, statefile.BUDGETS, statefile.ADMIN_TOKENS)


def pending(folder: Path, offsets: dict[str, int]) -> bool:
    """Cheap check (a stat per file): has any state file grown past what was imported?"""
    for name in FILES:
        try:
            size = (folder / name).stat().st_size
        except FileNotFoundError:
            continue
        if size != offsets.get(name, 0):
            return True
    return False


def offsets(s: Session) -> dict[str, int]:
    return {r.source: r.offset for r in s.query(ImportRow)}


def import_files(folder: Path, now: datetime, actor: str, done: dict[str, int]) -> Mutation:
    """Import the new whole lines of every state file; ``done`` receives the offsets reached."""

    def mutate(s: Session) -> tuple[Any, Any]:
        imported: list[str] = []
        problems: list[str] = []
        for name in FILES:
            path = folder / name
            if not path.exists():
                continue
            row = s.get(ImportRow, name)
            if row is None:
                row = ImportRow(source=name, offset=0)
                s.add(row)
            data = path.read_bytes()
            if len(data) < row.offset:  # replaced by a shorter file: read it again (imports are idempotent)
                row.offset = 0
            chunk = data[row.offset:]
            end = chunk.rfind(b"\n") + 1  # a line being written is left for the next poll
            for n, line in enumerate(chunk[:end].splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    problems.append(f"{name}: a line after byte {row.offset} is not valid JSON")
                    continue
                imported.append(_IMPORTERS[name](s, rec, now, actor))
            row.offset += end
            done[name] = row.offset
        if problems:
            raise ConfigRejected(problems, "state file import")
        return None, ({"imported": imported} if imported else None)

    return mutate


def _key(s: Session, rec: dict[str, Any], now: datetime, actor: str) -> str:
    row = s.query(KeyRow).filter(KeyRow.hash == rec.get("hash")).first()
    revoked = bool(rec.get("revoked"))
    if row is not None:
        if revoked and row.revoked_at is None:
            row.revoked_at = now
        if rec.get("expires_at") is not None:
            row.expires_at = float(rec["expires_at"])
        return f"~ key {row.id}"
    key_id = str(rec.get("id"))
    s.add(KeyRow(
        id=key_id, hash=str(rec.get("hash")), team=str(rec.get("team")), app=str(rec.get("app")),
        env=rec.get("env") or ("prod" if key_id.startswith("fb-prod-") else "dev"), aliases=list(rec.get("aliases") or []),
        data_class_ceiling=rec.get("data_class_ceiling", "internal"),
        default_data_class=rec.get("default_data_class", "internal"), rpm=rec.get("rpm"),
        input_tpm=rec.get("input_tpm"), output_tpm=rec.get("output_tpm"),
        regions=list(rec.get("regions") or []) or None, deployments=list(rec.get("deployments") or []) or None,
        expires_at=float(rec["expires_at"]) if rec.get("expires_at") is not None else None,
        revoked_at=now if revoked else None, created_at=now, created_by=actor,
    ))
    s.flush()
    return f"+ key {key_id}"


def _budget(s: Session, rec: dict[str, Any], now: datetime, actor: str) -> str:
    scope = str(rec.get("scope"))
    row = s.get(BudgetRow, scope) or BudgetRow(scope=scope)
    limit = rec.get("monthly_limit", rec.get("limit"))
    row.monthly_limit = None if limit is None else str(Decimal(str(limit)))
    row.soft_pct = rec.get("soft_pct", 80)
    row.downgrade_alias = rec.get("downgrade_alias")
    row.max_calls = rec.get("max_calls")
    row.env = rec.get("env", "any")
    s.add(row)
    s.flush()
    return f"~ budget {scope}"


def _admin_token(s: Session, rec: dict[str, Any], now: datetime, actor: str) -> str:
    name = str(rec.get("name"))
    row = s.get(AdminTokenRow, name)
    if rec.get("revoked"):
        if row is not None and row.revoked_at is None:
            row.revoked_at = now
        return f"- admin token {name}"
    if row is None:
        s.add(AdminTokenRow(name=name, role=str(rec.get("role")), hash=str(rec.get("hash")), created_at=now))
    else:
        row.role, row.hash, row.revoked_at = str(rec.get("role")), str(rec.get("hash")), None
    s.flush()
    return f"+ admin token {name}"


_IMPORTERS = {statefile.KEYS: _key, statefile.BUDGETS: _budget, statefile.ADMIN_TOKENS: _admin_token}
