"""Past one process, for real: two processes on the gloo backend (torch.multiprocessing, a free port),
a tiny Llama with 4 query / 2 key-value heads saved as a model folder.

- tensor parallelism (decoding.models.load(tp_plan="auto"), transformers' own sharding): all nine methods
  (the heads' and adapter's drafting included) give exactly single-process HF greedy's tokens on both ranks, and
  rank 0's trace carries world size, backend and per-step collective time from torch.profiler;
- lookahead parallelism (run(..., lp=True)): the same tokens, for several window shapes, with the debug
  hash of every rank's KV cache, window and pool checked after every step (a mismatch raises), decoded by
  the engine's one loop (runner._decode runs once per run; decoding/parallel/ holds no loop of its own);
- a head count that does not divide the world size is refused before any weight is read (the folder's
  weight file is garbage: reaching it would give another error).
One pair of forked processes runs all of it; the tests read its results.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import socket
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from conftest import hf_greedy, save_tiny_dir

NEW = 24
# every method; the values in capitals are folders the fixture writes (the draft, heads, adapter)
TP_METHODS = {"greedy": {}, "lookahead": {}, "prompt_lookup": {}, "speculative": {"draft_model": "DRAFT"},
              "jacobi": {"block": 4}, "medusa": {"heads": "MEDUSA", "budget": 6}, "eagle": {"heads": "EAGLE", "budget": 6},
              "retrieval": {}, "self_speculative": {"adapter": "ADAPTER"}}
LP_SHAPES = [{"window": 5, "ngram": 4, "guesses": 5}, {"window": 3, "ngram": 3, "guesses": 4},
             {"window": 6, "ngram": 5, "guesses": 2}]
PROMPT = "def f ( x ) : return x + 1 def g ( x ) : return f ( x ) + 1 def h ( x ) : return g"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, dirs: dict, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), HF_HUB_OFFLINE="1")
    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    from decoding.api import run
    from decoding.models import load
    from decoding.parallel.group import finish
    res: dict = {}
    try:
        load(dirs["odd"], tp_plan="auto")
        res["refusal"] = None
    except ValueError as e:
        res["refusal"] = str(e)
    model, tok = load(dirs["tiny"], tp_plan="auto")
    for name, kw in TP_METHODS.items():
        kw = {k: dirs[v.lower()] if isinstance(v, str) and v.lower() in dirs else v for k, v in kw.items()}
        tr = run(model, tok, PROMPT, name, max_new_tokens=NEW, **kw)
        res[f"tp/{name}"] = {"ids": tr.output_ids, "distributed": tr.config["distributed"],
                             "comm": [s.info.get("comm_ms") for s in tr.steps],
                             "collectives": [s.info.get("collectives") for s in tr.steps],
                             "doc": tr.to_json() if rank == 0 and name == "lookahead" else None}
    model, tok = load(dirs["tiny"])
    from decoding.engine import runner
    with mock.patch.object(runner, "_decode", wraps=runner._decode) as loop:  # counts, changes nothing
        for i, shape in enumerate(LP_SHAPES):
            tr = run(model, tok, PROMPT, "lookahead", max_new_tokens=NEW, lp=True, lp_debug=True, **shape)
            res[f"lp/{i}"] = {"ids": tr.output_ids, "distributed": tr.config["distributed"],
                              "lp": [s.info.get("lp") for s in tr.steps], "accepted": [len(s.accepted) for s in tr.steps],
                              "doc": tr.to_json() if rank == 0 and i == 0 else None}
        res["lp_loops"] = loop.call_count
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    finish()


def trained_folders(model_dir: str, root) -> dict:
    """Medusa and EAGLE heads and a self-speculative adapter for the tiny model, saved as training saves
    them (fresh weights, seeded: exactness never depends on how well they draft)."""
    from decoding.methods.self_draft.heads import new_heads, save_heads
    from decoding.methods.self_draft.self_spec_adapter import new_adapter, save_adapter
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = {}
    for kind in ("medusa", "eagle"):
        module, cfg = new_heads(model, kind, n_heads=2)
        save_heads(module, cfg, root / kind)
        out[kind] = str(root / kind)
    layer, cfg = new_adapter(model, 1)
    save_adapter(layer, cfg, root / "adapter")
    out["adapter"] = str(root / "adapter")
    return out


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    dirs = {"tiny": save_tiny_dir(root / "tiny"), "draft": save_tiny_dir(root / "draft", seed=1)}
    odd = root / "odd"  # 3 heads: does not divide by 2; its weight file is not a weight file
    LlamaForCausalLM(LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=1, num_attention_heads=3,
                                 num_key_value_heads=3, vocab_size=64, max_position_embeddings=128)).save_pretrained(odd)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(dirs["tiny"], f), odd / f)
    (odd / "model.safetensors").write_text("not weights")
    dirs["odd"] = str(odd)
    dirs.update(trained_folders(dirs["tiny"], root))
    # forked, not spawned: a spawned interpreter re-imports torch, transformers and this module first (most of this
    # fixture's minute on 2 cores); the parent holds no model and runs torch on one thread, so a fork is clean
    mp.start_processes(_worker, args=(2, free_port(), dirs, str(root)), nprocs=2, join=True, start_method="fork")
    ranks = [json.loads((root / f"rank{r}.json").read_text()) for r in range(2)]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(dirs["tiny"])
    ids = tok(PROMPT)["input_ids"]
    ref = AutoModelForCausalLM.from_pretrained(dirs["tiny"], dtype=torch.float32).eval()
    return ranks, hf_greedy(ref, ids, NEW)


@pytest.mark.parametrize("method", list(TP_METHODS))
def test_tensor_parallel_matches_single_process_hf_greedy(spawned, method):
    ranks, expected = spawned
    for r in ranks:
        assert r[f"tp/{method}"]["ids"] == expected
    d = ranks[0][f"tp/{method}"]["distributed"]
    assert (d["mode"], d["world_size"], d["backend"]) == ("tensor", 2, "gloo")
    assert set(d["switched_off"]) == {"static_cache", "weight_layout"}
    comm, count = ranks[0][f"tp/{method}"]["comm"], ranks[0][f"tp/{method}"]["collectives"]
    assert all(c is not None and c > 0 for c in comm) and all(n >= 2 for n in count)  # 2 layers: all-reduces


def test_lookahead_parallel_matches_hf_greedy_with_identical_state(spawned):
    ranks, expected = spawned
    for i, shape in enumerate(LP_SHAPES):
        r0, r1 = (r[f"lp/{i}"] for r in ranks)
        assert r0["ids"] == expected and r1["ids"] == expected, shape
        hashes = [[s.get("state_hash") for s in r["lp"][1:]] for r in (r0, r1)]
        assert hashes[0] == hashes[1] and all(hashes[0])  # checked every step, equal on both ranks
        d = r0["distributed"]
        assert d["mode"] == "lookahead_parallel" and sorted(sum(d["columns"], [])) == list(range(shape["window"]))
        decode = r0["lp"][1:]
        assert all(len(s["compute_ms"]) == 2 and len(s["comm_ms"]) == 2 and len(s["cells"]) == 2 for s in decode)
    lp = ranks[0]["lp/0"]
    assert max(lp["accepted"][1:]) > 1  # candidates were accepted, so the verification branch did work
    assert any(s["candidates"] for s in ranks[1]["lp/0"]["lp"][1:])  # rank 1 verified candidates too


def test_lookahead_parallel_runs_through_the_runners_loop(spawned):
    ranks, _ = spawned
    assert [r["lp_loops"] for r in ranks] == [len(LP_SHAPES)] * 2  # one engine loop per run, on every rank


def test_parallel_package_defines_no_decode_loop():
    """Only the engine's runner decodes: decoding/parallel/ has no loop over steps, records no Step or Trace of
    its own and imports no private helper (a `_name`) of the engine."""
    root = Path(__file__).resolve().parent.parent / "decoding" / "parallel"
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.While):
                found.append(f"{path.name}:{node.lineno} while loop")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("Step", "Trace"):
                found.append(f"{path.name}:{node.lineno} builds a {getattr(node.func, 'id', None) or node.func.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("decoding")):
                found += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if a.name.startswith("_")
                          and a.name != "__future__"]
    assert not found, found


@pytest.mark.parametrize("world", [1, 2, 3, 7])
@pytest.mark.parametrize("shape", LP_SHAPES + [{"window": 4, "ngram": 3, "guesses": 6, "dedupe": False}])
def test_every_rank_share_is_a_piece_of_the_one_process_plan(world, shape):
    """Each rank's query maps node for node onto the one-process plan (same token, parent onto parent), and
    every row the plan reads is computed by the rank whose prediction counts there."""
    from decoding.methods.windows.lookahead import Lookahead
    from decoding.parallel.lookahead_parallel import Split, split_columns
    words = [3, 4, 5, 3, 4, 6, 3, 4, 5, 7, 3, 4]
    la = Lookahead(**shape)
    la.start(words)
    split = Split(0, world, "gloo", split_columns(la.W, world))
    context = list(words)
    for _ in range(la.N + 1):  # warm-up levels, then the full window with candidates
        plan = la.plan(context)
        split.stage(plan, la)
        for s in split.shares:
            assert len(set(s.full)) == len(s.full)
            for i, f in enumerate(s.full):
                assert s.tokens[i] == plan.tokens[f] and s.depths[i] == plan.depths[f]
                assert (-1 if s.parents[i] < 0 else s.full[s.parents[i]]) == plan.parents[f]
        for f in plan.rows:
            s = split.shares[split.owner[f]]
            assert f in [s.full[i] for i in s.rows], (f, split.owner[f])
        la.advance(context[-1], [context[-1]] * la.W, context)
        context.append(context[-1])
    assert any(role == "candidate" for role in plan.roles)


def test_distributed_traces_load_and_record_their_fields(spawned):
    from decoding.trace import Trace
    ranks, _ = spawned
    tp = Trace.from_json(ranks[0]["tp/lookahead"]["doc"])
    assert tp.config["distributed"]["world_size"] == 2 and "comm_ms" in tp.steps[1].info
    lp = Trace.from_json(ranks[0]["lp/0"]["doc"])
    cells = lp.steps[2].info["lp"]["cells"]
    owned = {tuple(c) for c in cells[1]} - {tuple(c) for c in cells[0]}
    assert owned and all(lev >= 0 for lev, _ in owned)  # rank 1 computed cells rank 0 did not


def test_non_dividing_heads_are_refused_before_weights_load(spawned):
    ranks, _ = spawned
    for r in ranks:
        msg = r["refusal"]
        assert msg and "divisible by 2" in msg and "attention heads 3" in msg and "--lp" in msg


def test_columns_split_covers_the_window_once():
    from decoding.parallel.lookahead_parallel import split_columns
    for w in range(1, 9):
        for p in range(1, 5):
            cols = split_columns(w, p)
            assert sorted(sum(cols, [])) == list(range(w)) and len(cols) == p
            assert max(map(len, cols)) - min(map(len, cols)) <= 1


def test_pictures_and_projections_read_the_distributed_trace(spawned):
    from decoding.trace import Trace
    from profiling.interconnect import LLAMA_7B, lp_project, parse_gpus_link, tp_project
    from viz.summaries import comm_steps, lp_window
    ranks, _ = spawned
    tp, lp = Trace.from_json(ranks[0]["tp/lookahead"]["doc"]), Trace.from_json(ranks[0]["lp/0"]["doc"])
    assert len(comm_steps.figure(tp).data) == 2 and len(comm_steps.figure(lp).data) == 4  # compute + comm per rank
    fig = lp_window.figure(lp, 3)
    assert {t.name for t in fig.data} == {"rank 0", "rank 1"}
    nv, pcie = (tp_project(tp, "H100", 8, link, arch=LLAMA_7B) for link in ("nvlink", "pcie"))
    assert pcie["comm_ms"] > nv["comm_ms"] > 0 and nv["inputs"]["link_GBps_one_direction"] == 450
    assert lp_project(lp, "A100", 8, "nvlink", arch=LLAMA_7B)["speedup_vs_greedy"] > 0
    assert parse_gpus_link("8xnvlink") == (8, "nvlink")
    with pytest.raises(ValueError):
        parse_gpus_link("8xethernet")
    bad = json.loads(ranks[0]["lp/0"]["doc"])
    bad["config"]["distributed"]["world_size"] = 0
    with pytest.raises(ValueError, match="world_size"):
        Trace.from_dict(bad)


def test_a_refusal_under_torchrun_is_one_line_from_rank_0(tmp_path):
    """A bad option under torchrun (--lp with a method it does not split): one `error:` line (rank 0's, the
    other ranks quiet), a non-zero status, rank 0's status 2 the root cause torchrun reports, and no traceback
    of ours (torchrun's own failure report follows: a worker cannot switch it off)."""
    import os
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "DECODESCOPE_NO_FETCH": "1", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                        "127.0.0.1", "--master-port", str(port), "-m", "decoding", "generate", "--model", "embedded",
                        "--lp", "--method", "greedy", "--prompt", "x"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env=env)
    out = r.stdout + r.stderr
    ours = [line for line in out.splitlines() if line.startswith("error: ")]
    assert r.returncode != 0 and ours == ["error: --lp splits lookahead's window over the processes: use --method "
                                           "lookahead"], out[-3000:]
    root_cause = out.split("Root Cause", 1)[-1]
    assert "rank      : 0" in root_cause and "exitcode  : 2" in root_cause, out[-3000:]
    ours_in_a_traceback = [x for x in out.splitlines() if x.strip().startswith("File ") and "/decoding/" in x]
    assert not ours_in_a_traceback, out[-3000:]  # the only traceback is the launcher's, none from our code


def test_lp_says_which_shape_it_runs(tiny_dir):
    """--lp without a shape runs the paper's defaults (a device preset is timed in one process): a [preset]
    line says so, as every other lookahead run's does."""
    from decoding.cli.main import build_parser
    from decoding.cli.method_flags import setup
    args = build_parser().parse_args(["generate", "--model", tiny_dir, "--method", "lookahead", "--lp",
                                      "--prompt", "def x", "--max-new-tokens", "2"])
    setup(args)
    lines = [x for x in getattr(args, "notes", []) if x.startswith("[preset]")]
    assert len(lines) == 1 and "paper's defaults" in lines[0] and "--lp" in lines[0], getattr(args, "notes", [])
    args = build_parser().parse_args(["generate", "--model", tiny_dir, "--method", "lookahead", "--lp",
                                      "--window", "3", "--prompt", "def x", "--max-new-tokens", "2"])
    setup(args)
    assert not [x for x in getattr(args, "notes", []) if x.startswith("[preset]")]  # a given shape: no line
