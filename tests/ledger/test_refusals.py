"""``request.refused``: what admission saw when it refused; strict on the wire, and no balance moves."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import orjson
import pytest

from ledger.balances import Ledger
from ledger.codec import decode, encode
from ledger.errors import CodecError, InvalidEvent
from ledger.events import EVENT_TYPES
from ledger.refusals import RequestRefused
from streams.archive.schema import typed_row

T = datetime(2026, 11, 10, 10, 15, 2, 123456, tzinfo=timezone.utc)


def refused(**changes: object) -> RequestRefused:
    fields: dict = dict(time=T, request_id="req-1", team="payments", key_id="fb-pay-1", business_unit="retail",
                        app="checkout", run_id="run-7", alias="chat-default", est_input_tokens=1200,
                        max_output_tokens=1024, holds={"key:fb-pay-1": 410_000, "team:payments": 410_000,
                                                       "bu:retail": 410_000, "run:run-7": 410_000},
                        currency="INR", price_version=3, pod="pod-a", error_code="budget_exhausted",
                        scope="team:payments")
    fields.update(changes)
    return RequestRefused(**fields)


def test_it_is_registered_and_round_trips_with_a_deterministic_id():
    assert RequestRefused in EVENT_TYPES
    event = refused()
    assert event.id == "req-1/refused/1794305702123456" and event.key == "payments"
    assert decode(encode(event)) == event
    assert list(decode(encode(event)).holds) == ["key:fb-pay-1", "team:payments", "bu:retail", "run:run-7"]


def test_a_retried_request_id_is_a_new_event():
    assert refused().id != refused(time=T.replace(second=3)).id


@pytest.mark.parametrize(("changes", "message"), [
    ({"error_code": "key_requests_per_minute"}, "is not one of"),
    ({"scope": "team:other"}, "is not one of the scopes in holds"),
    ({"scope": None}, "a budget_exhausted refusal names its scope"),
    ({"holds": {"team:payments": -1}}, "must be a non-negative int"),
    ({"price_version": -1}, "must be a non-negative int"),
    ({"team": ""}, "must be a non-empty string"),
])
def test_bad_fields_are_refused(changes, message):
    with pytest.raises(InvalidEvent, match=message):
        refused(**changes)


def test_the_per_request_cap_names_no_scope():
    assert refused(error_code="request_cost_cap_exceeded", scope=None).scope is None


def test_decode_is_strict():
    wire = orjson.loads(encode(refused()))
    with pytest.raises(CodecError, match="unexpected"):
        decode(orjson.dumps({**wire, "data_class": "internal"}))
    with pytest.raises(CodecError, match="envelope does not match"):
        decode(orjson.dumps({**wire, "id": "req-1/refused"}))


def test_it_carries_the_allocation_and_schema_1_is_read_as_none():
    event = refused(cost_centre="CC-7", tags={"project": "atlas"})
    wire = orjson.loads(encode(event))
    assert (wire["schema"], wire["cost_centre"], wire["tags"]) == (2, "CC-7", {"project": "atlas"})
    assert decode(encode(event)) == event
    row = typed_row(wire, stored_at=T, partition=0, offset=1, text=encode(event).decode())
    assert (row["cost_centre"], row["tags"]) == ("CC-7", [("project", "atlas")])
    old = orjson.loads(encode(refused()))
    old["schema"] = 1
    del old["cost_centre"], old["tags"]
    upcast = decode(orjson.dumps(old))
    assert upcast == refused() and (upcast.schema, upcast.cost_centre, dict(upcast.tags)) == (2, None, {})
    with pytest.raises(InvalidEvent):
        refused(tags={"": "x"})


def test_the_ledger_folds_it_to_nothing():
    ledger = Ledger(ZoneInfo("Asia/Kolkata"))
    before = ledger.to_bytes()
    assert ledger.apply(refused()) is False
    assert ledger.to_bytes() == before and ledger.balance("team:payments", "2026-11").requests == 0


def test_its_archive_row_uses_the_existing_columns():
    text = encode(refused()).decode()
    row = typed_row(orjson.loads(text), stored_at=T, partition=0, offset=9, text=text)
    assert (row["type"], row["request_id"], row["team"], row["key_id"], row["business_unit"], row["app"],
            row["run_id"], row["alias"], row["price_version"], row["error_code"], row["scope"]) == (
        "request.refused", "req-1", "payments", "fb-pay-1", "retail", "checkout", "run-7", "chat-default", 3,
        "budget_exhausted", "team:payments")
    assert row["holds"] == [{"scope": s, "micro": 410_000}
                            for s in ("bu:retail", "key:fb-pay-1", "run:run-7", "team:payments")]


def test_the_distributed_splitter_ignores_it():
    from ledger.splitting import split

    result = split(refused(), None, ZoneInfo("Asia/Kolkata"))
    assert result.entries == [] and result.state is None
