"""The one command a GPU session runs: correctness on CUDA, exactness against HF greedy, the latency curve
and the speed rows, each judged against its goal (GOALS below; bench/gpu/GPU.md), in ONE report.

    python bench/gpu/gpu_check.py --out DIR                # on the GPU machine (all four items)
    python bench/gpu/gpu_check.py --out DIR --items c,d    # some items; the report merges what DIR holds

On a session with a 10-minute limit per command, run the items in two or three commands into the same DIR
(e.g. --items a,b then --items c then --items d): each run rewrites the report from every item file in DIR.
    python bench/gpu/gpu_check.py --out DIR --quick        # seconds, CPU, tiny models: checks it all runs

Items: (a) pytest -m cuda tests/test_cuda.py, parsed from JUnit XML; (b) the exactness matrix (methods x
{fp32, bf16}, embedded models, 12 held-out prompts, 96 tokens); (c) bench/gpu/gpu_scaling.py (7B-shaped random
bf16 Llama: 1-token step, 64-token tree step, first run vs warm); (d) speed rows (ours vs HF greedy, HF
static-cache compiled greedy, HF assisted, HF prompt lookup). Each item runs in its own process: a crash,
a CUDA error or a timeout is recorded as that item's failure and the next item still runs. The report
(DIR/gpu_check.md, DIR/gpu_check.json) is rewritten after every item, so a killed session leaves one.
Imports no gradio, plotly, viz or app (the GPU image has none of them).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ITEMS = {"a": "CUDA test matrix", "b": "exactness vs HF greedy", "c": "latency curve (7B shape)",
         "d": "speed rows"}
GOALS = {"step_ms": 6.0, "tree_ratio": 1.3, "first_warm": 1.2, "lookahead_vs_hf": 3.0,
         "lookahead_vs_static": 1.5, "spec_vs_assisted": 2.0}


def environment() -> dict:
    import torch
    import transformers
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        gpu = None
    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "nvidia_smi": gpu, "cuda": torch.cuda.is_available(),
            "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "machine": platform.platform(), "cpus": os.cpu_count()}


def item_a(out: Path, quick: bool) -> dict:
    xml = out / "cuda_tests.xml"
    sel = (["-m", "not cuda", "-k", "test_greedy_matches_hf_greedy and cpu-fp32-tiny and (greedy or chain)"]
           if quick else ["-m", "cuda"])
    files = ["tests/test_cuda.py"] + ([] if quick else ["tests/test_gpu_stage.py"])  # + capture/sync CUDA rows
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files, *sel,
           f"--junitxml={xml}"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    cases = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        status = next((c.tag for c in tc if c.tag in ("failure", "error", "skipped")), "passed")
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        cases.append({"name": tc.get("name"), "status": status,
                      "agreement": json.loads(props["agreement"]) if "agreement" in props else None,
                      "message": next((c.get("message") for c in tc if c.tag in ("failure", "error")), None)})
    count = {s: sum(c["status"] == s for c in cases) for s in ("passed", "failure", "error", "skipped")}
    return {"command": " ".join(["python -m pytest", *files, *sel]), "returncode": r.returncode,
            "counts": count, "cases": cases, "tail": r.stdout[-3000:]}


def item_b(out: Path, quick: bool) -> dict:
    import gpu_rows
    device = "cpu" if quick else "cuda"
    return gpu_rows.exactness(quick, device, 16 if quick else 96)


def item_c(out: Path, quick: bool) -> dict:
    import gpu_scaling
    return gpu_scaling.main(["--quick"] if quick else ["--out", str(out)])


def item_d(out: Path, quick: bool) -> dict:
    import gpu_rows
    runs = int(os.environ.get("GPU_CHECK_RUNS", "3"))
    dtype = os.environ.get("GPU_CHECK_DTYPE") or None
    return gpu_rows.speed(quick, "cpu" if quick else "cuda", 16 if quick else 96, 1 if quick else runs, dtype)


ITEM_FNS = {"a": item_a, "b": item_b, "c": item_c, "d": item_d}


def run_inline(key: str, out: Path, quick: bool) -> dict:
    """Quick mode: run one item in this process (seconds instead of a torch import per item); an
    exception is recorded as the item's failure, like a crashed child process."""
    import traceback
    t0 = time.time()
    try:
        rec = ITEM_FNS[key](out, quick)
    except Exception as e:  # noqa: BLE001 - record and go on to the next item
        rec = {"error": f"{type(e).__name__}: {e}", "tail": traceback.format_exc()[-4000:]}
    rec["seconds"] = round(time.time() - t0, 1)
    rec["item_command"] = f"python bench/gpu/gpu_check.py --items {key} --quick"
    (out / f"item_{key}.json").write_text(json.dumps(rec, indent=1, default=str))
    return rec


