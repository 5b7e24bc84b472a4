from datetime import datetime, timedelta, timezone

import orjson
import pytest
from event_strategies import any_event
from hypothesis import given

from ledger.codec import decode, encode, format_time, from_dict, parse_time, to_dict
from ledger.errors import CodecError, InvalidEvent, UnknownEventType
from ledger.events import (
    EVENT_TYPES,
    BudgetThresholdCrossed,
    ConfigPublished,
    HoldExpired,
    LeaseGranted,
    LeaseRequested,
    LeaseReturned,
    RatingCorrected,
    RequestAdmitted,
    RequestAttempted,
    RequestSettled,
)
from ledger.usage import TokenUsage

T = datetime(2026, 10, 3, 10, 15, 2, 123456, tzinfo=timezone.utc)
USAGE = TokenUsage(input=338, cached_input=1536, output=212)


def admitted(**overrides) -> RequestAdmitted:
    fields = dict(
        time=T, request_id="req-1", team="payments", key_id="fb-dev-1a2b", business_unit="retail",
        app="support-bot", run_id=None, alias="chat-default", data_class="internal",
        est_input_tokens=1900, max_output_tokens=1024,
        holds={"key:fb-dev-1a2b": 1_234_567, "team:payments": 1_234_567}, currency="INR",
        price_version=17, pod="pod-a", hold_ttl_s=600, stream=True,
    )
    return RequestAdmitted(**{**fields, **overrides})


def attempted(**overrides) -> RequestAttempted:
    fields = dict(
        time=T, request_id="req-1", team="payments", attempt=1, deployment="b-mid-mumbai",
        provider="openai", account="acct-retail", model="gpt-x-2026-10-01", region="ap-south-1",
        outcome="ok", status=200, ttft_ms=412, latency_ms=3100, usage=USAGE, cost_micro=273_082,
        currency="INR", price_version=17, error_code=None,
    )
    return RequestAttempted(**{**fields, **overrides})


def test_ids_and_keys_are_deterministic():
    assert admitted().id == "req-1/admitted"
    assert admitted().key == "payments"
    assert attempted(attempt=2).id == "req-1/attempt/2"
    settled = RequestSettled(
        time=T, request_id="req-1", team="payments", final_status=200, attempts=1,
        deployment="b-mid-mumbai", usage=USAGE, cost_micro=273_082, currency="INR",
        cost_by_scope={"team:payments": 273_082}, hold_released={"team:payments": 961_485},
        overrun_micro=0, cache_hit=False, latency_ms=3100,
    )
    assert settled.id == "req-1/settled"
    assert HoldExpired(time=T, request_id="req-1", team="payments", charged={}, currency="INR").id == "req-1/expired"
    lease = dict(time=T, lease_id="L9", scope="team:payments", pod="pod-a", amount_micro=200_000_000, expires_at=T)
    assert LeaseRequested(**lease).id == "L9/requested"
    assert LeaseGranted(**lease).id == "L9/granted"
    assert LeaseReturned(**lease).id == "L9/returned"
    assert LeaseGranted(**lease).key == "team:payments"
    assert LeaseGranted(**lease).request_id is None
    config = ConfigPublished(time=T, version=42, content_hash="sha256:ab")
    assert (config.id, config.key, config.request_id) == ("config/42", None, None)


def test_usage_must_be_token_usage():
    with pytest.raises(InvalidEvent, match="TokenUsage"):
        attempted(usage={"input": 1})
    with pytest.raises(InvalidEvent, match="usage.input"):
        attempted(usage=TokenUsage(input=-1))
    assert attempted().usage.cached_input == 1536


def test_wire_shape():
    wire = orjson.loads(encode(attempted()))
    assert wire["type"] == "request.attempted"
    assert wire["schema"] == 3
    assert wire["project"] is None
    assert wire["id"] == "req-1/attempt/1"
    assert wire["key"] == "payments"
    assert wire["request_id"] == "req-1"
    assert wire["time"] == "2026-10-03T10:15:02.123456Z"
    assert wire["usage"] == {"input": 338, "cached_input": 1536, "cache_write": 0, "output": 212, "reasoning": 0, "source": "provider"}
    assert wire["cost_micro"] == 273_082


def test_an_attempt_names_its_project_or_none():
    assert orjson.loads(encode(attempted(project="proj-search")))["project"] == "proj-search"
    with pytest.raises(InvalidEvent, match="project"):
        attempted(project="")
    old = {k: v for k, v in to_dict(attempted()).items() if k != "project"} | {"schema": 2}
    assert from_dict(old).project is None  # schema 2 is read as naming no project


