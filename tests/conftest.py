"""Shared tiny models. Random weights are fine for exactness: the engine must match HF greedy whatever
the model; random tiny models also loop, which makes multi-token accepts happen."""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers/huggingface_hub read it at import
# The suite never downloads the default model and never sees this user's cache (a cached SmolLM2 would make
# "the default model" machine-dependent): tests that want it fetch into their own folder explicitly.
os.environ["DECODESCOPE_NO_FETCH"] = "1"
os.environ["DECODESCOPE_CACHE"] = tempfile.mkdtemp(prefix="decodescope-test-cache-")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config,  # noqa: E402
                          Qwen2ForCausalLM)
from installed_wheel import venv, wheel  # noqa: E402,F401 - the installed package, one a session

torch.set_num_threads(1)  # 2 cores: more threads on tiny models only add contention


def tiny(arch: str, vocab: int = 64, seed: int = 0, hidden: int = 32, layers: int = 2):
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if arch == "llama":
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **common)
        cls = LlamaForCausalLM
    elif arch == "qwen2":
        cfg = Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **common)
        cls = Qwen2ForCausalLM
    elif arch == "gpt2":
        cfg = GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=512, **common)
        cls = GPT2LMHeadModel
    else:
        raise ValueError(arch)
    cfg._attn_implementation = "sdpa"
    return cls(cfg).eval()


def pytest_sessionstart(session):
    """Under xdist (the README's `-n 2`), build the CPU kernel once in the controller before the workers start:
    otherwise a fresh machine's first build happens in one worker while the other waits on its lock, and a
    wait past DECODESCOPE_KERNEL_WAIT_S leaves that worker without the kernel for the whole session."""
    if getattr(session.config.option, "numprocesses", None) and not hasattr(session.config, "workerinput"):
        import subprocess
        import sys
        subprocess.run([sys.executable, "-m", "decoding.fast.cpu_gemm"], timeout=1800, check=False)


@pytest.fixture(scope="module")
def no_cpu_kernel():
    """The CPU GEMM kernel's build is not what a test of decoding methods tests (and waits while another
    process builds it): a module that asks for this (pytestmark = usefixtures) runs without it."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DECODESCOPE_CPU_GEMM", "0")
    yield
    mp.undo()


@pytest.fixture(scope="session")
def tiny_models():
    return {arch: tiny(arch) for arch in ("llama", "qwen2", "gpt2")}


def hf_greedy(model, prompt_ids: list[int], n: int, eos=None) -> list[int]:
    """The reference: transformers' own greedy decoding."""
    ids = torch.tensor([prompt_ids])
    kw = dict(do_sample=False, max_new_tokens=n, pad_token_id=0)
    kw.update(dict(eos_token_id=eos) if eos is not None else dict(min_new_tokens=n, eos_token_id=None))
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    return out[0, len(prompt_ids):].tolist()


WORDS = ("def return if else for in while import from class self print range len x y z i j k n "
         "= == + - * / ( ) : , . [ ] 0 1 2 3 4 5 6 7 8 9 a b c the of and to is not None True False").split()


def save_tiny_dir(path, arch: str = "llama", seed: int = 0) -> str:
    """A tiny model plus a word-level tokenizer saved as a real HF directory (CLI and loader tests)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "</s>"] + WORDS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="</s>")
    model = tiny(arch, vocab=64, seed=seed)
    model.config.eos_token_id = model.generation_config.eos_token_id = None
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return save_tiny_dir(tmp_path_factory.mktemp("tiny_llama"))


def other_tokenizer(path) -> None:
    """Overwrite a saved model directory's tokenizer with one of the same size but other ids (an
    incompatible draft for speculative decoding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "</s>"] + WORDS[::-1])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="</s>").save_pretrained(path)
