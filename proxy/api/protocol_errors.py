"""Bad input below the handlers: requests aiohttp's HTTP parser refuses, and bodies that do not decode.

Every refusal leaves in the OpenAI error shape, whichever layer makes it:

* **The parser** refuses a request before any middleware runs: a request line
  or header over aiohttp's 8190-byte limit, more than 128 headers, a
  ``Content-Encoding`` aiohttp cannot decode here (``br``, ``zstd``),
  malformed HTTP. aiohttp answers those through its protocol's
  ``handle_error``, in plain text and echoing the offending bytes (which may
  be a key). ``OpenAIErrorProtocol`` overrides it: 431 for oversized headers,
  415 for an encoding, 400 for the rest, never quoting the input.
* **The body** fails while a handler reads it (``RequestPayloadError``): a
  ``gzip`` body whose bytes are not gzip, a broken chunked framing.
  ``body_errors`` (innermost middleware) turns it into a 400
  ``invalid_content_encoding`` / ``invalid_body``, and refuses up front, with
  415, any other encoding (aiohttp would pass an unknown one through
  undecoded, and cannot be trusted to end a bad ``deflate`` body).

aiohttp offers no public parameter for the protocol class, so ``install``
wraps the application's request factory, which aiohttp's server calls for
every message of a connection, refusals included, and gives the connection's
protocol the subclass there (same slots, only ``handle_error`` differs).
``install`` checks the aiohttp internals it relies on and refuses to start
without them; ``tests/e2e/test_fuzz_http.py`` holds the behaviour.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, ContentEncodingError, HttpProcessingError, LineTooLong

from proxy.errors import GatewayError, InvalidRequest, client_headers

log = logging.getLogger("farebox.proxy")

# What a body may be encoded as. Not ``deflate``: aiohttp never ends a deflate body that stops mid-stream (it
# raises while ending it, outside the request), so reading it would wait for ever.
DECODED_ENCODINGS = frozenset({"identity", "gzip"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def refusal(status: int, exc: BaseException | None) -> GatewayError:
    """The error for a request aiohttp refused with ``status`` (``exc``: why); never quotes the input."""
    if isinstance(exc, LineTooLong):
        limit = f"the limit of {exc.args[1]} bytes" if len(exc.args) > 1 else "the limit"
        return InvalidRequest(f"A request header or the request line is longer than {limit}.",
                              status=431, code="request_header_too_large")
    if isinstance(exc, BadHttpMessage) and "too many headers" in str(exc.message).lower():
        return InvalidRequest("The request has more headers than the gateway accepts (128).",
                              status=431, code="too_many_headers")
    if isinstance(exc, ContentEncodingError):
        return _unsupported_encoding()
    if isinstance(exc, HttpProcessingError) or 400 <= status < 500:
        return InvalidRequest("The request is not valid HTTP/1.1.", code="invalid_http_request")
    if status == 504:
        return GatewayError("The gateway timed out handling the request.", status=504, code="timeout")
    return GatewayError("Internal error while handling the request.")


def _unsupported_encoding() -> InvalidRequest:
    return InvalidRequest(f"The request's Content-Encoding is not supported; send the body as one of "
                          f"{', '.join(sorted(DECODED_ENCODINGS))}.", status=415, code="unsupported_content_encoding",
                          param="Content-Encoding")


def json_error(error: GatewayError) -> web.Response:
    return web.Response(status=error.status, body=orjson.dumps(error.to_body()), content_type="application/json",
                        headers=client_headers(error))


class OpenAIErrorProtocol(web.RequestHandler):
    """aiohttp's protocol, answering what it refuses in the OpenAI error shape."""

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: part of a response is out, the connection is broken
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        error = refusal(status, exc)
        if error.status >= 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        else:  # the client's fault: no traceback, and never the offending bytes (a header may be a key)
            log.info("refused before routing from %s: %d %s (%s)", request.remote, error.status, error.code,
                     type(exc).__name__ if exc is not None else "-")
        resp = json_error(error)
        resp.force_close()
        return resp


@web.middleware
async def body_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """An encoding we do not decode -> 415; a body that fails to decode or frame -> 400. Both close the
    connection after the answer: the rest of such a body cannot be framed, so the connection cannot be reused."""
    encoding = request.headers.get("Content-Encoding")
    if encoding is not None and encoding.strip().lower() not in DECODED_ENCODINGS:
        return _closing(_unsupported_encoding())
    try:
        return await handler(request)
    except web.RequestPayloadError as exc:
        request.content.feed_eof()  # else aiohttp reads it again after the answer, to drain it, and logs the error
        if isinstance(exc.__cause__, ContentEncodingError):
            return _closing(InvalidRequest(f"The request body is not valid {encoding} data, as its Content-Encoding "
                                           f"says.", code="invalid_content_encoding", param="Content-Encoding"))
        return _closing(InvalidRequest("The request body could not be read: it ended early or its chunked framing "
                                       "is invalid.", code="invalid_body"))


def _closing(error: GatewayError) -> web.Response:
    resp = json_error(error)
    resp.force_close()
    return resp


def install(app: web.Application) -> None:
    """Give every connection ``app`` serves the ``OpenAIErrorProtocol``; refuses to run on an aiohttp without
    the request-factory hook this needs."""
    make_request = getattr(app, "_make_request", None)
    if make_request is None or "handle_error" not in vars(web.RequestHandler):
        raise RuntimeError("this aiohttp version has no request factory or RequestHandler.handle_error to hook; "
                           "parser refusals would leave as plain text")

    def factory(message: Any, payload: Any, protocol: web.RequestHandler, writer: Any, task: Any) -> web.Request:
        if type(protocol) is web.RequestHandler:
            protocol.__class__ = OpenAIErrorProtocol
        return make_request(message, payload, protocol, writer, task)

    app._make_request = factory  # type: ignore[method-assign]
