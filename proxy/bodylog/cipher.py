"""Per-team sealing of logged bodies: AES-256-GCM under a key derived per team with HKDF-SHA256.

A sealed blob is ``b"\\x01" + nonce (12 bytes) + ciphertext-and-tag``. The
associated data binds it to its team and request id: a row copied to another
team or request does not open. One team's key never opens another team's
rows; the master key (at least 32 random bytes) comes from the environment
or the secrets file through the composition root and lives only in memory.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

VERSION = b"\x01"
NONCE_BYTES = 12
MIN_MASTER_BYTES = 32
_SALT = b"farebox body log v1"


class SealError(Exception):
    """A blob that does not open under this team's key and request id (wrong key, moved or altered)."""


class TeamCipher:
    __slots__ = ("_master", "_keys")

    def __init__(self, master: bytes) -> None:
        if len(master) < MIN_MASTER_BYTES:
            raise ValueError(f"the body-log master key must be at least {MIN_MASTER_BYTES} bytes")
        self._master = master
        self._keys: dict[str, AESGCM] = {}

    def _key(self, team: str) -> AESGCM:
        aead = self._keys.get(team)
        if aead is None:
            raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=b"team:" + team.encode()).derive(
                self._master)
            aead = self._keys[team] = AESGCM(raw)
        return aead

    def seal(self, team: str, request_id: str, plaintext: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._key(team).encrypt(nonce, plaintext, _aad(team, request_id))

    def open(self, team: str, request_id: str, blob: bytes) -> bytes:
        if blob[:1] != VERSION or len(blob) < 1 + NONCE_BYTES + 16:
            raise SealError("not a sealed body of this version")
        nonce = blob[1:1 + NONCE_BYTES]
        try:
            return self._key(team).decrypt(nonce, blob[1 + NONCE_BYTES:], _aad(team, request_id))
        except InvalidTag:
            raise SealError(f"the body of {request_id} does not open under team {team!r}'s key") from None


def _aad(team: str, request_id: str) -> bytes:
    return f"{team}\x00{request_id}".encode()
