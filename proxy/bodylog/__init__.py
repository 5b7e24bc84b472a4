"""Opt-in encrypted body logging: a team's request and answer bodies, sealed with the team's key.

``TeamCipher`` seals and opens (AES-256-GCM, a key per team derived from the
pod's master key); ``BodyStore`` keeps sealed rows in their own database;
``BodyLog`` is the shell the request path hands bodies to (queued, sealed and
written off the hot path) and the sweeper that deletes rows past retention.
Bodies never reach events or logs; only the admin route for role
``auditor`` opens them, and every read is audited.
"""

from proxy.bodylog.cipher import TeamCipher
from proxy.bodylog.log import BodyLog
from proxy.bodylog.store import BodyStore

__all__ = ["BodyLog", "BodyStore", "TeamCipher"]
