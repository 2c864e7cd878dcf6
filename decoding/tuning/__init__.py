"""Choosing a run's shape for this machine: tune.py (the tuning driver and the thread-count tuner),
device_presets.py (the shapes chosen per (model, device), shipped or cached), threads.py (the default thread count)."""
