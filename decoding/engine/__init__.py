"""The engine: the one loop every method shares (runner), the model forward with its masks and KV
bookkeeping (core, masks), the drafter contract (drafter), verification and sampling (verify, sampling),
and step-latency timing (timing). Nothing here knows a method: methods/ plugs into it through the
Drafter contract.
"""
