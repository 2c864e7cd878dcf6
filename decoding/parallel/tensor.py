"""Tensor parallelism through transformers: `from_pretrained(..., tp_plan="auto")` under torchrun shards
every attention and MLP projection over the processes (the weights become DTensors; transformers' plan:
q/k/v/gate/up column-wise, o/down row-wise, the LM head column-wise with its output gathered). Each
process then holds its share of the heads, and every decoder layer ends in all-reduces.

What the engine keeps and what it switches off on a sharded model (recorded in the trace's
config["distributed"]["switched_off"], so a reader knows what ran):
  - custom 4D masks, position ids and the DynamicCache: kept. The mask is per head-independent and each
    process's cache holds its own heads, so a tree step runs unchanged (tests/test_distributed.py checks
    the tokens against single-process HF greedy).
  - the static cache (decoding/fast/static_cache.py): off. It keeps one fused store for all heads and
    replays captured graphs; neither knows about a head shard or the collectives inside a layer.
  - the CPU weight layouts ("column", "packed": decoding/fast/layout.py, cpu_gemm.py): off. They rewrite
    plain nn.Linear weights; DTensor parameters are left as transformers sharded them ("stock").
"""
from __future__ import annotations

from transformers import PretrainedConfig

TP_PLANS = ("auto",)
SWITCHED_OFF = {
    "static_cache": "the static cache keeps one fused store of all heads and replays captured graphs; it knows "
                    "neither the head shard of a process nor the collectives inside each layer",
    "weight_layout": "the column / packed CPU layouts rewrite plain nn.Linear weights; DTensor weights stay as "
                     "transformers sharded them (stock)",
}


def check_plan(tp_plan: str | None) -> None:
    if tp_plan is not None and tp_plan not in TP_PLANS:
        raise ValueError(f"--tp-plan must be one of {', '.join(TP_PLANS)} (transformers' own plan), got {tp_plan!r}")


def check_heads(config: PretrainedConfig, world: int) -> None:
    """Refuse, before any weight is read, a model whose heads do not split evenly over `world` processes:
    transformers would load it and then fail inside attention ("shape '[1, 7, -1, 64]' is invalid")."""
    name = getattr(config, "model_type", "this model")
    if not getattr(config, "base_model_tp_plan", None):
        raise ValueError(f"{name} has no tensor-parallel plan in transformers (config.base_model_tp_plan is "
                         "empty), so tp_plan=\"auto\" cannot shard it; run it in one process")
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    bad = [f"{what} {n}" for what, n in (("attention heads", heads), ("key/value heads", kv))
           if isinstance(n, int) and n % world]
    if bad:
        fits = [p for p in range(1, 65) if isinstance(heads, int) and isinstance(kv, int) and not heads % p
                and not kv % p]
        raise ValueError(f"tensor parallelism over {world} processes needs head counts divisible by {world}, but "
                         f"{name} has {' and '.join(bad)}; use --nproc-per-node "
                         f"{' or '.join(str(p) for p in fits)}, or lookahead parallelism (--lp), which keeps the "
                         "whole model in every process")


def is_sharded(model) -> bool:
    """True for a model transformers loaded with a tp_plan (its weights are DTensors on a device mesh)."""
    return getattr(model, "tp_info_", None) is not None


def prepare(config: PretrainedConfig, tp_plan: str, device: str) -> str:
    """Before any weight is loaded: the plan is known, the process group is up (torchrun's env), and the
    heads divide by its size. Returns this process's device (cuda:LOCAL_RANK on GPUs)."""
    from .group import ensure, local_device
    check_plan(tp_plan)
    device = local_device(device)
    _, world, _ = ensure(device)
    check_heads(config, world)
    return device


def tp_info(tp_plan: str) -> dict:
    """What the trace records about the sharding: plan, world size and backend."""
    from .group import ensure
    _, world, backend = ensure()
    return {"tp_plan": tp_plan, "world_size": world, "backend": backend}


def tp_kwargs(tp_plan: str) -> dict:
    """from_pretrained's keywords for the plan: transformers 5.x takes it in a DistributedConfig (the bare
    tp_plan= keyword warns that it goes away in 5.18); older releases only know the keyword."""
    try:
        from transformers.distributed import DistributedConfig
    except ImportError:
        return {"tp_plan": tp_plan}
    return {"distributed_config": DistributedConfig(tp_plan=tp_plan)}
