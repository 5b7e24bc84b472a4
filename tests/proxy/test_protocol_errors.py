"""What aiohttp refuses before the handlers answers as an OpenAI-shaped error that never quotes the input."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, BadStatusLine, ContentEncodingError, LineTooLong
from aiohttp.test_utils import TestServer

from proxy.api.protocol_errors import install, refusal

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


async def _raw(server: TestServer, request: bytes) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(request)
        await writer.drain()
        head, _, body = (await asyncio.wait_for(reader.read(), 10)).partition(b"\r\n\r\n")
    finally:
        writer.close()
        await writer.wait_closed()
    return int(head.split()[1]), orjson.loads(body)


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + SECRET.encode() * 100 + b"\r\n\r\n", 431, "request_header_too_large"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(200)) + b"\r\n", 431,
         "too_many_headers"),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}", 415,
         "unsupported_content_encoding"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400, "invalid_http_request"),
    ],
)
async def test_an_installed_app_answers_parser_refusals_in_the_openai_shape(request_bytes: bytes, status: int,
                                                                            code: str) -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/", ok)
    install(app)
    async with TestServer(app) as server:
        got_status, body = await _raw(server, request_bytes)
    assert got_status == status and body["error"]["code"] == code
    assert set(body["error"]) == {"type", "code", "message", "param"} and "s3cr3t" not in str(body)
