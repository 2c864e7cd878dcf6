"""The fast path: static KV caches and CUDA graphs per bucket (static_cache, graphs), the pool that keeps
caches between runs (cache_pool), the capture-safety checker (capture_check), non-blocking host-to-device uploads (uploads), and the CPU weight
layouts with the packed GEMM kernel (layout, cpu_gemm). The engine uses these; methods never need to.
"""
