"""One entry for a run past one process (api.run calls it): lookahead parallelism with lp=True, tensor
parallelism for a model loaded with tp_plan. Every rank runs it; rank 0's trace is the one to keep."""
from __future__ import annotations

from .lookahead_parallel import generate_lp
from .tensor import is_sharded
from .tp_run import generate_tp


def generate_distributed(model, prompt_ids: list[int], drafter, *, lp: bool = False, debug: bool = False,
                         sampling=None, static=None, max_new_tokens: int = 64, eos_token_id=None,
                         trace: bool = True, step_context=None, on_step=None):
    if lp:
        if is_sharded(model):
            raise ValueError("lookahead parallelism (--lp) keeps the whole model in every process: drop --tp-plan")
        if sampling is not None and not sampling.greedy:
            raise ValueError("lookahead parallelism (--lp) runs greedy decoding: drop --temperature")
        return generate_lp(model, prompt_ids, drafter, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                           trace=trace, debug=debug, step_context=step_context, on_step=on_step)
    kw = {} if sampling is None else {"sampling": sampling}
    return generate_tp(model, prompt_ids, drafter, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                       trace=trace, step_context=step_context, on_step=on_step, **kw)
