"""Limits per client, not per Gradio session: one machine firing API calls (each its own session) never locks
other visitors out of the queue, and its throwaway sessions are not served before a returning visitor.
Real server on loopback; the attacker and the visitor are two loopback addresses (127.0.0.1, 127.0.0.2)."""
from __future__ import annotations

import json
import time

import httpx
import pytest

import app as app_module
from appkit.public.clients import Places, client_of
from test_app import cache_dir, free_port  # noqa: F401
from test_public_sessions import args

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting:Warning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated:Warning")]


def _http(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def _result(http: httpx.Client, base: str, event: str, within: float) -> list:
    """Read a /call event's stream to its end: the outputs, or AssertionError with the error it sent."""
    with http.stream("GET", f"{base}/gradio_api/call/run/{event}", timeout=within) as r:
        kind = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind in ("complete", "error"):
                data = line.split(":", 1)[1].strip()
                assert kind == "complete", f"the run failed: {data}"
                return json.loads(data)
    raise AssertionError("the stream ended without a result")


def test_forwarded_for_is_read_only_behind_a_trusted_proxy_and_only_as_the_proxy_wrote_it():
    spoofed = {"x-forwarded-for": "1.2.3.4, 93.184.216.34, 10.0.0.5"}  # visitor's words, then the proxy's entries
    assert client_of("10.1.1.1", spoofed, behind_proxy=True) == "93.184.216.34"
    assert client_of("10.1.1.1", spoofed, behind_proxy=False) == "10.1.1.1"  # no proxy: the header is anyone's
    assert client_of("10.1.1.1", {"x-forwarded-for": "not an address"}, behind_proxy=True) == "10.1.1.1"


def test_places_keep_room_for_clients_with_nothing_waiting():
    p = Places(size=8, per_client=3, reserve=4)
    assert [p.admit("a") for _ in range(3)] == [None] * 3 and p.admit("a") is not None  # per client
    assert p.admit("b") is None and p.admit("b") is not None  # 4 waiting: the last 4 places are for clients with none
    assert [p.admit(c) for c in "cdef"] == [None] * 4 and p.admit("g") is not None  # full: 8
    p.started("a")
    assert p.admit("g") is None and p.waiting() == 8


def test_one_machine_firing_api_calls_never_locks_another_visitor_out():
    """127.0.0.1 fires 40 fire-and-forget /call/run POSTs (each a new session, 96 tokens each) at a queue of
    12 places; 127.0.0.2, a returning visitor, then asks for 8 tokens. It is admitted and served within
    a few of the attacker's runs, not after the flood (which would take over a minute)."""
    demo = app_module.build_demo(app_module.EMBEDDED_TARGET, app_module.EMBEDDED_DRAFT, public=True, queue_size=12)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                **app_module.launch_kwargs(demo))
    base = f"http://127.0.0.1:{port}"
    attacker, visitor = _http("127.0.0.1"), _http("127.0.0.2")
    try:
        body = {"data": args("def v():\n", "greedy", max_new=8)}
        first = visitor.post(f"{base}/gradio_api/call/run", json=body)
        assert first.status_code == 200, first.text
        assert _result(visitor, base, first.json()["event_id"], 120)[2]  # the visitor has been served before
        flood = {"data": args("def f(x):\n", "greedy", max_new=96)}
        codes = [attacker.post(f"{base}/gradio_api/call/run", json=flood).status_code for _ in range(40)]
        t0 = time.monotonic()
        r = visitor.post(f"{base}/gradio_api/call/run", json=body)
        assert r.status_code == 200, (r.status_code, r.text)
        out = _result(visitor, base, r.json()["event_id"], 60)
        waited = time.monotonic() - t0
        assert out[2], out
        assert codes.count(429) >= 30, codes  # the flood's extra calls are refused at once
        assert waited < 30, f"the visitor waited {waited:.0f} s behind one client's flood"
    finally:
        attacker.close()
        visitor.close()
        turns, t0 = demo.decodescope["handlers"].turns, time.monotonic()
        while turns._jobs and time.monotonic() - t0 < 60:  # the flood's admitted runs end before the server does
            time.sleep(0.2)
        demo.close()


def test_a_call_nobody_reads_ends():
    """A fire-and-forget /call/race (15 runs of 256 tokens: about a minute of the worker) whose stream nobody
    opens ends once its messages have waited 10 s unread, not at the race's end."""
    demo = app_module.build_demo(app_module.EMBEDDED_TARGET, app_module.EMBEDDED_DRAFT, public=True)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                **app_module.launch_kwargs(demo))
    turns = demo.decodescope["handlers"].turns
    try:
        body = {"data": args("def f(x):\n", "greedy", max_new=256) + [["lookahead", "prompt_lookup", "jacobi",
                                                                        "retrieval"], 3, False]}
        with httpx.Client(timeout=30) as http:
            r = http.post(f"http://127.0.0.1:{port}/gradio_api/call/race", json=body)
        assert r.status_code == 200, r.text
        t0 = time.monotonic()
        while not turns._jobs and time.monotonic() - t0 < 30:  # it starts
            time.sleep(0.1)
        assert turns._jobs, "the race never started"
        while turns._jobs and time.monotonic() - t0 < 40:
            time.sleep(0.2)
        assert not turns._jobs, "the unread race was still running after 40 s"
    finally:
        demo.close()


def test_a_clients_new_sessions_inherit_its_service_so_throwaway_sessions_are_not_served_first():
    """Client X has been served 0.3 s (session x1), client Y 0.1 s. While the model is busy, a fresh session
    x2 of X queues before Y's session: Y gets the next turn, because x2 carries X's record."""
    import threading
    from appkit.public.fair import Turns
    turns = Turns(max_jobs=2, client_jobs=3)
    for session, client, seconds in (("x1", "X", 0.3), ("y1", "Y", 0.1)):
        with turns.job(session, client), turns.turn(session):
            time.sleep(seconds)
    order, busy = [], threading.Event()

    def hold():
        with turns.job("h", "H"), turns.turn("h"):
            busy.set()
            time.sleep(0.5)

    def wait(session, client):
        with turns.job(session, client), turns.turn(session):
            order.append(session)
    threads = [threading.Thread(target=hold)]
    threads[0].start()
    busy.wait(5)
    for session, client in (("x2", "X"), ("y2", "Y")):
        threads.append(threading.Thread(target=wait, args=(session, client)))
        threads[-1].start()
        time.sleep(0.1)
    for t in threads:
        t.join(10)
    assert order == ["y2", "x2"], order
