"""The providers' batch APIs: OpenAI's Files and Batch API, Anthropic's Message Batches, behind one small client.

farebox sends a whole batch to one deployment (``proxy.batches.provider_run``): each line is translated by the
deployment's dialect exactly as a synchronous request would be (``ProviderLine.body``: what the provider's
``/chat/completions`` or ``/v1/messages`` takes), sent in one submission, polled, and its results read back as
``LineResult`` (the provider's own answer body, or its error), which the dialect then parses into usage and the
OpenAI-shaped answer. The provider's custom id of a line is farebox's line number, so a result maps back to
exactly one line whatever order the provider writes them in.

* OpenAI: the lines go up as a JSONL file (``POST /files``, purpose ``batch``), then ``POST /batches`` with
  ``metadata.farebox_batch`` (how a submission whose answer was lost is found again: ``find``); results are the
  output and error files. Statuses map to ``running`` or ``ended``, with OpenAI's final word.
* Anthropic: ``POST /v1/messages/batches`` with the requests inline; results from ``.../results`` once
  ``processing_status`` is ``ended``. Message batches carry no metadata, so ``find`` is not possible: a lost
  answer to a submission leaves the batch to fail over to a new submission (see ``provider_run``).

Everything the provider sends is input: an answer that is not the documented shape is ``BatchAPIError`` naming
what was wrong, never a traceback; provider keys are sent as headers and appear in no message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import aiohttp
import orjson

from proxy.snapshot import Deployment
from proxy.upstream import anthropic as anthropic_dialect
from proxy.upstream import openai_chat

DIALECTS = ("openai", "anthropic")  # the dialects whose providers have a batch API farebox speaks
TIMEOUT = aiohttp.ClientTimeout(total=120, connect=10)
_OPENAI_ENDED = {"completed": "completed", "cancelled": "cancelled", "expired": "expired", "failed": "failed"}


class BatchAPIError(Exception):
    """The provider refused or answered something farebox cannot read; ``retry``: worth asking again later."""

    def __init__(self, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True, slots=True)
class ProviderState:
    ended: bool
    final: str | None = None  # completed | cancelled | expired | failed, once ended


@dataclass(frozen=True, slots=True)
class LineResult:
    number: int  # farebox's line number (the provider's custom id)
    ok: bool
    body: Any  # the provider's answer body (ok), or its error object
    status: int = 200


def has_batch_api(dep: Deployment) -> bool:
    return dep.dialect in DIALECTS


def _headers(dep: Deployment, secret: str | None, json: bool = True) -> dict[str, str]:
    if dep.dialect == "anthropic":
        out = anthropic_dialect.headers(secret, None, stream=False)
    else:
        out = openai_chat.headers(secret, None, stream=False)
    if not json:
        out.pop("content-type", None)
    return out


def _root(dep: Deployment) -> str:
    """Where the batch endpoints live: OpenAI's ``base_url`` ends in ``/v1``; Anthropic's is the host."""
    base = dep.base_url.rstrip("/")
    return base if dep.dialect == "openai" else base + "/v1"


async def _call(session: aiohttp.ClientSession, method: str, url: str, dep: Deployment, **kw: Any) -> bytes:
    try:
        async with session.request(method, url, timeout=TIMEOUT, **kw) as resp:
            raw = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise BatchAPIError(f"deployment {dep.id}'s batch API could not be reached ({type(exc).__name__})") from None
    if status >= 300:
        message = _error_message(raw)
        raise BatchAPIError(f"deployment {dep.id}'s batch API answered {status}: {message}",
                            retry=status in (408, 409, 429) or status >= 500)
    return raw


def _error_message(raw: bytes) -> str:
    try:
        err = orjson.loads(raw).get("error")
        return str(err.get("message"))[:300] if isinstance(err, dict) else "(no message)"
    except (orjson.JSONDecodeError, AttributeError):
        return "(not JSON)"


def _object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BatchAPIError(f"the provider's {what} is not JSON") from None
    if not isinstance(data, dict):
        raise BatchAPIError(f"the provider's {what} is not a JSON object")
    return data


def _id(data: Mapping[str, Any], what: str) -> str:
    value = data.get("id")
    if not isinstance(value, str) or not value or len(value) > 200:
        raise BatchAPIError(f"the provider's {what} has no id")
    return value


async def submit(session: aiohttp.ClientSession, dep: Deployment, secret: str | None,
                 lines: list[tuple[int, dict]], tag: str) -> str:
    """Send the lines (``(number, provider body)``) as one provider batch; its id."""
    if dep.dialect == "anthropic":
        payload = {"requests": [{"custom_id": str(n), "params": body} for n, body in lines]}
        raw = await _call(session, "POST", _root(dep) + "/messages/batches", dep, data=orjson.dumps(payload),
                          headers=_headers(dep, secret))
        return _id(_object(raw, "message batch"), "message batch")
    jsonl = b"\n".join(orjson.dumps({"custom_id": str(n), "method": "POST", "url": "/v1/chat/completions",
                                     "body": body}) for n, body in lines) + b"\n"
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", jsonl, filename=f"{tag}.jsonl", content_type="application/jsonl")
    uploaded = _object(await _call(session, "POST", _root(dep) + "/files", dep, data=form,
                                   headers=_headers(dep, secret, json=False)), "file")
    body = {"input_file_id": _id(uploaded, "file"), "endpoint": "/v1/chat/completions", "completion_window": "24h",
            "metadata": {"farebox_batch": tag}}
    raw = await _call(session, "POST", _root(dep) + "/batches", dep, data=orjson.dumps(body),
                      headers=_headers(dep, secret))
    return _id(_object(raw, "batch"), "batch")


async def find(session: aiohttp.ClientSession, dep: Deployment, secret: str | None, tag: str) -> str | None:
    """The provider batch submitted for ``tag`` whose answer was lost, if the provider can say (OpenAI's
    metadata, among its 100 newest batches); None when it has none or cannot tell."""
    if dep.dialect != "openai":
        return None
    raw = await _call(session, "GET", _root(dep) + "/batches?limit=100", dep, headers=_headers(dep, secret))
    data = _object(raw, "batch list").get("data")
    for item in data if isinstance(data, list) else []:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if isinstance(meta, dict) and meta.get("farebox_batch") == tag:
            return _id(item, "batch")
    return None


async def state(session: aiohttp.ClientSession, dep: Deployment, secret: str | None, provider_id: str) -> ProviderState:
    if dep.dialect == "anthropic":
        data = _object(await _call(session, "GET", _root(dep) + f"/messages/batches/{provider_id}", dep,
                                   headers=_headers(dep, secret)), "message batch")
        status = data.get("processing_status")
        if status == "ended":
            counts = data.get("request_counts") if isinstance(data.get("request_counts"), dict) else {}
            final = ("cancelled" if data.get("cancel_initiated_at") else
                     "expired" if counts.get("expired") else "completed")
            return ProviderState(True, final)
        if status in ("in_progress", "canceling"):
            return ProviderState(False)
        raise BatchAPIError(f"the provider's message batch has an unknown processing_status {str(status)[:40]!r}")
    data = _object(await _call(session, "GET", _root(dep) + f"/batches/{provider_id}", dep,
                               headers=_headers(dep, secret)), "batch")
    status = data.get("status")
    if status in _OPENAI_ENDED:
        return ProviderState(True, _OPENAI_ENDED[status])
    if status in ("validating", "in_progress", "finalizing", "cancelling"):
        return ProviderState(False)
    raise BatchAPIError(f"the provider's batch has an unknown status {str(status)[:40]!r}")


async def cancel(session: aiohttp.ClientSession, dep: Deployment, secret: str | None, provider_id: str) -> None:
    path = f"/messages/batches/{provider_id}/cancel" if dep.dialect == "anthropic" else f"/batches/{provider_id}/cancel"
    await _call(session, "POST", _root(dep) + path, dep, headers=_headers(dep, secret))


async def results(session: aiohttp.ClientSession, dep: Deployment, secret: str | None, provider_id: str,
                  numbers: set[int]) -> list[LineResult]:
    """The results of an ended provider batch, one per line that ran (lines never run are absent); a result
    naming no line of ``numbers``, or twice, is refused as the provider's error."""
    if dep.dialect == "anthropic":
        raw = await _call(session, "GET", _root(dep) + f"/messages/batches/{provider_id}/results", dep,
                          headers=_headers(dep, secret))
        return parse_anthropic_results(raw, numbers)
    batch = _object(await _call(session, "GET", _root(dep) + f"/batches/{provider_id}", dep,
                                headers=_headers(dep, secret)), "batch")
    out: list[LineResult] = []
    for field in ("output_file_id", "error_file_id"):
        file_id = batch.get(field)
        if isinstance(file_id, str) and file_id:
            raw = await _call(session, "GET", _root(dep) + f"/files/{file_id}/content", dep,
                              headers=_headers(dep, secret))
            out += parse_openai_results(raw, numbers)
    return _unique(out)


