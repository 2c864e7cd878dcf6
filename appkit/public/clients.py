"""Who a request comes from, and the queue places one client may hold (public mode).

Why: every `/gradio_api/call/<event>` request is its own Gradio session, so limits per session never applied
to one machine: 48 fire-and-forget POSTs filled Gradio's queue and every other visitor got "Queue is full" for
67 s. The limits here are per client, the address the request came from:

- the TCP peer's address; behind a proxy that we trust (on a Hugging Face Space, where SPACE_ID is set, or
  with DECODESCOPE_TRUSTED_PROXY=1) the address that proxy wrote into X-Forwarded-For. A proxy appends the
  address it saw to the header, so the entries before it are whatever the visitor sent and are never read:
  we take the rightmost entry that is a public address (the Spaces proxy's own hops are private addresses
  and are skipped). Without a trusted proxy the header is ignored: anyone can send one.
- `Places` admits a new queued event (`/queue/join` and `/call/...` POSTs) only while
  the client has fewer than `per_client` events waiting, and keeps the queue's last `reserve` places for
  clients with nothing waiting: one client never fills the queue for everyone else.
"""
from __future__ import annotations

import ipaddress
import json
import os
import threading
import time
from collections import deque
from typing import Callable, Mapping

JOINS = ("/queue/join", "/call/")  # the POSTs that put an event in Gradio's queue (/run/ serves queue=False events)


def trusted_proxy() -> bool:
    """True on a Hugging Face Space (its proxy sets X-Forwarded-For) or with DECODESCOPE_TRUSTED_PROXY=1."""
    v = os.environ.get("DECODESCOPE_TRUSTED_PROXY", "").strip().lower()
    return v in ("1", "true", "yes", "on") if v else bool(os.environ.get("SPACE_ID"))


def _public_ip(text: str) -> str | None:
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    return str(ip) if ip.is_global else None


def client_of(peer: str | None, headers: Mapping[str, str] | None, behind_proxy: bool | None = None) -> str:
    """The client's address: the TCP peer's, or behind a trusted proxy the rightmost public address of
    X-Forwarded-For (what the proxy appended; earlier entries are the visitor's own words)."""
    if behind_proxy if behind_proxy is not None else trusted_proxy():
        forwarded = (headers or {}).get("x-forwarded-for", "") if headers is not None else ""
        for entry in reversed(forwarded.split(",")[-8:]):  # a proxy chain is short; the rest is the visitor's
            ip = _public_ip(entry)
            if ip is not None:
                return ip
    return peer or ""


def request_client(request) -> str:
    """client_of for a gr.Request (or None: a local call)."""
    if request is None:
        return ""
    peer = getattr(getattr(request, "client", None), "host", None)
    headers = getattr(request, "headers", None)
    return client_of(peer, {k.lower(): v for k, v in dict(headers or {}).items()})


class Places:
    """Queued events per client: `admit` when one is queued, `started` when its handler begins."""

    def __init__(self, size: int, per_client: int = 3, reserve: int = 8, ttl_s: float = 300.0):
        self.size, self.per_client, self.reserve, self.ttl_s = size, per_client, min(reserve, size - 1), ttl_s
        self._lock = threading.Lock()
        self._waiting: dict[str, deque[float]] = {}

    def _prune(self, now: float) -> None:
        """An event that never starts (cancelled, or its page closed) frees its place after ttl_s."""
        for client in list(self._waiting):
            q = self._waiting[client]
            while q and now - q[0] > self.ttl_s:
                q.popleft()
            if not q:
                del self._waiting[client]

    def waiting(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._waiting.values())

    def admit(self, client: str) -> str | None:
        """None (admitted, counted) or the one-line reason it is refused."""
        now = time.monotonic()
        with self._lock:
            self._prune(now)
            mine = len(self._waiting.get(client, ()))
            total = sum(len(q) for q in self._waiting.values())
            if mine >= self.per_client:
                return (f"this address already has {mine} requests waiting for the model; wait for them to start "
                        "(or press Stop), then try again")
            if total >= self.size or (mine and total >= self.size - self.reserve):
                return ("the queue is busy: its last places are kept for visitors with nothing waiting; "
                        "try again when your waiting request has started")
            self._waiting.setdefault(client, deque()).append(now)
        return None

    def started(self, client: str) -> None:
        with self._lock:
            q = self._waiting.get(client)
            if q:
                q.popleft()
                if not q:
                    del self._waiting[client]


class Admission:
    """ASGI middleware: a queued event's POST is refused with 429 and one line when `places` says so; an
    upload's files are owned by its client and the disk cap is enforced as soon as they are written
    (`downloads`: appkit/public/disk.py), not at the next run."""

    def __init__(self, app, places: Places, downloads=None, prefix: str = "/gradio_api"):
        self.app, self.places, self.downloads, self.prefix = app, places, downloads, prefix

    async def _upload(self, scope, receive, send, client: str):
        body = bytearray()

        async def keep(message):
            if message.get("type") == "http.response.body" and len(body) < 1 << 20:
                body.extend(message.get("body", b""))
            await send(message)
        await self.app(scope, receive, keep)
        try:
            paths = json.loads(bytes(body))
        except ValueError:
            return
        if isinstance(paths, list) and self.downloads is not None:
            self.downloads.written([p for p in paths if isinstance(p, str)], client)

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        if scope.get("method") == "POST" and path.rstrip("/") == self.prefix + "/upload":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            return await self._upload(scope, receive, send, client_of((scope.get("client") or ("", 0))[0], headers))
        if scope.get("method") == "POST" and path.startswith(self.prefix) and \
                path[len(self.prefix):].startswith(JOINS):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            why = self.places.admit(client_of((scope.get("client") or ("", 0))[0], headers))
            if why is not None:
                body = json.dumps({"error": why, "detail": why}).encode()
                await send({"type": "http.response.start", "status": 429,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class Unread:
    """session -> True once its messages have waited unread for `after_s` seconds: nobody reads this job (a
    fire-and-forget `/call`, whose stream is never opened), so it ends instead of holding the worker. A
    reader (a page's stream, gradio_client) drains its messages as they come, so they never wait that long."""

    def __init__(self, unread: Callable[[str | None], int], after_s: float = 10.0):
        self.unread, self.after_s = unread, after_s
        self._since: dict[str, tuple[int, float]] = {}  # session -> (unread count, since when unread)
        self._lock = threading.Lock()

    def __call__(self, session: str | None) -> bool:
        n, now, key = self.unread(session), time.monotonic(), session or ""
        with self._lock:
            if n == 0:
                self._since.pop(key, None)
                return False
            seen, since = self._since.get(key, (0, now))
            if n < seen:  # someone read some: the wait starts again
                since = now
            self._since[key] = (n, since)
            while len(self._since) > 4096:
                self._since.pop(next(iter(self._since)))
            return now - since > self.after_s
