"""Errors of the ledger package.

Hierarchy::

    LedgerError              base
      InvalidEvent           an event violates its own schema (bad field value)
      CodecError             bytes that are not a valid encoded event
        UnknownEventType     a ``type`` / ``schema`` pair this build cannot read
      CheckpointError        bytes that are not a ledger checkpoint this build can read

These are programming or data errors, never a caller's: if one reaches the
HTTP edge it is a 500.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every ledger error."""


class InvalidEvent(LedgerError, ValueError):
    pass


class CodecError(LedgerError, ValueError):
    pass


class UnknownEventType(CodecError):
    pass


class CheckpointError(LedgerError, ValueError):
    pass
