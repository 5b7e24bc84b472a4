"""The OpenAI Files API, for batches: ``POST /v1/files`` (multipart, ``purpose: batch``), ``GET /v1/files``,
``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``.

A file is its team's: another team's id, like an absent or expired one, is a 404 (ids cannot be probed). The
upload is read as a stream and refused past ``batches.max_file_bytes`` (413) without reading the rest into
memory; the gateway's own body limit (``server.max_body_bytes``) does not apply here. farebox keeps files for
batches only: another ``purpose`` is a 400 naming it. A batch's output and error files are ``batch_output``
files of the same team. Errors are OpenAI-shaped.
"""

from __future__ import annotations

from collections.abc import Container

from aiohttp import BodyPartReader, web

from proxy.batches.objects import file_object, list_object, new_file_id
from proxy.batches.records import BatchRecord, BatchStore, FileRecord
from proxy.errors import InvalidRequest, NotFound, PayloadTooLarge
from proxy.runtime import RUNTIME, Runtime

PURPOSES = ("batch",)  # what a client may upload
_MAX_FIELD = 1024  # bytes of a form field other than the file
_EXPIRY_S = (3600, 30 * 86_400)  # what expires_after[seconds] may be (OpenAI's bounds)


def store_of(rt: Runtime) -> BatchStore:
    if rt.batches is None:
        raise NotFound("Files and batches are not enabled on this gateway.", code="unknown_url")
    return rt.batches


async def visible_batch(rt: Runtime, request: web.Request, endpoints: Container[str], *, what: str = "batch",
                        param: str = "batch_id") -> BatchRecord:
    """The batch named in the URL if the caller's team may see it on this surface (one of ``endpoints``); else
    one 404 for absent, another team's and another surface's."""
    batch_id = request.match_info["id"]
    record = await store_of(rt).get_batch(batch_id)
    if record is None or record.team != request["key"].team or record.endpoint not in endpoints:
        raise NotFound(f"No {what} found with id '{batch_id}'.", param=param, code="batch_not_found")
    return record


async def visible_file(rt: Runtime, request: web.Request, file_id: str, param: str = "file_id") -> FileRecord:
    """The file if the caller's team may see it now; else one 404 for absent, expired and another team's."""
    record = await store_of(rt).get_file(file_id)
    if record is None or record.team != request["key"].team or (
            record.expires_at is not None and record.expires_at <= rt.clock()):
        raise NotFound(f"No such File object: {file_id}", param=param, code="file_not_found")
    return record


async def create_file(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    store, key = store_of(rt), request["key"]
    if not request.content_type.startswith("multipart/form-data"):
        raise InvalidRequest("Upload a file as multipart/form-data with the fields 'file' and 'purpose'.",
                             code="invalid_content_type")
    try:
        fields, content, filename = await _form(request, rt.options.batch_max_file_bytes)
    except (ValueError, AssertionError, UnicodeDecodeError):  # aiohttp's parser on a malformed body
        raise InvalidRequest("The upload is not a well-formed multipart/form-data body.",
                             code="invalid_content_type") from None
    purpose = fields.get("purpose")
    if purpose is None:
        raise InvalidRequest("Missing required parameter: 'purpose'.", param="purpose",
                             code="missing_required_parameter")
    if purpose not in PURPOSES:
        raise InvalidRequest(f"farebox keeps files for batches only: 'purpose' must be one of {list(PURPOSES)}.",
                             param="purpose", code="invalid_value")
    if content is None:
        raise InvalidRequest("Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
    now = int(rt.clock())
    record = FileRecord(new_file_id(), key.team, key.key_id, purpose, filename, len(content), now,
                        _expires(fields, now))
    await store.put_file(record, content)
    return web.json_response(file_object(record))


async def _form(request: web.Request, limit: int) -> tuple[dict[str, str], bytes | None, str]:
    """The upload's fields, its file's content (None: no file part) and the file's name, read as a stream."""
    fields: dict[str, str] = {}
    content: bytes | None = None
    filename = "file"
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            raise InvalidRequest("A nested multipart body is not a file upload.", code="invalid_content_type")
        if part.name == "file":
            filename = (part.filename or "file")[:256]
            content = await _read(part, limit)
        elif part.name in ("purpose", "expires_after[anchor]", "expires_after[seconds]"):
            fields[part.name] = (await _read(part, _MAX_FIELD, what=part.name)).decode("utf-8", "replace").strip()
        else:
            raise InvalidRequest("The upload has a field farebox does not take; send 'file', 'purpose' and, "
                                 "optionally, 'expires_after[anchor]' and 'expires_after[seconds]'.",
                                 code="unknown_parameter")
    return fields, content, filename


def _expires(fields: dict[str, str], now: int) -> int | None:
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise InvalidRequest("'expires_after[anchor]' must be 'created_at'.", param="expires_after.anchor",
                             code="invalid_value")
    low, high = _EXPIRY_S
    if seconds is None or not seconds.isdigit() or not low <= int(seconds) <= high:
        raise InvalidRequest(f"'expires_after[seconds]' must be an integer between {low} and {high}.",
                             param="expires_after.seconds", code="invalid_value")
    return now + int(seconds)


async def _read(part: BodyPartReader, limit: int, what: str = "file") -> bytes:
    chunks, size = [], 0
    while chunk := await part.read_chunk(256 * 1024):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The {what} is larger than the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def list_files(request: web.Request) -> web.Response:
    rt, q = request.app[RUNTIME], request.query
    order = q.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order", code="invalid_value")
    limit = page_limit(q.get("limit"), 10_000, 10_000)
    found = await store_of(rt).list_files(request["key"].team, q.get("purpose"), q.get("after"), limit + 1,
                                          order == "desc")
    now = rt.clock()
    shown = [file_object(f) for f in found[:limit] if f.expires_at is None or f.expires_at > now]
    return web.json_response(list_object(shown, len(found) > limit))


def page_limit(raw: str | None, default: int, most: int) -> int:
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise InvalidRequest(f"'limit' must be an integer between 1 and {most}.", param="limit", code="invalid_value")
    return int(raw)


async def get_file(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    return web.json_response(file_object(await visible_file(rt, request, request.match_info["id"])))


async def file_content(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    record = await visible_file(rt, request, request.match_info["id"])
    content = await store_of(rt).file_content(record.id)
    if content is None:  # deleted between the two reads
        raise NotFound(f"No such File object: {record.id}", param="file_id", code="file_not_found")
    return web.Response(body=content, content_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{record.id}.jsonl"'})


async def delete_file(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    record = await visible_file(rt, request, request.match_info["id"])
    deleted = await store_of(rt).delete_file(record.id)
    return web.json_response({"id": record.id, "object": "file", "deleted": deleted})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/files", create_file)
    app.router.add_get("/v1/files", list_files)
    app.router.add_get("/v1/files/{id}", get_file)
    app.router.add_get("/v1/files/{id}/content", file_content)
    app.router.add_delete("/v1/files/{id}", delete_file)
