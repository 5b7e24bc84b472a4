"""``x-fb-tags``: what is accepted, and the 400 that names the header for everything else."""

from __future__ import annotations

import pytest

from proxy.api.tags import MAX_KEY, MAX_TAGS, MAX_VALUE, InvalidTags, parse_tags


@pytest.mark.parametrize("header, tags", [
    (None, {}),
    ("", {}),
    ("   ", {}),
    ("project=atlas", {"project": "atlas"}),
    (" project = atlas ,env=prod", {"project": "atlas", "env": "prod"}),
    ("cost.code=CC-12/3,owner=a.b+c@example.com", {"cost.code": "CC-12/3", "owner": "a.b+c@example.com"}),
    (",".join(f"k{i}=v{i}" for i in range(MAX_TAGS)), {f"k{i}": f"v{i}" for i in range(MAX_TAGS)}),
    ("k" * MAX_KEY + "=" + "v" * MAX_VALUE, {"k" * MAX_KEY: "v" * MAX_VALUE}),
])
def test_valid_tags(header: str | None, tags: dict[str, str]) -> None:
    assert parse_tags(header) == tags


@pytest.mark.parametrize("header, why", [
    (",".join(f"k{i}=v{i}" for i in range(MAX_TAGS + 1)), f"{MAX_TAGS + 1} pairs"),
    ("project", "pair 1 is not key=value"),
    ("project=", "pair 1 is not key=value"),
    ("=atlas", "pair 1 is not key=value"),
    ("a=b,,c=d", "pair 2 is not key=value"),
    ("a=b,", "pair 2 is not key=value"),
    ("k" * (MAX_KEY + 1) + "=v", f"pair 1 has a key longer than {MAX_KEY}"),
    ("1project=atlas", "pair 1 has a key with a character outside"),
    ("pro ject=atlas", "pair 1 has a key with a character outside"),
    ("projé=atlas", "pair 1 has a key with a character outside"),
    ("project=" + "v" * (MAX_VALUE + 1), f"the value of 'project' is longer than {MAX_VALUE}"),
    ("project=at las", "the value of 'project' has a character outside"),
    ("project=a=b", "the value of 'project' has a character outside"),
    ('project="atlas"', "the value of 'project' has a character outside"),
    ("project=atlas\x00", "the value of 'project' has a character outside"),
    ("env=prod,env=dev", "the key 'env' appears more than once"),
    ("fb.batch=batch_forged", "pair 1 has a key starting 'fb.'"),  # farebox's own tags: never a caller's
])
def test_invalid_tags_are_a_400_naming_the_header(header: str, why: str) -> None:
    with pytest.raises(InvalidTags) as err:
        parse_tags(header)
    body = err.value.to_body()["error"]
    assert err.value.status == 400
    assert body["type"] == "invalid_request_error" and body["code"] == "invalid_tags" and body["param"] == "x-fb-tags"
    assert why in body["message"] and body["message"].startswith("The x-fb-tags header is invalid")
    assert "\x00" not in body["message"] and "at las" not in body["message"]  # the input's bad text is not echoed