def run_item(key: str, out: Path, quick: bool, timeout: int) -> dict:
    """Run one item in a child process; whatever happens, return a record (never raise)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--item", key, "--out", str(out)] + (["--quick"] if quick else [])
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, tail = r.returncode, (r.stdout + r.stderr)[-4000:]
    except subprocess.TimeoutExpired as e:
        rc, tail = "timeout", f"killed after {timeout} s\n" + str(e.stderr or "")[-3000:]
    path = out / f"item_{key}.json"
    rec = json.loads(path.read_text()) if rc == 0 and path.exists() else {"error": f"exit {rc}", "tail": tail}
    rec["seconds"] = round(time.time() - t0, 1)
    rec["item_command"] = " ".join(["python bench/gpu/gpu_check.py --items", key] + (["--quick"] if quick else []))
    path.write_text(json.dumps(rec, indent=1, default=str))
    return rec


def judge(items: dict, quick: bool, env: dict) -> list[dict]:
    """One line per goal: pass / fail / error (item crashed) / missing (item not run); quick mode keeps
    the measured values but marks speed goals 'info' (tiny CPU models say nothing about a 7B on a GPU)."""
    where = f"{env.get('nvidia_smi') or env.get('cuda_device') or 'cpu'}"
    lines = []

    def add(key, goal, value, ok, dtype, speed=True, graded=True, path=None):
        if path is not None and ok is not None and not path_ok(path, quick):
            ok, value = False, f"{value} (path: {path.get('label')})"  # a failed capture fails its goal
        it = items.get(key)
        if it is None:
            status = "missing"
        elif "error" in it:
            status, value = "error", it["error"]
        elif ok is None:
            status = "error"
        else:
            status = ("pass" if ok else "fail") if graded and not (quick and speed) else "info"
        lines.append({"item": key, "goal": goal, "value": value, "status": status, "device": where, "dtype": dtype,
                      "command": (it or {}).get("item_command", f"python bench/gpu/gpu_check.py --items {key}"),
                      "path": (path or {}).get("label", "–")})

    a = items.get("a", {})
    cnt = a.get("counts", {})
    ran = cnt.get("passed", 0) + cnt.get("failure", 0) + cnt.get("error", 0)
    bad = cnt.get("failure", 0) + cnt.get("error", 0)
    add("a", "0 failures in the CUDA matrix", f"{cnt.get('passed', 0)} passed, {bad} failed, "
        f"{cnt.get('skipped', 0)} skipped", (bad == 0 and ran > 0) if cnt else None, "fp32+bf16", speed=False)
    rows = items.get("b", {}).get("rows", [])
    ours32 = [r for r in rows if r["ours"] and r["dtype"] == "fp32"]
    add("b", "fp32 rows identical to HF greedy", ", ".join(f"{r['method']} {r['identical']}/{r['prompts']}"
                                                           for r in ours32) or "no rows",
        all(r["identical"] == r["prompts"] for r in ours32) if ours32 else None, "fp32", speed=False)
    bf = [r for r in rows if r["dtype"] == "bf16"]
    add("b", "bf16 agreement with HF greedy (reported, no goal)",
        ", ".join(f"{r['method']} {r['identical']}/{r['prompts']}" for r in bf) or "no rows",
        True if bf else None, "bf16", speed=False, graded=False)
    c = items.get("c", {})
    dt = c.get("meta", {}).get("dtype", "?")
    one = c.get("sweep", {}).get("points", [{}])[0].get("ms")
    add("c", f"7B 1-token step <= {GOALS['step_ms']} ms", f"{one:.2f} ms" if one else None,
        one <= GOALS["step_ms"] if one else None, dt, path=c.get("sweep", {}).get("path", {}))
    tr = c.get("tree_step", {}).get("ratio")
    add("c", f"64-token tree step <= {GOALS['tree_ratio']}x the 1-token step", f"{tr:.2f}x" if tr else None,
        tr <= GOALS["tree_ratio"] if tr else None, dt, path=c.get("tree_step", {}).get("path", {}))
    fw = c.get("first_vs_warm", {}).get("ratio")
    add("c", f"first-run step within {GOALS['first_warm']}x of a warm one", f"{fw:.2f}x" if fw else None,
        fw <= GOALS["first_warm"] if fw else None, dt, path=c.get("first_vs_warm", {}).get("path", {}))
    dy = c.get("dynamic_tree_step", {})
    add("c", "dynamic path, labelled (reported, no goal)", f"1-token {dy['one_ms']:.2f} ms, tree {dy['ratio']:.2f}x"
        if dy.get("one_ms") else None, True if dy.get("one_ms") else None, dt, graded=False, path=dy.get("path"))
    d = items.get("d", {})
    drows, ddt = d.get("rows", []), d.get("dtype", "?")
    by = {r["method"]: r for r in drows}
    users = [r for r in drows if "(dynamic path)" not in r["method"]]  # the goals judge the default path
    look = max((r for r in users if r["method"].startswith("ours lookahead")), key=lambda r: r["tokens_per_s"],
               default=None)
    spec = max((r for r in users if r["method"].startswith("ours speculative")), key=lambda r: r["tokens_per_s"],
               default=None)
    hf, st = by.get("HF greedy"), by.get("HF greedy static cache (compiled)")
    ast = next((r for r in drows if r["method"].startswith("HF assisted")), None)
    for goal, ref, row, want in ((f"lookahead >= {GOALS['lookahead_vs_hf']}x HF greedy", hf, look, GOALS["lookahead_vs_hf"]),
                                 (f"lookahead >= {GOALS['lookahead_vs_static']}x HF static-cache compiled greedy", st,
                                  look, GOALS["lookahead_vs_static"]),
                                 (f"our speculative >= {GOALS['spec_vs_assisted']}x HF assisted", ast, spec,
                                  GOALS["spec_vs_assisted"])):
        x = row["tokens_per_s"] / ref["tokens_per_s"] if row and ref else None
        add("d", goal, f"{x:.2f}x ({row['method']} {row['tokens_per_s']:.0f} vs {ref['method']} "
            f"{ref['tokens_per_s']:.0f} tok/s)" if x else None, x >= want if x else None, ddt,
            path=(row or {}).get("path", {}))
    return lines


def path_ok(path: dict, quick: bool) -> bool:
    """A timed row counts for a GPU goal only on the path users run: static with graphs on, and no
    capture failure (quick mode on CPU: no capture failure)."""
    if path.get("failed"):
        return False
    return quick or bool(path.get("static") and path.get("graphs"))


def markdown(doc: dict) -> str:
    env = doc["environment"]
    out = [f"# gpu_check{' (quick: CPU, tiny models — not the goals)' if doc['quick'] else ''}", "",
           f"GPU {env.get('nvidia_smi') or env.get('cuda_device') or 'none'}; torch {env['torch']}, transformers "
           f"{env['transformers']}, Python {env['python']}; command `{doc['command']}`; {doc['finished']}.", "",
           "| item | goal | value | status | device | dtype | path | command |", "|---|---|---|---|---|---|---|---|"]
    out += [f"| {g['item']} | {g['goal']} | {g['value']} | **{g['status']}** | {g['device']} | {g['dtype']} | "
            f"{g.get('path', '–')} | `{g['command']}` |" for g in doc["goals"]]
    d = doc["items"].get("d", {})
    if d.get("rows"):
        out += ["", f"Speed rows ({d['device']}, {d['dtype']}, {d['prompts']} prompts x {d['new_tokens']} tokens, "
                f"median of {d['runs']} runs after a warm-up round; prompts: {d['prompt_source']}):", "",
                "| method | tokens/s | vs HF greedy | compression | same as HF greedy | path |",
                "|---|---|---|---|---|---|"]
        out += [f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['vs_hf_greedy']:.2f}x | "
                + (f"{r['compression']:.2f}" if r["compression"] else "–")
                + f" | {'yes' if r['same_as_hf_greedy'] else 'no'} | {r.get('path', {}).get('label', '–')} |"
                for r in d["rows"]]
    b = doc["items"].get("b", {})
    if b.get("rows"):
        out += ["", f"Exactness vs HF greedy ({b['device']}, {b['new_tokens']} tokens; prompts: {b['prompt_source']}):",
                "", "| method | dtype | identical prompts | first divergence per prompt |", "|---|---|---|---|"]
        out += [f"| {r['method']} | {r['dtype']} | {r['identical']}/{r['prompts']} | {r['first_divergence']} |"
                for r in b["rows"]]
    for name, err in d.get("errors", {}).items():
        out += ["", f"Speed row {name} failed: {err}"]
    for r in b.get("rows", []):
        if "error" in r:
            out += ["", f"Exactness row {r['method']} {r['dtype']} failed: {r['error']}"]
    for k, it in doc["items"].items():
        if "error" in it:
            out += ["", f"Item {k} ({ITEMS[k]}) failed: {it['error']}", "```", it.get("tail", "")[-2000:], "```"]
    return "\n".join(out) + "\n"


def report(out: Path, quick: bool, command: str) -> dict:
    env = environment()
    items = {k: json.loads((out / f"item_{k}.json").read_text()) for k in ITEMS if (out / f"item_{k}.json").exists()}
    doc = {"command": command, "quick": quick, "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "environment": env, "goals": judge(items, quick, env), "items": items}
    (out / "gpu_check.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "gpu_check.md").write_text(markdown(doc))
    return doc


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="CPU, tiny models, seconds")
    ap.add_argument("--items", default="a,b,c,d", help="comma-separated subset of a,b,c,d")
    ap.add_argument("--item-timeout", type=int, default=560, help="seconds before an item is killed")
    ap.add_argument("--runs", type=int, default=3, help="timed rounds of the speed rows (item d)")
    ap.add_argument("--dtype", default="", help="speed rows' dtype (item d; default: what load() picks)")
    ap.add_argument("--item", default=None, help=argparse.SUPPRESS)  # child process: run one item
    a = ap.parse_args(argv)
    if not a.quick:
        import torch
        if not torch.cuda.is_available():  # GPU goals judged on a CPU would be meaningless
            print("error: no CUDA device here: gpu_check judges GPU goals only on a GPU (--quick checks on CPU "
                  "that it runs, with tiny models and no goals)", file=sys.stderr)
            raise SystemExit(2)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))  # gpu_rows, gpu_scaling
    os.environ["GPU_CHECK_RUNS"] = str(a.runs)  # read by item d, in this process or a child
    os.environ["GPU_CHECK_DTYPE"] = a.dtype
    if a.item:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        (out / f"item_{a.item}.json").write_text(json.dumps(ITEM_FNS[a.item](out, a.quick), indent=1, default=str))
        return {}
    command = "python bench/gpu/gpu_check.py " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = report(out, a.quick, command)
    for key in [k.strip() for k in a.items.split(",") if k.strip()]:
        if key not in ITEMS:
            raise SystemExit(f"error: unknown item {key!r}; choose from {', '.join(ITEMS)}")
        (out / f"item_{key}.json").unlink(missing_ok=True)
        rec = run_inline(key, out, a.quick) if a.quick else run_item(key, out, a.quick, a.item_timeout)
        print(f"[{key}] {ITEMS[key]}: {'error: ' + rec['error'] if 'error' in rec else 'done'} "
              f"({rec['seconds']} s)", file=sys.stderr)
        doc = report(out, a.quick, command)
    for g in doc["goals"]:
        print(f"{g['status']:>7}  {g['goal']}: {g['value']}")
    return doc


if __name__ == "__main__":
    main()
