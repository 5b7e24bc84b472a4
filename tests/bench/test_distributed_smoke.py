"""The distributed bench runs every part end to end at tiny sizes (correctness facts only, no timing asserts).

Real Kafka broker, real Redis, real worker processes and, for the early-stop
part, 3 real pods: the same code ``make bench-distributed`` runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.kafka.broker import KafkaBroker
from tests.bench.distributed.__main__ import main
from tests.infra.kafka.support import session_broker
from tests.kafka_leaks import absorb_kafka_leaks  # noqa: F401 (autouse fixture; needs the kafka_broker name)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def kafka_broker() -> KafkaBroker:
    return session_broker()  # the bench takes the same session broker


def test_distributed_bench_every_part_tiny(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    out = tmp_path / "distributed.json"
    code = main(["--requests", "200", "--profile", "never", "--rate", "100", "--duration", "2", "--leases", "10",
                 "--concurrent", "12", "--concurrency", "4", "--burst", "45", "--json", str(out)])
    rep = json.loads(out.read_text())
    assert code == 0, rep["problems"]

    t = rep["throughput"]  # 1: every produced request folded, balances equal the produced costs
    assert t["request_events"] == 600 and 0 < t["rollup_rows"] <= 200  # rows add up per key and batch
    assert 0 < t["scope_records"] <= 1200  # 1,200 entries (3 scopes x admit + close), one record per scope and batch
    assert t["settled_equals_produced"] and t["requests_equal_produced"] and t["held_zero"] and t["committed_to_end"]
    assert t["request_events_per_s"] > 0 and t["profile"] is None

    lag = rep["lag"]  # 2: open loop, sampled, drained, nothing lost
    assert lag["requests"] == 200 and lag["events"] == 600 and lag["samples"] >= 2
    assert lag["settled_equals_produced"] and lag["requests_equal_produced"] and lag["committed_to_end"]
    for topic in ("requests", "scope_entries"):
        assert lag["topics"][topic]["lag_events"]["n"] == lag["samples"]
        assert lag["topics"][topic]["lag_events"]["max"] >= 0

    le = rep["leases"]  # 3: every request answered once by a grant that covers it, every lease back
    assert le["sequential"]["n"] == 10 and le["concurrent"]["n"] == 12
    assert le["all_answered_once"] and le["stray_grants"] == 0 and le["grants_cover_need"]
    assert le["leased_at_end"] == {"alpha": 0, "beta": 0, "gamma": 0}

    es = rep["early_stop"]  # 4: 3 pods, the team stopped before its limit, never beyond recorded overrun
    assert es["pods"] == 3 and es["pod_exit_codes"] == [0, 0, 0]
    refused = es["refused_429"] + es["refused_reserved"] + es["refused_503"]
    assert es["admitted"] + refused == 45 and es["other_errors"] == 0
    assert es["admitted"] > 0 and refused > 0
    assert es["first_refusal"] is not None and 0 <= es["first_refusal"]["unused_micro"] <= es["limit_micro"]
    assert es["overshoot_beyond_overrun_micro"] == 0 and es["eventlog"]["peak_excess_beyond_overrun_micro"] == 0
    el = es["eventlog"]
    assert el["admitted"] == es["admitted"] == el["settled"] + el["expired"] and el["held_micro_at_end"] == 0
    assert es["projection_settled_equals_events"] and es["cost_mismatches"] == 0 and es["duplicates_in_kafka"] == 0
    assert es["projection"]["held"] == "0"  # leased is reported: a late grant to a stopped pod waits for expiry
