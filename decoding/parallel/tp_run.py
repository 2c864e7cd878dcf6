"""A run of the engine's loop on a tensor-parallel model: every process runs runner.generate (the
collectives inside the layers keep them in step) and rank 0 profiles its steps for the collective time.
Apart from tensor.py, which models.load imports before any weight is read and so must not import the
engine (a circle: the engine imports models)."""
from __future__ import annotations

from .tensor import SWITCHED_OFF
def generate_tp(model, prompt_ids: list[int], drafter=None, *, step_context=None, **kw):
    """runner.generate on a sharded model: every process runs the same loop (the collectives inside the
    layers keep them in step); rank 0 profiles its steps for the collective time. Returns the Trace
    (every rank gets one; rank 0's carries the collective times)."""
    import contextlib

    from ..engine.runner import generate
    from .comm_time import SOURCE, StepComm, annotate, cuda_model
    from .group import is_main

    info = model.tp_info_
    with StepComm(enabled=is_main(), cuda=cuda_model(model)) as prof:
        def both(index: int, kind: str):
            stack = contextlib.ExitStack()
            stack.enter_context(prof.step_context(index, kind))
            if step_context is not None:
                stack.enter_context(step_context(index, kind))
            return stack
        tr = generate(model, prompt_ids, drafter, step_context=both, **{**kw, "static": False})
    annotate(tr, prof.per_step())
    tr.config["distributed"] = {"mode": "tensor", **info, "switched_off": dict(SWITCHED_OFF),
                                "comm_source": SOURCE if is_main() else None}
    return tr

