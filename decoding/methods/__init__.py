"""The decoding methods, one drafter per file (lookahead, prompt_lookup, jacobi, speculative, medusa,
eagle) plus their parts (lookahead_pool, ngrams, reference_text, draft_tree, stage2, sampled_tree,
heads, eagle_layer, train_heads, head_loss). Each drafter plugs into the engine's Drafter contract;
decoding/api.py's METHODS registry names them. Arrows point from here to engine/ and fast/, never back.
"""
