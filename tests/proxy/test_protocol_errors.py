"""What aiohttp refuses before the handlers maps to an OpenAI-shaped error that never quotes the input."""

from __future__ import annotations

import pytest
from aiohttp.http_exceptions import BadHttpMessage, BadStatusLine, ContentEncodingError, LineTooLong

from proxy.api.protocol_errors import refusal

SECRET = "fb-dev-" + "s3cr3t" * 20


@pytest.mark.parametrize(
    ("status", "exc", "expected_status", "code"),
    [
        (400, LineTooLong(SECRET.encode(), 8190), 431, "request_header_too_large"),
        (400, BadHttpMessage("Too many headers received"), 431, "too_many_headers"),
        (400, ContentEncodingError("Can not decode content-encoding: brotli (br)"), 415, "unsupported_content_encoding"),
        (400, BadStatusLine(SECRET), 400, "invalid_http_request"),
        (400, BadHttpMessage(f"Invalid header value {SECRET}"), 400, "invalid_http_request"),
        (504, None, 504, "timeout"),
        (500, RuntimeError(SECRET), 500, "internal_error"),
    ],
)
def test_refusals(status: int, exc: BaseException | None, expected_status: int, code: str) -> None:
    err = refusal(status, exc)
    body = err.to_body()["error"]
    assert err.status == expected_status and body["code"] == code
    assert set(body) == {"type", "code", "message", "param"} and body["message"]
    assert SECRET not in body["message"] and "s3cr3t" not in str(body)
    assert body["type"] == ("invalid_request_error" if expected_status < 500 else "server_error")
