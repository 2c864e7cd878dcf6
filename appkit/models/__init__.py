"""Models: the default model's fetch, the loaded-model cache, shipped drafts and the model card."""