def test_times_are_normalised_to_utc_with_microseconds():
    ist = timezone(timedelta(hours=5, minutes=30))
    event = admitted(time=datetime(2026, 10, 3, 15, 45, 2, tzinfo=ist))
    assert event.time.tzinfo is timezone.utc
    assert to_dict(event)["time"] == "2026-10-03T10:15:02.000000Z"
    assert parse_time(format_time(T)) == T


@given(any_event)
def test_round_trip(event):
    assert decode(encode(event)) == event
    assert encode(decode(encode(event))) == encode(event)


def test_every_type_is_registered():
    assert len({cls.type for cls in EVENT_TYPES}) == len(EVENT_TYPES) == 15


def test_events_are_immutable():
    event = admitted()
    with pytest.raises(AttributeError):
        event.team = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.holds["team:x"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    "bad",
    [
        dict(time=datetime(2026, 1, 1)),
        dict(request_id=""),
        dict(holds={"team:payments": -1}),
        dict(holds={"team:payments": 1.5}),
        dict(est_input_tokens=True),
    ],
)
def test_invalid_admitted_is_refused(bad):
    with pytest.raises(InvalidEvent):
        admitted(**bad)


def test_invalid_attempts_are_refused():
    with pytest.raises(InvalidEvent, match="from 1"):
        attempted(attempt=0)
    with pytest.raises(InvalidEvent, match="outcome"):
        attempted(outcome="fine")
    with pytest.raises(InvalidEvent):
        LeaseGranted(time=T, lease_id="L", scope="team:x", pod="p", amount_micro=1, expires_at=None)


def _wire(**changes) -> bytes:
    data = to_dict(attempted())
    data.update(changes)
    return orjson.dumps({k: v for k, v in data.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"not json", CodecError, "not valid JSON"),
        (b"[1, 2]", CodecError, "JSON object"),
        (_wire(type="request.teleported"), UnknownEventType, "request.teleported"),
        (_wire(schema=99), UnknownEventType, "schema 99"),
        (_wire(schema=True), UnknownEventType, "schema True"),
        (_wire(cost_micro=0.27), CodecError, "cost_micro must be an integer"),
        (_wire(cost_micro="273082"), CodecError, "integer"),
        (_wire(cost_micro=True), CodecError, "cost_micro must be an integer"),
        (_wire(cost_micro=-1), CodecError, "cost_micro must be a non-negative int"),
        (_wire(model=5), CodecError, "model must be str"),
        (_wire(usage={**USAGE.to_dict(), "output": False}), CodecError, "usage.output"),
        (_wire(time="2026-10-03T10:15:02Z"), CodecError, "time must look like"),
        (_wire(model=_DROP), CodecError, r"missing fields \['model'\]"),
        (_wire(surprise=1), CodecError, r"unexpected \['surprise'\]"),
        (_wire(id="req-2/attempt/1"), CodecError, "envelope does not match"),
        (_wire(key="other-team"), CodecError, "envelope does not match"),
        (_wire(attempt=0), CodecError, "from 1"),
        (_wire(usage={"input": 1, "tokens": 3}), CodecError, "usage"),
        (_wire(usage={**USAGE.to_dict(), "output": 2.5}), CodecError, "usage.output"),
        (_wire(ttft_ms=None), None, None),
    ],
)
def test_decode_errors_are_clear(data, error, match):
    if error is None:
        assert decode(data).ttft_ms is None  # type: ignore[attr-defined]
        return
    with pytest.raises(error, match=match):
        decode(data)


def crossed(**overrides) -> BudgetThresholdCrossed:
    fields = dict(
        time=T, request_id="req-9", scope="team:payments", period="2026-10", limit_micro=100_000_000,
        spent_micro=80_000_123, threshold_pct=80, currency="INR",
    )
    return BudgetThresholdCrossed(**{**fields, **overrides})


def test_threshold_crossed_envelope_and_wire():
    event = crossed()
    assert (event.id, event.key, event.request_id) == ("team:payments/2026-10/soft", "team:payments", "req-9")
    wire = orjson.loads(encode(event))
    assert wire == {
        "type": "budget.threshold_crossed", "schema": 1, "id": "team:payments/2026-10/soft",
        "time": "2026-10-03T10:15:02.123456Z", "request_id": "req-9", "key": "team:payments",
        "scope": "team:payments", "period": "2026-10", "limit_micro": 100_000_000,
        "spent_micro": 80_000_123, "threshold_pct": 80, "currency": "INR",
    }
    assert decode(encode(event)) == event


@pytest.mark.parametrize(
    "bad",
    [dict(period="2026-13"), dict(period="2026-1"), dict(period="26-10-01"), dict(threshold_pct=0),
     dict(threshold_pct=101), dict(spent_micro=-1), dict(scope=""), dict(request_id="")],
)
def test_invalid_threshold_crossed_is_refused(bad):
    with pytest.raises(InvalidEvent):
        crossed(**bad)


