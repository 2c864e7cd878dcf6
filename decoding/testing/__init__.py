"""Test devices, not runtime code: the virtual CUDA device (virtual_cuda.py) the CUDA path is checked on in CI
(tests/test_virtual_cuda.py, tests/test_every_method.py, bench/gpu_run.py's rehearsal)."""
