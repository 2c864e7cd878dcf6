"""Past one process: tensor parallelism through transformers (tensor.py) and the lookahead paper's
lookahead parallelism (lookahead_parallel.py), both on torch.distributed (gloo on CPU, NCCL on GPUs)."""
