"""The Files and Batches API's objects, as OpenAI's API writes them, and the lines of a batch's output files.

An output-file line is ``{"id": "batch_req_…", "custom_id", "response": {"status_code", "request_id", "body"},
"error": null}``: 2xx answers go to the output file, other answers (the gateway's own error body) to the error
file; a line that never ran before the window passed is ``{"response": null, "error": {"code":
"batch_expired", "message"}}`` in the error file. Pure.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from proxy.batches.records import BatchRecord, FileRecord

WINDOWS = {"24h": 86_400}  # what completion_window may be, in seconds


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


def file_object(r: FileRecord) -> dict[str, Any]:
    return {"id": r.id, "object": "file", "bytes": r.bytes, "created_at": r.created_at, "expires_at": r.expires_at,
            "filename": r.filename, "purpose": r.purpose, "status": "processed", "status_details": None}


def batch_object(r: BatchRecord) -> dict[str, Any]:
    t = r.times
    return {
        "id": r.id, "object": "batch", "endpoint": r.endpoint,
        "errors": {"object": "list", "data": r.errors} if r.errors else None,
        "input_file_id": r.input_file_id, "completion_window": r.completion_window, "status": r.status,
        "output_file_id": r.output_file_id, "error_file_id": r.error_file_id, "created_at": r.created_at,
        "in_progress_at": t.get("in_progress_at"), "expires_at": r.expires_at,
        "finalizing_at": t.get("finalizing_at"), "completed_at": t.get("completed_at"),
        "failed_at": t.get("failed_at"), "expired_at": t.get("expired_at"), "cancelling_at": t.get("cancelling_at"),
        "cancelled_at": t.get("cancelled_at"),
        "request_counts": {"total": r.counts.total, "completed": r.counts.completed, "failed": r.counts.failed},
        "metadata": r.metadata or None,
    }


def list_object(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}


def output_line(custom_id: str, status: int, request_id: str | None, body: Any) -> bytes:
    """The line of an answered request (``body``: the answer's JSON, or its text when it was not JSON)."""
    return orjson.dumps({"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": custom_id,
                         "response": {"status_code": status, "request_id": request_id, "body": body},
                         "error": None})


def unrun_line(final: str, custom_id: str) -> bytes:
    """The error-file line of a request that never ran (``final``: the batch's end, ``expired``)."""
    return orjson.dumps({"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": custom_id, "response": None,
                         "error": {"code": f"batch_{final}",
                                   "message": "This request could not be executed before the completion window "
                                              "expired."}})
