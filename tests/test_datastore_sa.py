"""A datastore may ship without its suffix array (the default model's does, to keep the working tree under the
64 MiB a GPU machine receives): it is rebuilt at load, equal to the one written at build time, checked against
the CRC-32 the datastore records, and refused with one line past its size bound or when it differs."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from decoding.methods.retrieve import datastore as dsm
from decoding.methods.retrieve.datastore import SA, TOKENS, Datastore, DatastoreError, write
from decoding.methods.retrieve.retrieval import open_datastore

DOCS = [[random.Random(i).randrange(0, 300) for _ in range(400)] for i in range(5)] + [[1, 2, 3, 4, 1, 2, 5] * 9]


def test_a_datastore_without_sa_bin_gets_the_same_suffix_array(tmp_path):
    write(tmp_path / "full", DOCS, [f"d{i}" for i in range(len(DOCS))], "fp", 300)
    full = Datastore(tmp_path / "full")
    write(tmp_path / "lean", DOCS, [f"d{i}" for i in range(len(DOCS))], "fp", 300)
    (tmp_path / "lean" / SA).unlink()
    lean = Datastore(tmp_path / "lean")
    assert np.array_equal(full.sa, lean.sa)
    for ctx in ([1, 2, 3, 4], [4, 1, 2], DOCS[0][10:20]):
        a, b = full.lookup(ctx), lean.lookup(ctx)
        assert (a is None) == (b is None) and (a is None or (a.length, a.count) == (b.length, b.count))
    assert open_datastore(tmp_path / "lean") is open_datastore(tmp_path / "lean")  # built once, then cached


def test_a_rebuilt_suffix_array_that_differs_from_the_record_is_refused(tmp_path):
    write(tmp_path / "ds", DOCS, [f"d{i}" for i in range(len(DOCS))], "fp", 300)
    (tmp_path / "ds" / SA).unlink()
    meta = json.loads((tmp_path / "ds" / "datastore.json").read_text())
    meta["crc32"][SA] ^= 1
    (tmp_path / "ds" / "datastore.json").write_text(json.dumps(meta))
    with pytest.raises(DatastoreError, match="rebuilt from"):
        Datastore(tmp_path / "ds")


def test_the_rebuild_is_bounded(tmp_path, monkeypatch):
    write(tmp_path / "ds", DOCS, [f"d{i}" for i in range(len(DOCS))], "fp", 300)
    (tmp_path / "ds" / SA).unlink()
    monkeypatch.setattr(dsm, "MAX_TOKENS_WITHOUT_SA", 100)
    with pytest.raises(DatastoreError, match=f"{SA} is missing") as e:
        Datastore(tmp_path / "ds")
    assert "\n" not in str(e.value)


def test_the_shipped_datastore_ships_tokens_only_and_opens():
    from decoding.models import ASSETS
    shipped = ASSETS / "datastore" / "smollm2"
    assert (shipped / TOKENS).is_file() and not (shipped / SA).exists()
    ds = Datastore(shipped)
    assert len(ds.sa) == ds.n and ds.n > 600_000
