"""``POST /admin/v1/rerate``'s body: defaults, and every bad field a 400 naming it."""

from __future__ import annotations

from datetime import date

import pytest

from proxy.control.admin.rerate import read_body
from proxy.errors import InvalidRequest

VERSIONS = [1, 2, 3]


def test_defaults_are_the_newest_version_and_a_dry_run() -> None:
    assert read_body({"from": "2026-11-01", "to": "2026-11-30"}, VERSIONS) == (
        date(2026, 11, 1), date(2026, 11, 30), 3, "", True)
    assert read_body({"from": "2026-11-01", "to": "2026-11-01", "price_version": 2, "reason": "typo",
                      "dry_run": False}, VERSIONS) == (date(2026, 11, 1), date(2026, 11, 1), 2, "typo", False)


@pytest.mark.parametrize("body, param", [
    ({"to": "2026-11-01"}, "from"),
    ({"from": "2026-11-01"}, "to"),
    ({"from": "yesterday", "to": "2026-11-01"}, "from"),
    ({"from": "2026-11-02", "to": "2026-11-01"}, "from"),
    ({"from": "2026-11-01", "to": "2026-11-01", "price_version": 9}, "price_version"),
    ({"from": "2026-11-01", "to": "2026-11-01", "price_version": True}, "price_version"),
    ({"from": "2026-11-01", "to": "2026-11-01", "reason": 5}, "reason"),
    ({"from": "2026-11-01", "to": "2026-11-01", "dry_run": "false"}, "dry_run"),
    ({"from": "2026-11-01", "to": "2026-11-01", "apply": True}, "apply"),
])
def test_a_bad_field_is_named(body, param) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRequest) as caught:
        read_body(body, VERSIONS)
    assert caught.value.param == param and caught.value.status == 400


def test_an_empty_book_has_no_version_to_default_to() -> None:
    with pytest.raises(InvalidRequest, match="no version"):
        read_body({"from": "2026-11-01", "to": "2026-11-01"}, [])
