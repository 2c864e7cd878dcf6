"""DecodeScope's decoding engine: greedy, lookahead, prompt lookup and speculative decoding on one core.

Greedy output equals HF greedy in fp32 (by construction, tests/test_exactness.py); in bf16/fp16 it is
measured (decoding.exactness, Trace.agreement). Sampling keeps the target's distribution."""
from .api import METHODS, make_drafter, make_sampling, run
from .build import build
from .methods.registry import SPECS
from .methods.spec import MethodSpec, knob
from .models import ModelError, load
from .engine.runner import generate
from .engine.sampling import Sampling
from .trace import SCHEMA, Step, Trace

__all__ = ["METHODS", "MethodSpec", "ModelError", "SCHEMA", "SPECS", "Sampling", "Step", "Trace", "build", "generate",
           "knob", "load", "make_drafter", "make_sampling", "run"]
