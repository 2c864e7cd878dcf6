"""Device defaults of the engine: dtype by model size on CUDA, SDPA kernels chosen on purpose."""
import torch

from decoding.engine.core import attention_backends
from decoding.models import FP32_BELOW, pick_dtype


def test_cuda_dtype_by_model_size_and_explicit_wins():
    assert pick_dtype(None, "cuda", 10_000_000) == torch.float32       # the embedded demo: exact in fp32
    assert pick_dtype("auto", "cuda:0", int(FP32_BELOW) - 1) == torch.float32
    assert pick_dtype(None, "cuda", 7_000_000_000) == torch.bfloat16   # a 7B model
    assert pick_dtype(None, "cuda") == torch.bfloat16                  # size unknown: the large default
    assert pick_dtype(None, "cpu", 7_000_000_000) == torch.float32
    assert pick_dtype("bf16", "cuda", 10_000_000) == torch.bfloat16    # explicit --dtype wins
    assert pick_dtype("fp32", "cuda", 7_000_000_000) == torch.float32


def test_cuda_attention_backends_exclude_cudnn():
    """The context the engine runs CUDA forwards in: no cuDNN attention (per-shape plan building),
    memory-efficient (takes the float tree mask) and math allowed; the global flags come back after."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with attention_backends(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with attention_backends(torch.device("cpu")):  # CPU kernels are left alone
        assert torch.backends.cuda.cudnn_sdp_enabled() == before