def test_threshold_crossed_envelope_is_checked_on_decode():
    data = to_dict(crossed())
    with pytest.raises(CodecError, match="envelope does not match"):
        decode(orjson.dumps({**data, "id": "team:payments/2026-11/soft"}))
    with pytest.raises(CodecError, match="envelope does not match"):
        decode(orjson.dumps({**data, "key": "team:other"}))


def test_schema_1_admissions_and_returns_are_upcast():
    old = to_dict(admitted())
    old["schema"] = 1
    for name in ("leases", "cost_centre", "tags", "retry_of"):
        del old[name]
    assert decode(orjson.dumps(old)) == admitted()
    returned = {"type": "lease.returned", "schema": 1, "id": "L1/returned", "time": "2026-10-03T10:15:02.123456Z",
                "request_id": None, "key": "team:payments", "lease_id": "L1", "scope": "team:payments",
                "pod": "pod-a", "amount_micro": 5, "expires_at": None}
    event = decode(orjson.dumps(returned))
    assert (event.schema, event.funded_micro, event.amount_micro) == (2, 0, 5)


def test_schema_2_admissions_are_upcast_to_no_cost_centre_no_tags_not_a_retry():
    old = to_dict(admitted())
    old["schema"] = 2
    for name in ("cost_centre", "tags", "retry_of"):
        del old[name]
    event = decode(orjson.dumps(old))
    assert event == admitted()
    assert (event.schema, event.cost_centre, dict(event.tags), event.retry_of) == (5, None, {}, None)


def test_schema_3_admissions_are_upcast_to_no_privacy_step():
    old = to_dict(admitted())
    old["schema"] = 3
    for name in ("privacy_kinds", "privacy_action", "privacy_policy_version", "privacy_policy_hash",
                 "prompt_hash", "privacy_scan_skipped"):
        del old[name]
    event = decode(orjson.dumps(old))
    assert event == admitted()
    assert (event.schema, dict(event.privacy_kinds), event.privacy_action, event.prompt_hash) == (5, {}, "allow", "")


def settled(**overrides) -> RequestSettled:
    fields = dict(
        time=T, request_id="req-1", team="payments", final_status=200, attempts=0, deployment="b-mid-mumbai",
        usage=USAGE, cost_micro=0, currency="INR", cost_by_scope={"team:payments": 0},
        hold_released={"team:payments": 961_485}, overrun_micro=0, cache_hit=True, latency_ms=4,
        cache_saved_micro=273_082, cache_kind="exact",
    )
    return RequestSettled(**{**fields, **overrides})


def test_schema_2_settlements_are_upcast_to_a_hit_of_the_exact_cache_or_no_hit():
    for event in (settled(), settled(cache_hit=False, cache_kind=None, cache_saved_micro=0, attempts=1)):
        old = to_dict(event)
        old["schema"] = 2
        del old["cache_kind"], old["cache_similarity"]
        upcast = decode(orjson.dumps(old))
        assert upcast == event and upcast.schema == 3


def test_a_semantic_hit_carries_its_similarity_and_only_a_hit_names_a_cache():
    event = settled(cache_kind="semantic", cache_similarity="0.9731")
    wire = to_dict(event)
    assert (wire["schema"], wire["cache_kind"], wire["cache_similarity"]) == (3, "semantic", "0.9731")
    assert decode(encode(event)) == event
    assert settled(cache_kind=None).cache_kind == "exact"  # a hit naming no cache: the exact one, as before
    for bad in (dict(cache_kind="fuzzy"), dict(cache_hit=False),
                dict(cache_kind="exact", cache_similarity="0.99"), dict(cache_kind="semantic")):
        with pytest.raises(InvalidEvent, match="cache_"):
            settled(**bad)


def test_admission_carries_privacy_kinds_and_hashes_never_values():
    event = admitted(privacy_kinds={"email": 2, "pan": 1}, privacy_action="redact", privacy_policy_version=3,
                     privacy_policy_hash="ab" * 32, prompt_hash="cd" * 32)
    wire = to_dict(event)
    assert (wire["schema"], wire["privacy_kinds"], wire["privacy_action"], wire["privacy_policy_version"]) == (
        5, {"email": 2, "pan": 1}, "redact", 3)
    assert decode(orjson.dumps(wire)) == event


