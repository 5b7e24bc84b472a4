"""Provisioned capacity in routing and config: the owning team's requests try it first, other teams never use it
(a key pinned to it by name may), and the reservation's owner and price are checked at publish."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal

import pytest
import yaml

from pricing.book import Price, PriceBook, PriceVersion
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.errors import ConfigRejected
from proxy.control.price_changes import price_table, reservation_into_price
from proxy.control.problems import Problems
from proxy.control.validate import check_snapshot
from proxy.errors import PermissionDenied
from proxy.routing.router import Needs, route
from proxy.routing.state import RoutingState
from tests.harness import without_standbys
from tests.proxy.routing.test_routing import EXAMPLE, snapshot


def with_reserved(tree: dict, provisioned: dict | None = None) -> None:
    base = dict(tree["deployments"][0])
    tree["deployments"].append({**base, "id": "ptu", "weight": 1, "price_per_1m": {"input": "0", "output": "0"},
                                "provisioned": provisioned or {"team": "kyc-ops", "per_month": "7200.00"}})
    tree["aliases"][0]["deployments"].append("ptu")


def test_the_owners_requests_use_it_first_and_others_never() -> None:
    snap = snapshot(with_reserved)
    alias, state = snap.aliases["chat-default"], RoutingState(clock=lambda: 0.0)
    assert snap.deployments["ptu"].provisioned_team == "kyc-ops"
    price = snap.price_book.latest.prices["ptu"]
    assert (str(price.reserved_month), price.reserved_team) == ("7200.00", "kyc-ops")
    rng = random.Random(3)
    for _ in range(100):
        owner = route(snap, alias, Needs((), "internal", 10, team="kyc-ops"), state, 0.0, rng)
        assert owner[0].id == "ptu" and len(owner) > 1  # the shared ones follow: they take what spills
        other = route(snap, alias, Needs((), "internal", 10, team="platform"), state, 0.0, rng)
        assert "ptu" not in [d.id for d in other]
    pinned = route(snap, alias, Needs((), "internal", 10, allowed=frozenset({"ptu"}), team="platform"), state, 0.0, rng)
    assert [d.id for d in pinned] == ["ptu"]  # a key pinned to it by name (the platform's canary) may


def test_an_alias_of_only_reserved_capacity_refuses_other_teams_clearly() -> None:
    def only_reserved(tree: dict) -> None:
        with_reserved(tree)
        tree["aliases"][0]["deployments"] = ["ptu"]
    snap = snapshot(only_reserved)
    with pytest.raises(PermissionDenied) as err:
        route(snap, snap.aliases["chat-default"], Needs((), "internal", 10, team="platform"),
              RoutingState(clock=lambda: 0.0), 0.0, random.Random())
    assert err.value.code == "deployment_reserved" and "another team" in err.value.message


@pytest.mark.parametrize("provisioned, says", [
    ({"team": "kyc-ops"}, "one of per_hour or per_month"),
    ({"team": "kyc-ops", "per_hour": "1", "per_month": "2"}, "one of per_hour or per_month"),
    ({"team": "nobody", "per_hour": "1"}, "'nobody' is not a team"),
    ({"team": "kyc-ops", "per_hour": 1.5, "colour": "red"}, "colour"),
])
def test_a_bad_provisioned_block_is_refused_by_name(provisioned: dict, says: str) -> None:
    tree = without_standbys({k: v for k, v in yaml.safe_load(EXAMPLE.read_text()).items() if k in CONTROL_SECTIONS})
    with_reserved(tree, provisioned)
    problems = Problems()
    assert compile_snapshot(tree, (), problems=problems) is None
    said = "\n".join(problems.items)
    assert says in said and "provisioned" in said, said


def test_compile_keeps_the_reservation_in_the_price_book() -> None:
    snap = snapshot(lambda tree: with_reserved(tree, {"team": "kyc-ops", "per_hour": "12.50"}))
    price = snap.price_book.latest.prices["ptu"]
    assert str(price.reserved_hour) == "12.50" and price.reserved_month is None


def test_the_admin_api_keeps_the_reservation_in_the_price_version() -> None:
    spec, price = reservation_into_price({"provisioned": {"team": "kyc-ops", "per_hour": "12.50"}, "weight": 1},
                                         {"input": "0", "output": "0"})
    assert spec == {"provisioned": {"team": "kyc-ops"}, "weight": 1}
    assert price_table({"ptu": price}) == {"ptu": {"currency": "USD", "input": "0", "output": "0",
                                                   "reserved_hour": "12.50", "reserved_team": "kyc-ops"}}
    with pytest.raises(ConfigRejected, match="send price_per_1m with it"):
        reservation_into_price({"provisioned": {"team": "kyc-ops", "per_month": "10"}}, None)
    with pytest.raises(ConfigRejected, match="go together"):
        price_table({"ptu": {"input": "0", "output": "0", "reserved_hour": "1"}})


def test_publish_checks_the_reservation_names_the_owner() -> None:
    snap = snapshot(with_reserved)
    now = datetime.now(timezone.utc)
    problems = Problems()
    check_snapshot(snap, now, problems)
    assert not problems.items
    latest = snap.price_book.latest
    wrong = {**latest.prices, "ptu": replace(latest.prices["ptu"], reserved_team="platform")}
    none = {**latest.prices, "ptu": Price(input=Decimal(0), output=Decimal(0))}
    for prices, says in ((wrong, "charges its reservation to 'platform'"), (none, "has no reservation")):
        book = PriceBook.of([PriceVersion(latest.version, latest.valid_from, prices)])
        problems = Problems()
        check_snapshot(replace(snap, price_book=book), now, problems)
        assert any(says in p for p in problems.items), problems.items
