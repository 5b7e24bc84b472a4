"""A batch's input file read as requests: the JSONL format of OpenAI's Batch API, checked line by line.

Each line is one JSON object ``{"custom_id": str, "method": "POST", "url": <the batch's endpoint>, "body": {...}}``.
Checked before anything runs (a batch with a bad line fails whole, with every problem listed, as OpenAI's
does): valid JSON objects, a non-empty ``custom_id`` unique in the file, ``POST``, the batch's own endpoint, a
``body`` object naming a ``model``, no ``stream: true`` (a batch line is answered whole), at most
``max_lines`` lines. A problem names its line (1-based) and the field, never the line's text. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings")  # what a batch line may call (farebox runs both)
MAX_PROBLEMS = 20  # problems reported per file: enough to fix a generator, bounded for a broken file
MAX_CUSTOM_ID = 512


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # 1-based line of the input file
    custom_id: str
    model: str  # the alias the line asks for
    body: bytes  # the request body as sent to the endpoint (JSON)
    held: int | None = None  # its hold, taken when its batch was admitted whole (``proxy.batches.reserve``)


@dataclass(frozen=True, slots=True)
class Problem:
    code: str  # OpenAI's batch error codes: invalid_json_line, missing_required_parameter, invalid_url, ...
    message: str
    line: int | None = None
    param: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


def read_lines(content: bytes, endpoint: str, max_lines: int) -> tuple[list[Line], list[Problem]]:
    """The file's requests, or the problems that fail it (at most ``MAX_PROBLEMS``; lines empty then)."""
    lines: list[Line] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    raw_lines = content.splitlines()
    while raw_lines and not raw_lines[-1].strip():
        raw_lines.pop()
    if not raw_lines:
        return [], [Problem("empty_file", "The input file has no requests.")]
    if len(raw_lines) > max_lines:
        return [], [Problem("too_many_requests", f"The input file has {len(raw_lines)} requests; a batch may have "
                                                 f"at most {max_lines}.")]
    for n, raw in enumerate(raw_lines, 1):
        line = _line(n, raw, endpoint, seen)
        if isinstance(line, Problem):
            problems.append(line)
            if len(problems) >= MAX_PROBLEMS:
                break
        else:
            lines.append(line)
    return ([], problems) if problems else (lines, [])


def _line(n: int, raw: bytes, endpoint: str, seen: set[str]) -> Line | Problem:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return Problem("invalid_json_line", f"Line {n} is not valid JSON.", n)
    if not isinstance(obj, dict):
        return Problem("invalid_json_line", f"Line {n} is not a JSON object.", n)
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return Problem("missing_required_parameter", f"Line {n} has no custom_id string.", n, "custom_id")
    if len(custom_id) > MAX_CUSTOM_ID:
        return Problem("invalid_value", f"Line {n}'s custom_id is longer than {MAX_CUSTOM_ID} characters.", n,
                       "custom_id")
    if custom_id in seen:
        return Problem("duplicate_custom_id", f"Line {n} repeats a custom_id used on an earlier line; each "
                                              "request needs its own.", n, "custom_id")
    seen.add(custom_id)
    if obj.get("method") != "POST":
        return Problem("invalid_method", f"Line {n}'s method must be \"POST\".", n, "method")
    if obj.get("url") != endpoint:
        return Problem("invalid_url", f"Line {n}'s url must be the batch's endpoint {endpoint}.", n, "url")
    body = obj.get("body")
    if not isinstance(body, dict):
        return Problem("missing_required_parameter", f"Line {n} has no body object.", n, "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return Problem("missing_required_parameter", f"Line {n}'s body names no model.", n, "body.model")
    if body.get("stream") is True:
        return Problem("invalid_value", f"Line {n} asks for a stream; a batch request is answered whole.", n,
                       "body.stream")
    extra = set(obj) - {"custom_id", "method", "url", "body"}
    if extra:
        return Problem("invalid_value", f"Line {n} has a field a batch line does not take (one of custom_id, "
                                        "method, url, body only).", n)
    return Line(n, custom_id, model, orjson.dumps(body))