def _number(custom_id: Any, numbers: set[int]) -> int:
    if not isinstance(custom_id, str) or not custom_id.isdigit() or int(custom_id) not in numbers:
        raise BatchAPIError(f"the provider's results name a line this batch does not have ({str(custom_id)[:40]!r})",
                            retry=False)
    return int(custom_id)


def parse_openai_results(raw: bytes, numbers: set[int]) -> list[LineResult]:
    """OpenAI's output/error file lines: ``{custom_id, response: {status_code, body} | null, error}``; a line
    with no response (expired, cancelled) never ran and is left out."""
    out = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        data = _object(line, "result line")
        number = _number(data.get("custom_id"), numbers)
        response = data.get("response")
        if not isinstance(response, dict):
            continue
        status = response.get("status_code")
        if not isinstance(status, int) or isinstance(status, bool):
            raise BatchAPIError("a result line of the provider has no status_code", retry=False)
        out.append(LineResult(number, 200 <= status < 300, response.get("body"), status))
    return out


def parse_anthropic_results(raw: bytes, numbers: set[int]) -> list[LineResult]:
    """Anthropic's results lines: ``{custom_id, result: {type: succeeded, message} | {type: errored, error} |
    {type: canceled} | {type: expired}}``; canceled and expired lines never ran and are left out."""
    out = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        data = _object(line, "result line")
        number = _number(data.get("custom_id"), numbers)
        result = data.get("result")
        kind = result.get("type") if isinstance(result, dict) else None
        if kind == "succeeded":
            out.append(LineResult(number, True, result.get("message")))
        elif kind == "errored":
            out.append(LineResult(number, False, result.get("error"), 400))
        elif kind not in ("canceled", "expired"):
            raise BatchAPIError(f"a result line of the provider has an unknown type {str(kind)[:40]!r}", retry=False)
    return _unique(out)


def _unique(results: list[LineResult]) -> list[LineResult]:
    seen: set[int] = set()
    for r in results:
        if r.number in seen:
            raise BatchAPIError(f"the provider's results give line {r.number} twice", retry=False)
        seen.add(r.number)
    return results
