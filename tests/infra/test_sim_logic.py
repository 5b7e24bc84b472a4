"""Pure simulator logic: config loading, token counting, schema-satisfying values, fault draws."""

from __future__ import annotations

import jsonschema
import pytest

from infra.simulator.config import ConfigError, FaultProfile, load_config
from infra.simulator.faults import FaultDecider
from infra.simulator.generation import TOKEN_RE, count_tokens, text_pieces
from infra.simulator.schema_gen import generate_value


def test_defaults_and_yaml(tmp_path):
    cfg = load_config(None)
    assert cfg.defaults.output_tokens == 32 and cfg.defaults.context_window == 128000 and cfg.accounts == ()
    path = tmp_path / "sim.yaml"
    path.write_text("seed: 4\naccounts: [{name: a, api_key: k1}]\ndefaults: {ttft_ms: 10}\n"
                    "models:\n  m1: {output_tokens: 7, faults: {rate_429: 0.5}}\n")
    cfg = load_config(str(path))
    assert cfg.seed == 4 and cfg.profile("m1").ttft_ms == 10 and cfg.profile("m1").output_tokens == 7
    assert cfg.profile("m1").faults.rate_429 == 0.5 and cfg.profile("zzz") == cfg.defaults
    assert "k1" not in repr(cfg)


def test_every_error_reported_with_its_path(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("seed: x\ncolour: red\naccounts: [{name: a, api_key: k}, {name: a, api_key: k}]\n"
                    "defaults: {ttft_ms: -1}\nmodels:\n  m: {faults: {rate_500: 1.5, rate_hang: 0.2, bogus: 1}}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    errors = exc.value.errors
    for expected in ("seed:", "colour: unknown", "accounts[1].name: duplicate", "accounts[1].api_key",
                     "defaults.ttft_ms", "models.m.faults.rate_500", "models.m.faults.bogus"):
        assert any(e.startswith(expected) for e in errors), (expected, errors)
    assert isinstance(exc.value, ValueError)
    with pytest.raises(ConfigError):
        load_config(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize("text", ["", "Hello, world!", "it's 3.14 -- ok?\t\x1c done", "naïve café — ok…",
                                  "snake_case and CamelCase42 {\"json\": [1, 2]}"])
def test_count_tokens_matches_documented_regex(text):
    assert count_tokens(text) == len(TOKEN_RE.findall(text))


def test_text_pieces_deterministic_prefix():
    assert text_pieces(9, 10)[:4] == text_pieces(9, 4)
    assert all(p.startswith(" ") for p in text_pieces(9, 10)[1:])


SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string", "minLength": 20, "maxLength": 25}}, "required": ["a"]},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10, "maximum": 12, "multipleOf": 4}},
     "required": ["n"]},
    {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 5, "exclusiveMaximum": 6}},
     "required": ["x"]},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": True},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                      "mail": {"type": "string", "format": "email"},
                                      "code": {"type": "string", "pattern": "^[A-Z][0-9]$"}},
     "required": ["when", "mail", "code"]},
    {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
                                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                        "required": ["name"]}},
     "$ref": "#/$defs/node"},
    {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"k": {"const": 3}}, "required": ["k"]}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
               {"properties": {"b": {"type": ["null", "integer"], "maximum": -5}}, "required": ["b"]}]},
    {"type": "object", "properties": {"t": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                            "minItems": 2, "maxItems": 2}}, "required": ["t"],
     "additionalProperties": False},
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_generated_values_validate(schema, seed):
    value = generate_value(schema, seed)
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    assert generate_value(schema, seed) == value


def test_fault_decider_sequence_and_forcing():
    faults = FaultProfile(rate_429=0.25, rate_disconnect=0.25)
    a = FaultDecider(11)
    seq = [a.draw(faults, None) for _ in range(200)]
    assert {None, "429", "disconnect"} == set(seq) and 30 < seq.count("429") < 70
    a.reset()
    assert [a.draw(faults, None) for _ in range(200)] == seq
    assert a.draw(faults, "overloaded") == "529" and a.draw(faults, "none") is None
