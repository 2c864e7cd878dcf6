"""Speculative decoding with a draft model: chain, token tree, dynamic tree and staged drafting."""
