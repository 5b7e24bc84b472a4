"""The webhook adapter of the notifier port: one signed JSON POST per alert.

Body: the alert's JSON (``Alert.to_json``), serialised once, with ``archive_head``
(``{"entry", "hash"}``: the archive manifest's head when the alert is sent) where
the notifier was given the archive, so whoever receives alerts also keeps a head to
check the archive against. Headers:
``X-Farebox-Event-Id`` (the alert id: receivers can dedupe on it too),
``X-Farebox-Timestamp`` (unix seconds) and, when a secret is configured,
``X-Farebox-Signature: sha256=<hex>``, the HMAC-SHA256 of
``{timestamp}.{body}`` under the secret. A receiver verifies it with
``signature(secret, timestamp, body)`` and rejects old timestamps.

Any non-2xx answer, a timeout or a connection error is ``NotifyFailed``
(retried by the dispatcher). The URL may carry a token: errors name only
its host.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import aiohttp
import orjson

from streams.notify.alerts import Alert
from streams.notify.notifier import NotifyFailed

SIGNATURE, TIMESTAMP, EVENT_ID = "X-Farebox-Signature", "X-Farebox-Timestamp", "X-Farebox-Event-Id"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookNotifier:
    def __init__(self, url: str, session: aiohttp.ClientSession, *, secret: str | None = None,
                 timeout_s: float = 5.0, clock=time.time, setting: str | None = None,
                 archive_head: Callable[[], tuple[int, str]] | None = None) -> None:
        self.url, self.session, self.secret, self.clock = url, session, secret, clock
        self.archive_head = archive_head  # (entry, hash) of the archive manifest's head, carried by every alert
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.host = urlsplit(url).hostname or "webhook"
        # how errors name the target: the setting it came from (when given) and the host, never the URL
        self.where = f"{setting} (webhook at {self.host})" if setting else f"webhook at {self.host}"

    async def send(self, alert: Alert) -> None:
        doc = alert.to_json()
        if self.archive_head is not None:  # a second system keeps it: `farebox archive verify --expect-head`
            entry, head = self.archive_head()
            doc["archive_head"] = {"entry": entry, "hash": head}
        body = orjson.dumps(doc)
        ts = str(int(self.clock()))
        headers = {"Content-Type": "application/json", EVENT_ID: alert.id, TIMESTAMP: ts,
                   "User-Agent": "farebox-notifier"}
        if self.secret:
            headers[SIGNATURE] = signature(self.secret, ts, body)
        try:
            async with self.session.post(self.url, data=body, headers=headers, timeout=self.timeout) as resp:
                if resp.status >= 300:
                    raise NotifyFailed(f"{self.where} answered {resp.status}")
        except asyncio.TimeoutError:
            raise NotifyFailed(f"{self.where} did not answer within {self.timeout.total:g}s") from None
        except aiohttp.ClientError as exc:
            raise NotifyFailed(f"{self.where} unreachable ({type(exc).__name__})") from None
