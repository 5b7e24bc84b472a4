"""Virtual keys: minting (the plaintext is shown once) and the embedded key file.

A key is ``fb-<env>-`` plus 256 random bits in URL-safe base64. Only its
SHA-256 hash and a short display id are stored; the key file is JSON Lines,
appended to atomically per record and read at start-up into the snapshot.
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson

from proxy.control.snapshot import hash_key


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
    token_bytes: Callable[[int], bytes] = secrets.token_bytes,
) -> MintedKey:
    raw = base64.urlsafe_b64encode(token_bytes(32)).rstrip(b"=").decode()
    plaintext = f"fb-{env}-{raw}"
    record: dict[str, Any] = {
        "id": f"fb-{env}-{raw[:6]}",
        "hash": hash_key(plaintext),
        "team": team,
        "app": app,
        "aliases": list(aliases),
        "data_class_ceiling": data_class_ceiling,
        "created_at": now_iso,
    }
    if expires_at is not None:
        record["expires_at"] = expires_at
    return MintedKey(plaintext, record)


def read_key_file(path: Path) -> list[dict[str, Any]]:
    """Records from a JSON Lines key file; a missing file is an empty list."""
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not valid JSON ({exc})") from None
        out.append(rec)
    return out


def append_key_record(path: Path, record: dict[str, Any]) -> None:
    """One write of one line, fsynced: a crash leaves the file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(record) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
