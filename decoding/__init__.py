"""DecodeScope's exact decoding engine: greedy, lookahead, prompt lookup (and speculative) on one core."""
from .api import METHODS, make_drafter, make_sampling, run
from .models import ModelError, load
from .runner import generate
from .sampling import Sampling
from .trace import SCHEMA, Step, Trace

__all__ = ["METHODS", "ModelError", "SCHEMA", "Sampling", "Step", "Trace", "generate", "load",
           "make_drafter", "make_sampling", "run"]
