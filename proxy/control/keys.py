"""Virtual keys: minting; the plaintext is shown once.

A key is ``fb-<env>-`` plus 256 random bits in URL-safe base64. Only its
SHA-256 hash and a short display id are stored (the config database's ``keys`` table).
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from proxy.snapshot import hash_key


@dataclass(frozen=True)
class MintedKey:
    plaintext: str  # shown once, never stored
    record: dict[str, Any]  # what the key file stores


def mint_key(
    *,
    team: str,
    app: str,
    aliases: list[str],
    now_iso: str,
    env: str = "dev",
    data_class_ceiling: str = "internal",
    expires_at: float | None = None,
    limits: dict[str, int] | None = None,
    token_bytes: Callable[[int], bytes] = secrets.token_bytes,
) -> MintedKey:
    """``limits``: any of rpm, input_tpm, output_tpm (else the config's key defaults)."""
    raw = base64.urlsafe_b64encode(token_bytes(32)).rstrip(b"=").decode()
    plaintext = f"fb-{env}-{raw}"
    # The display id is drawn on its own: nothing of the secret shows in lists, logs, events or the UI.
    # (Keys minted before carry the secret's first 6 characters as their id; those ids keep working.)
    shown = secrets.token_hex(5)
    record: dict[str, Any] = {
        "id": f"fb-{env}-{shown}",
        "hash": hash_key(plaintext),
        "team": team,
        "app": app,
        "aliases": list(aliases),
        "data_class_ceiling": data_class_ceiling,
        "created_at": now_iso,
    }
    if expires_at is not None:
        record["expires_at"] = expires_at
    record.update({k: v for k, v in (limits or {}).items() if v is not None})
    return MintedKey(plaintext, record)


def mint_admin_token(
    *, name: str, role: str, now_iso: str, token_bytes: Callable[[int], bytes] = secrets.token_bytes
) -> MintedKey:
    """An admin API token (``fbadm-…``); only its hash and role are stored."""
    raw = base64.urlsafe_b64encode(token_bytes(32)).rstrip(b"=").decode()
    plaintext = f"fbadm-{raw}"
    return MintedKey(plaintext, {"name": name, "role": role, "hash": hash_key(plaintext), "created_at": now_iso})