def test_admission_carries_cost_centre_tags_and_retry_of_on_the_wire():
    event = admitted(cost_centre="CC-4410", tags={"project": "atlas", "env": "prod"}, retry_of="r-0")
    wire = to_dict(event)
    assert (wire["schema"], wire["cost_centre"], wire["tags"], wire["retry_of"]) == (
        5, "CC-4410", {"project": "atlas", "env": "prod"}, "r-0")
    assert decode(encode(event)) == event
    with pytest.raises(CodecError, match="must be a string"):
        decode(orjson.dumps({**wire, "tags": {"project": 7}}))
    for bad in (dict(cost_centre=""), dict(tags={"": "x"}), dict(retry_of="")):
        with pytest.raises(InvalidEvent):
            admitted(**bad)


def test_schema_1_lease_requests_are_upcast_to_a_demand_of_one_hold():
    asked = {"type": "lease.requested", "schema": 1, "id": "L2/requested", "time": "2026-10-03T10:15:02.123456Z",
             "request_id": None, "key": "team:payments", "lease_id": "L2", "scope": "team:payments",
             "pod": "pod-a", "amount_micro": 7, "expires_at": None}
    event = decode(orjson.dumps(asked))
    assert (event.schema, event.least_micro, event.least) == (2, 0, 7)
    batched = LeaseRequested(time=T, lease_id="L3", scope="team:payments", pod="pod-a", amount_micro=30,
                             expires_at=None, least_micro=10)
    assert decode(encode(batched)) == batched and batched.least == 10


# --- rating.corrected ---------------------------------------------------------------


def corrected(**overrides) -> RatingCorrected:
    fields = dict(
        time=T, request_id="req-1", team="payments", sequence=1,
        admitted_at=datetime(2026, 9, 30, 19, 0, tzinfo=timezone.utc), currency="INR",
        old_price_version=2, price_version=3, old_cost_micro=2_730_820, cost_micro=273_082,
        old_cost_by_scope={"key:fb-dev-1a2b": 2_730_820, "team:payments": 2_730_820},
        cost_by_scope={"key:fb-dev-1a2b": 273_082, "team:payments": 273_082},
        old_attempt_costs={"1": 2_730_820}, attempt_costs={"1": 273_082}, reason="re-rated under price version 3",
    )
    return RatingCorrected(**{**fields, **overrides})


def test_correction_envelope_and_wire():
    event = corrected(sequence=2)
    assert (event.id, event.key, event.request_id) == ("req-1/rerate/2", "payments", "req-1")
    wire = to_dict(event)
    assert wire["type"] == "rating.corrected" and wire["schema"] == 1
    assert wire["admitted_at"] == "2026-09-30T19:00:00.000000Z"
    assert wire["attempt_costs"] == {"1": 273_082}
    assert decode(encode(event)) == event
    assert event.deltas() == {"key:fb-dev-1a2b": -2_457_738, "team:payments": -2_457_738}


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(sequence=0), "from 1"),
        (dict(admitted_at=datetime(2026, 9, 30)), "admitted_at"),
        (dict(cost_by_scope={"team:payments": -1}), "non-negative"),
        (dict(attempt_costs={"x": 273_082}), "attempt numbers"),
        (dict(attempt_costs={"01": 273_082}), "attempt numbers"),
        (dict(attempt_costs={"2": 273_082}), "same attempts"),
        (dict(cost_micro=1), "sums"),
        (dict(currency=""), "currency"),
    ],
)
def test_invalid_corrections_are_refused(bad, match):
    with pytest.raises(InvalidEvent, match=match):
        corrected(**bad)


def test_correction_envelope_is_checked_on_decode():
    wire = to_dict(corrected())
    wire["id"] = "req-1/rerate/3"
    with pytest.raises(CodecError, match="envelope"):
        decode(orjson.dumps(wire))


def test_admission_records_its_client_surface_and_older_ones_read_as_chat():
    event = admitted(api="messages")
    wire = orjson.loads(encode(event))
    assert (wire["schema"], wire["api"]) == (5, "messages") and decode(orjson.dumps(wire)) == event
    old = {k: v for k, v in wire.items() if k != "api"}
    old["schema"] = 4
    assert decode(orjson.dumps(old)).api == "chat"


def test_a_served_tier_rides_in_the_usage_only_when_not_standard():
    standard = encode(attempted())
    assert b"service_tier" not in standard
    flex = attempted(usage=TokenUsage(input=338, cached_input=1536, output=212, service_tier="flex"))
    wire = encode(flex)
    assert orjson.loads(wire)["usage"]["service_tier"] == "flex"
    assert decode(wire) == flex and decode(standard).usage.service_tier is None
    for bad in ("Flex", "", "x" * 40, "flex tier"):
        with pytest.raises(InvalidEvent, match="service_tier"):
            attempted(usage=TokenUsage(input=1, service_tier=bad))
    data = orjson.loads(wire)
    data["usage"]["service_tier"] = 7
    with pytest.raises(CodecError, match="service_tier"):
        decode(orjson.dumps(data))
