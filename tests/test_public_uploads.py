"""Public uploads are capped on the route itself and count against the disk cap as soon as they are on disk:
ten 24 MB uploads once took Gradio's upload folder past the cap, and the next run's pruning then deleted other
visitors' fresh files while the junk stayed. Real server on loopback, two client addresses."""
from __future__ import annotations

import os
from pathlib import Path

import httpx

import app as app_module
from appkit.public.disk import Downloads
from test_app import cache_dir, free_port  # noqa: F401

MB = 2**20


def test_a_writers_own_old_files_go_first_and_every_owners_newest_last(tmp_path):
    dl = Downloads(tmp_path / "ours", cap=3 * MB)
    dl.others = [tmp_path / "gradio"]
    made = []
    for i, owner in enumerate(["victim", "junk", "junk", "junk"]):
        d = tmp_path / "gradio" / f"h{i}"
        d.mkdir(parents=True)
        (d / "f.json").write_bytes(b"x" * MB)
        os.utime(d, (1000 + i, 1000 + i))
        dl.owners[d] = owner
        made.append(d)
    dl.max_age_s = 1e12
    assert dl.prune(owner="junk") <= 3 * MB
    assert made[0].exists() and not made[1].exists()  # the junk's oldest went, the victim's (older) stayed


def test_uploads_are_capped_on_the_route_and_pruned_on_arrival_by_their_writer(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    monkeypatch.setenv("DECODESCOPE_DISK_CAP_MB", "10")
    demo = app_module.build_demo(app_module.EMBEDDED_TARGET, app_module.EMBEDDED_DRAFT, public=True)
    dl = demo.decodescope["handlers"].downloads
    dl.root = tmp_path / "downloads"
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                **app_module.launch_kwargs(demo))
    url = f"http://127.0.0.1:{port}/gradio_api/upload"
    attacker = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=60)
    victim = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=60)
    try:
        r = victim.post(url, files={"files": ("mine.json", b"{" + b" " * MB + b"}")})
        assert r.status_code == 200, r.text
        mine = Path(r.json()[0])
        big = attacker.post(url, files={"files": ("big.json", b"x" * (6 * MB))})
        assert big.status_code >= 400  # over the public trace cap (5 MB): refused by the route
        for i in range(8):
            r = attacker.post(url, files={"files": (f"junk{i}.json", bytes([65 + i]) * (4 * MB))})
            assert r.status_code == 200, r.text
            assert dl.used() <= dl.cap + 4 * MB, (i, dl.used())
        assert mine.is_file()  # another visitor's fresh upload outlived the junk
    finally:
        attacker.close()
        victim.close()
        demo.close()
