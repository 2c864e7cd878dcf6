"""Jacobi-window methods: lookahead decoding (window + n-gram pool) and plain Jacobi decoding."""
