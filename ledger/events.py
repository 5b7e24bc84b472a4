"""Event schemas: the system of record.

Every event is a frozen dataclass with a common envelope:

* ``id``: deterministic (derived from request/lease id or config version), so
  every consumer can dedupe and every producer can retry;
* ``type`` and ``schema``: class constants; ``schema`` starts at 1 and is bumped
  for any change to a type's fields (the codec keeps readers for old schemas);
* ``time``: a timezone-aware instant, normalised to UTC;
* ``request_id``: the request the event belongs to (None for lease and config
  events; for a budget notice, the request that crossed the threshold);
* ``key``: the Kafka partition key: the team for request events, the scope
  for lease events and budget notices, None for config events.

Money is integer micro-units of the named currency, never a float. Usage is
a ``ledger.usage.TokenUsage`` (the shared, pure value type; on the wire its
``to_dict()``): the one farebox import ``ledger`` allows itself. Scope ids
are strings like ``"key:fb-dev-1a2b"``, ``"team:payments"``, ``"bu:retail"``,
``"run:abc"``. Encoding lives in ``ledger.codec``.

The types live by what they belong to: the envelope and its checks in
``ledger.envelope``, request events in ``ledger.request_events``, lease events
in ``ledger.lease_events``, re-rating corrections in
``ledger.correction_events``, budget notices and the config audit in
``ledger.notices``. Every name stays importable from here.
"""

from __future__ import annotations

from ledger.archive_events import ArchiveHead
from ledger.correction_events import RatingCorrected
from ledger.envelope import Event
from ledger.lease_events import LeaseEvent, LeaseExpired, LeaseGranted, LeaseRequested, LeaseReturned
from ledger.notices import BudgetThresholdCrossed, ConfigPublished, ConfigRollout
from ledger.reconcile_events import ReconcileReported
from ledger.refusals import RequestRefused
from ledger.request_events import (
    ATTEMPT_OUTCOMES,
    HoldExpired,
    RequestAdmitted,
    RequestAttempted,
    RequestEvent,
    RequestSettled,
)

__all__ = [
    "ATTEMPT_OUTCOMES",
    "EVENT_TYPES",
    "BudgetThresholdCrossed",
    "ConfigPublished",
    "ConfigRollout",
    "Event",
    "HoldExpired",
    "LeaseEvent",
    "LeaseExpired",
    "LeaseGranted",
    "LeaseRequested",
    "LeaseReturned",
    "RatingCorrected",
    "RequestAdmitted",
    "RequestAttempted",
    "RequestEvent",
    "RequestSettled",
    "RequestRefused",
    "ReconcileReported",
    "ArchiveHead",
]

# Every event type the codec reads and writes.
EVENT_TYPES: tuple[type[Event], ...] = (
    RequestAdmitted,
    RequestAttempted,
    RequestSettled,
    HoldExpired,
    LeaseRequested,
    LeaseGranted,
    LeaseReturned,
    LeaseExpired,
    ConfigPublished,
    ConfigRollout,
    BudgetThresholdCrossed,
    RequestRefused,
    ReconcileReported,
    RatingCorrected,
    ArchiveHead,
)
