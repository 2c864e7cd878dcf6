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
from collections import OrderedDict, deque
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


def block_of(address: str) -> str:
    """The client a limit counts: an IPv4 address as it is, an IPv6 address as its /64 (one machine, or one
    home, owns a whole /64: counting addresses would let it multiply every per-client limit by 2**64); an
    IPv4-mapped IPv6 address as its IPv4 address. Anything else (a test's name, a socket) as it is."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return address
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def client_of(peer: str | None, headers: Mapping[str, str] | None, behind_proxy: bool | None = None) -> str:
    """The client: the TCP peer's address block (block_of), or behind a trusted proxy the block of the rightmost
    public address of X-Forwarded-For (what the proxy appended; earlier entries are the visitor's own words)."""
    if behind_proxy if behind_proxy is not None else trusted_proxy():
        forwarded = (headers or {}).get("x-forwarded-for", "") if headers is not None else ""
        for entry in reversed(forwarded.split(",")[-8:]):  # a proxy chain is short; the rest is the visitor's
            ip = _public_ip(entry)
            if ip is not None:
                return block_of(ip)
    return block_of(peer or "")


def no_forwarded_headers_by_default() -> None:
    """uvicorn rewrites a request's client address from X-Forwarded-For when the TCP peer is in
    FORWARDED_ALLOW_IPS, which defaults to 127.0.0.1 and ::1: every request through a local tunnel or proxy,
    or from the machine itself, could then name any client it liked. Unless the operator names the proxies
    (FORWARDED_ALLOW_IPS set), no peer is trusted; behind a proxy we trust, client_of reads the header itself."""
    os.environ.setdefault("FORWARDED_ALLOW_IPS", "")


def request_client(request) -> str:
    """client_of for a gr.Request (or None: a local call)."""
    if request is None:
        return ""
    peer = getattr(getattr(request, "client", None), "host", None)
    headers = getattr(request, "headers", None)
    return client_of(peer, {k.lower(): v for k, v in dict(headers or {}).items()})


class Places:
    """Queued events per client: `admit` when one is queued, `started` when its handler begins."""

    def __init__(self, size: int, per_client: int = 3, reserve: int = 8, ttl_s: float = 15.0):
        self.size, self.per_client, self.reserve, self.ttl_s = size, per_client, min(reserve, size - 1), ttl_s
        self._lock = threading.Lock()
        self._waiting: dict[str, deque[float]] = {}

    def _prune(self, now: float) -> None:
        """An event Gradio accepted that never starts (cancelled, its page closed, failed before its handler)
        frees its place after ttl_s: model events start at once (their order is fair.Turns'), so a place
        lives a few milliseconds when all is well."""
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
        """The event's handler began (or Gradio did not accept the event: release): its place is free."""
        with self._lock:
            q = self._waiting.get(client)
            if q:
                q.popleft()
                if not q:
                    del self._waiting[client]

    release = started


class UploadRate:
    """Uploads per client: at most `burst` at once, refilled at `per_s` a second (a token bucket). Twenty
    threads of tiny uploads took a page load from 0.2 s to 2-6 s and a victim's run from 1.5 s to 40 s."""

    def __init__(self, per_s: float = 1.0, burst: int = 12):
        self.per_s, self.burst = per_s, burst
        self._lock = threading.Lock()
        self._tokens: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, when)

    def take(self, client: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, when = self._tokens.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - when) * self.per_s)
            ok = tokens >= 1.0
            self._tokens[client] = (tokens - 1.0 if ok else tokens, now)
            while len(self._tokens) > 4096:
                self._tokens.popitem(last=False)
            return ok


async def _refuse(send, status: int, why: str) -> None:
    body = json.dumps({"error": why, "detail": why}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Admission:
    """ASGI middleware in front of Gradio's routes (public mode):
    - a queued event's POST takes one of its client's places (`places`) or is refused with 429 and one line;
      the place is kept only if Gradio accepted the event (HTTP 200: a bad body's 422, an unknown endpoint's
      404/500, a full queue's 503, a failure or a lost connection give it back at once), and is freed when the
      event's handler starts (Handlers.arrived) or, for an accepted event that never starts, after places.ttl_s;
    - an upload is refused with 429 past its client's rate (`rate`); its files are owned by the client and the
      disk cap is enforced as soon as they are written (`downloads`: appkit/public/disk.py), in a worker thread:
      the event loop never walks a folder."""

    def __init__(self, app, places: Places, downloads=None, prefix: str = "/gradio_api",
                 rate: UploadRate | None = None):
        self.app, self.places, self.downloads, self.prefix = app, places, downloads, prefix
        self.rate = rate or UploadRate()

    async def _upload(self, scope, receive, send, client: str):
        if not self.rate.take(client):
            return await _refuse(send, 429, "too many uploads from this address: wait a few seconds")
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
            import anyio
            await anyio.to_thread.run_sync(self.downloads.written, [p for p in paths if isinstance(p, str)], client)

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        if scope.get("method") != "POST" or not path.startswith(self.prefix):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = client_of((scope.get("client") or ("", 0))[0], headers)
        if path.rstrip("/") == self.prefix + "/upload":
            return await self._upload(scope, receive, send, client)
        if not path[len(self.prefix):].startswith(JOINS):
            return await self.app(scope, receive, send)
        why = self.places.admit(client)
        if why is not None:
            return await _refuse(send, 429, why)
        status: list[int] = []

        async def watch(message):
            if message.get("type") == "http.response.start":
                status.append(int(message.get("status", 0)))
            await send(message)
        try:
            await self.app(scope, receive, watch)
        finally:
            if not status or status[0] != 200:  # Gradio did not accept the event: no place is taken
                self.places.release(client)


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
