"""Self-distillation data at scale for the default model's drafters: its own greedy answers, millions of tokens,
batched on the int8 kernel, resumable, with a manifest.

Why: a drafter accepts what the target would say, so it should learn the target's own text; EAGLE-3 (Li et al.
2025, arXiv 2503.01840) finds acceptance keeps growing with the amount of such data. smollm2_data.py made ~100K
tokens one request at a time; this makes 20x that. Requests (distill_requests.py): templates, code windows of
the training-split standard library, and requests the model writes itself when sampled as the user of its chat
template; every held-out prompt in bench/prompts is filtered out (tests/test_distill_data.py).

How: distill_batch.Batcher runs `--width` sequences a step through one llama_step call on the int8 kernel,
where a row's result does not depend on the other rows: the answers are exactly the int8 greedy of
`python -m decoding generate --kernel int8 --method greedy` (checked at every start, `checks` in the
manifest). The chat template's system turn, which opens every chat and ask prompt, is computed once and
read by every sequence (the same keys, bit for bit). Work is cut into units (shards) in a fixed order, each
written atomically when complete:
    OUT/records/<unit>.jsonl   one JSON line per document (source, request, prompt and answer token ids)
    OUT/text/<unit>.txt        the transcripts (prompt + answer), EOS-separated: `train-heads --data OUT/text`
    OUT/state.json             the settings (a rerun with other settings is refused) and the timing
Rerunning the same command skips the units already written. `--manifest-only` rewrites the manifest from
the units on disk (no model needed).

    nohup nice -n 19 env OMP_NUM_THREADS=1 python assets/heads/smollm2_distill.py --out /work/data/smol_distill \\
        --manifest assets/heads/smollm2_data_manifest.json >> /work/data/smol_distill/log.txt 2>&1 &
    python assets/heads/smollm2_distill.py --out /work/data/smol_distill --manifest-only \\
        --manifest assets/heads/smollm2_data_manifest.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (ROOT, HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import distill_requests as dr  # noqa: E402

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # the template's default
SETTINGS = ("seed", "templates", "new", "code_new", "ask", "ask_new", "ask_shard", "chat_shard", "code_shard",
            "code_windows", "kernel")


@dataclass
class Unit:
    name: str
    source: str  # template | code | ask | asked
    index: int


def units(n_template: int, n_code: int, a) -> list[Unit]:
    """The fixed order of work: round r = ask r, template r, code r, asked r-1 (the requests ask r-1
    yielded: written a round earlier, so they are final when their answers start)."""
    nt, nc = -(-n_template // a.chat_shard), -(-n_code // a.code_shard)
    na = -(-a.ask // a.ask_shard)
    out = []
    for r in range(max(nt, nc, na + 1)):
        if r < na:
            out.append(Unit(f"ask-{r:05d}", "ask", r))
        if r < nt:
            out.append(Unit(f"template-{r:05d}", "template", r))
        if r < nc:
            out.append(Unit(f"code-{r:05d}", "code", r))
        if 0 < r <= na:
            out.append(Unit(f"asked-{r - 1:05d}", "asked", r - 1))
    return out


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def asked_requests(out: Path, upto: int, seen: set[str], held: dr.Heldout) -> list[str]:
    """The new requests of ask unit `upto`: cleaned, not held out, not a template request nor one an earlier
    ask unit gave (all deduplicated by their words)."""
    seen = set(seen)
    for i in range(upto):
        for row in read_jsonl(out / "records" / f"ask-{i:05d}.jsonl"):
            if row["request"]:
                seen.add(dr.dedupe_key(row["request"]))
    new = []
    for row in read_jsonl(out / "records" / f"ask-{upto:05d}.jsonl"):
        req = row["request"]
        if req and dr.dedupe_key(req) not in seen and held.why(req) is None:
            seen.add(dr.dedupe_key(req))
            new.append(req)
    return new


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "host": platform.node()}


def write_manifest(out: Path, path: Path | None, command: str) -> dict:
    """Counts, hashes and timing of the units on disk (never the data)."""
    state = json.loads((out / "state.json").read_text()) if (out / "state.json").exists() else {}
    shards, by_source = [], {}
    for rec in sorted((out / "records").glob("*.jsonl")):
        rows = read_jsonl(rec)
        source = rec.stem.split("-")[0]
        text = out / "text" / f"{rec.stem}.txt"
        new = sum(len(r["answer_ids"]) for r in rows)
        s = by_source.setdefault(source, {"units": 0, "documents": 0, "new_tokens": 0, "prompt_tokens": 0,
                                          "eos_stops": 0})
        s["units"] += 1
        s["documents"] += len(rows)
        s["new_tokens"] += new
        s["prompt_tokens"] += sum(len(r["prompt_ids"]) for r in rows)
        s["eos_stops"] += sum(1 for r in rows if r.get("stopped"))
        shards.append({"unit": rec.stem, "documents": len(rows), "new_tokens": new, "records_sha256": sha256(rec),
                       **({"text_sha256": sha256(text)} if text.exists() else {})})
    total = len(state.get("plan", [])) or None
    done = len(shards)
    training = {k: v for k, v in by_source.items() if k != "ask"}
    manifest = {
        "what": "SmolLM2-135M-Instruct's own greedy answers (int8 kernel) for self-distillation of its drafters; "
                "the data lives outside the repo, this file records what was made",
        "partial": total is None or done < total,
        "units_done": done, "units_planned": total,
        "answer_tokens": sum(v["new_tokens"] for v in training.values()),
        "answer_documents": sum(v["documents"] for v in training.values()),
        "by_source": by_source,
        "settings": state.get("settings"), "kernel": state.get("kernel"), "check": state.get("check"),
        "machine": state.get("machine"), "torch": state.get("torch"), "transformers": state.get("transformers"),
        "started": state.get("started"), "updated": state.get("updated"),
        "generation_seconds": round(state.get("seconds", 0.0), 1),
        "command": state.get("command"),
        "resume": (f"cd {ROOT} && {state['command']}  # the same command: units on disk are skipped"
                   if state.get("command") else None),
        "manifest_command": command,
        "read_by": "python -m decoding train-heads --data OUT/text (the .txt transcripts, EOS-separated)",
        "shards": shards,
    }
    if path is not None:
        write_atomic(path, json.dumps(manifest, indent=1) + "\n")
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    return manifest


class Run:
    """One pass over the plan: feeds the Batcher jobs unit by unit, writes a unit when its last job is done."""

    def __init__(self, a, tok, plan: list[Unit], templates: list[str], code: list[tuple[str, str]],
                 held: dr.Heldout, log):
        self.a, self.tok, self.plan, self.held, self.log = a, tok, plan, held, log
        self.templates, self.code = templates, code
        self.template_keys = {dr.dedupe_key(t) for t in templates}
        self.records, self.texts = a.out / "records", a.out / "text"
        self.pending = [u for u in plan if not (self.records / f"{u.name}.jsonl").exists()]
        self.open: dict[str, dict] = {}  # unit name -> {"unit", "left", "rows"}
        self.key = 0
        self.queue: list = []
        self.t0 = time.time()
        self.tokens = 0

    def chat_ids(self, request: str) -> list[int]:
        ids = self.tok.apply_chat_template([{"role": "user", "content": request}], add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def jobs_for(self, u: Unit):
        """(job, row) pairs of a unit, or None while it waits for an unfinished ask unit."""
        from distill_batch import Job
        a, eos = self.a, frozenset([self.tok.eos_token_id])
        if u.source == "ask":
            out = []
            for k in range(u.index * a.ask_shard, min(a.ask, (u.index + 1) * a.ask_shard)):
                rng = random.Random(a.seed * 1_000_003 + k)
                opener = rng.choice(dr.OPENERS)
                ids = self.tok(dr.ask_prefix(SYSTEM, opener))["input_ids"]
                out.append((Job(0, list(ids), a.ask_new, frozenset([self.tok.convert_tokens_to_ids("<|im_end|>"),
                                                                     self.tok.eos_token_id]),
                                temperature=dr.ASK_TEMPERATURE, top_p=dr.ASK_TOP_P, seed=a.seed * 1_000_003 + k),
                            {"key": k, "opener": opener}))
            return out
        if u.source == "asked":
            if not (self.records / f"ask-{u.index:05d}.jsonl").exists():
                return None
            reqs = asked_requests(a.out, u.index, self.template_keys, self.held)
        elif u.source == "template":
            reqs = self.templates[u.index * a.chat_shard:(u.index + 1) * a.chat_shard]
        else:
            out = []
            for f, window in self.code[u.index * a.code_shard:(u.index + 1) * a.code_shard]:
                out.append((Job(0, self.tok(window)["input_ids"], a.code_new, eos), {"file": f}))
            return out
        return [(Job(0, self.chat_ids(r), a.new, eos), {"request": r}) for r in reqs]

    def next_job(self):
        """The next Job, None when the plan is done, WAIT while the next unit waits on an unfinished one."""
        from distill_batch import WAIT
        while not self.queue:
            if not self.pending:
                return None
            jobs = self.jobs_for(self.pending[0])
            if jobs is None:
                return WAIT
            u = self.pending.pop(0)
            self.open[u.name] = {"unit": u, "left": len(jobs), "rows": [None] * len(jobs)}
            if not jobs:
                self.finish(u.name)
            for i, (job, row) in enumerate(jobs):
                job.key = self.key
                self.key += 1
                job.tag = (u.name, i, row)
                self.queue.append(job)
        return self.queue.pop(0)

    def done(self, job) -> None:
        name, i, row = job.tag
        out = job.out
        stopped = bool(out) and out[-1] in job.stop
        answer = out[:-1] if stopped else out
        self.tokens += len(out)
        entry = self.open[name]
        entry["rows"][i] = {**row, "prompt_ids": job.prompt, "answer_ids": answer, "stopped": stopped}
        entry["left"] -= 1
        if entry["left"] == 0:
            self.finish(name)

    def finish(self, name: str) -> None:
        entry = self.open.pop(name)
        u, rows = entry["unit"], entry["rows"]
        if u.source == "ask":
            for r in rows:
                r["text"] = self.tok.decode(r["answer_ids"])
                # a request the model ended itself (EOS / end of turn); one cut at --ask-new is not a request
                r["request"] = dr.clean_asked(r["opener"] + r["text"]) if r["stopped"] else None
        else:
            docs = [self.tok.decode(r["prompt_ids"] + r["answer_ids"]) for r in rows]
            write_atomic(self.texts / f"{name}.txt", "".join(d + self.tok.eos_token for d in docs))
        write_atomic(self.records / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        el = time.time() - self.t0
        self.log(f"{name}: {len(rows)} documents, {sum(len(r['answer_ids']) for r in rows)} new tokens; "
                 f"{self.tokens} tokens in {el:.0f} s this run ({self.tokens / max(el, 1e-9):.1f} tokens/s), "
                 f"load {os.getloadavg()[0]:.1f}")
        state_path = self.a.out / "state.json"
        state = json.loads(state_path.read_text())
        state["seconds"] = state.get("seconds", 0.0) + (time.time() - state.pop("_mark", self.t0))
        state["_mark"] = time.time()
        state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_atomic(state_path, json.dumps(state, indent=1))
        if self.a.manifest:
            write_manifest(self.a.out, self.a.manifest, manifest_command(self.a))


def manifest_command(a) -> str:
    return (f"python assets/heads/smollm2_distill.py --out {a.out} --manifest-only"
            + (f" --manifest {a.manifest}" if a.manifest else ""))


def check(model, tok, requests: list[str], new: int, width: int, prefix: list[int], log) -> dict:
    """Batched answers vs the engine's one-at-a-time greedy, token for token, and both throughputs."""
    from decoding.engine.runner import generate
    from distill_batch import Batcher, Job
    prompts = []
    for r in requests:
        ids = tok.apply_chat_template([{"role": "user", "content": r}], add_generation_prompt=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    eos = tok.eos_token_id
    t0 = time.time()
    ref = [generate(model, p, max_new_tokens=new, eos_token_id=eos, trace=False).output_ids for p in prompts]
    t1 = time.time()
    got: dict[int, list[int]] = {}
    jobs = iter([Job(i, p, new, frozenset([eos])) for i, p in enumerate(prompts)])
    Batcher(model, width, prefix=prefix).run(lambda: next(jobs, None),
                              lambda j: got.__setitem__(j.key, j.out))
    t2 = time.time()
    same = sum(ref[i] == got[i] for i in range(len(prompts)))
    n = sum(len(g) for g in got.values())
    res = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "requests": len(prompts), "identical": same,
           "new_tokens": n, "width": width, "shared_prefix": len(prefix),
           "one_at_a_time_tokens_per_s": round(n / (t1 - t0), 1), "batched_tokens_per_s": round(n / (t2 - t1), 1),
           "load_1min": round(os.getloadavg()[0], 2)}
    log(f"check: {res}")
    if same != len(prompts):
        raise SystemExit(f"batched answers differ from the engine's greedy on {len(prompts) - same} requests")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="data folder (outside the repo)")
    ap.add_argument("--manifest", type=Path, help="also write the manifest here (e.g. the repo's copy)")
    ap.add_argument("--manifest-only", action="store_true", help="rewrite the manifest from the units on disk")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--new", type=int, default=320, help="new tokens per chat answer at most (EOS stops earlier)")
    ap.add_argument("--code-new", type=int, default=256, help="new tokens per code continuation at most")
    ap.add_argument("--ask", type=int, default=12000, help="user requests to sample from the model")
    ap.add_argument("--ask-new", type=int, default=64, help="tokens per sampled user request at most")
    ap.add_argument("--ask-shard", type=int, default=256)
    ap.add_argument("--chat-shard", type=int, default=128)
    ap.add_argument("--code-shard", type=int, default=64)
    ap.add_argument("--templates", type=int, default=0, help="template requests to answer at most (0: all)")
    ap.add_argument("--code-windows", type=int, default=3000, help="standard-library windows to continue at most")
    ap.add_argument("--kernel", default="int8", choices=["int8"], help="the batch-invariant kernel (exactness)")
    ap.add_argument("--width", type=int, default=8, help="sequences a step (speed only: results do not depend on it)")
    ap.add_argument("--check", type=int, default=6, help="requests checked batched vs one-at-a-time at each start")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stop-after", type=float, default=0.0, help="stop after this many hours (0: run to the end)")
    a = ap.parse_args()
    a.out = a.out.resolve()
    log = lambda s: print(time.strftime("%H:%M:%S ") + s, flush=True)  # noqa: E731
    if a.manifest_only:
        m = write_manifest(a.out, a.manifest, manifest_command(a))
        log(f"manifest: {m['units_done']}/{m['units_planned']} units, {m['answer_tokens']} answer tokens")
        return
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    from decoding.fast import cpu_gemm
    from decoding.models import load
    from distill_batch import Batcher
    settings = {k: getattr(a, k) for k in SETTINGS}
    for d in ("records", "text"):
        (a.out / d).mkdir(parents=True, exist_ok=True)
    state_path = a.out / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    if state.get("settings") not in (None, settings):
        raise SystemExit(f"{a.out} was made with other settings ({state['settings']}); use another --out")
    held = dr.Heldout()
    templates = dr.template_requests(a.seed, held)[:a.templates or None]
    code = dr.code_windows(a.code_windows, a.seed, heldout=held)
    leaked = [t for t in templates + [w for _, w in code] if held.why(t)]
    if leaked:
        raise SystemExit(f"held-out overlap in the requests: {leaked[:3]}")
    plan = units(len(templates), len(code), a)
    digest = hashlib.sha256(json.dumps([templates, code]).encode()).hexdigest()
    if state.get("requests_sha256") not in (None, digest):
        raise SystemExit(f"the request builder changed since {a.out} was started (its template and code requests "
                         "differ): a resume would mix two plans; use another --out")
    state["requests_sha256"] = digest
    model, tok = load(None, kernel=a.kernel, threads=a.threads)
    kernel = cpu_gemm.kernel_config(model)
    if not kernel or kernel["kernel"] != "int8":
        raise SystemExit(f"the int8 kernel is not running here ({kernel}): the batched answers would not be exact")
    state.update(settings=settings, kernel=kernel, machine=machine(), torch=torch.__version__,
                 transformers=transformers.__version__, plan=[u.name for u in plan],
                 command=("nohup nice -n 19 env OMP_NUM_THREADS=1 python " + shlex.join(sys.argv)
                          + f" >> {a.out}/log.txt 2>&1 &"))
    state.setdefault("started", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    prefix = tok(dr.ask_prefix(SYSTEM, ""))["input_ids"]  # the chat template's system turn: computed once
    if a.check:  # at every start: the code that makes the next units is checked, not only the first start's
        state["check"] = check(model, tok, templates[:a.check], 96, min(a.width, a.check), prefix, log)
        state["checks"] = state.get("checks", [])[-9:] + [state["check"]]
    state["_mark"] = time.time()
    write_atomic(state_path, json.dumps(state, indent=1))
    run = Run(a, tok, plan, templates, code, held, log)
    log(f"{len(plan)} units planned, {len(run.pending)} to do ({len(templates)} template requests, {len(code)} "
        f"code windows, {a.ask} user requests to sample); width {a.width}, kernel {kernel}")
    batcher = Batcher(model, a.width, prefix=prefix)
    deadline = time.time() + a.stop_after * 3600 if a.stop_after else None
    batcher.run(run.next_job, run.done, deadline=deadline)
    if a.manifest:
        write_manifest(a.out, a.manifest, manifest_command(a))
    log("done" if not run.pending and not run.open else "stopped")


if __name__ == "__main__":
    main()
