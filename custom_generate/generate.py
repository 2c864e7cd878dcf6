"""transformers' custom_generate entry (a `custom_generate/generate.py` in a repository):

    model.generate(**inputs, custom_generate="path/to/DecodeScope", trust_remote_code=True,
                   method="lookahead", window=5, ngram=4, guesses=5)

transformers calls `generate(model, **every_generate_argument)` here; we hand the same call back to
`model.generate` with DecodeScope's decoding loop as the callable, so transformers still prepares the inputs
and generation config (decoding/hf_generate.py). transformers' own names work as in plain generate:
streamer=TextStreamer(tok), stop_strings=[...] with tokenizer=tok, assistant_model=draft (speculative),
prompt_lookup_num_tokens=K (prompt lookup); the rest that would change the output is refused by name.
Needs the `decoding` package importable (`pip install .` in the DecodeScope repository, or the repository on
sys.path).
"""
try:
    from decoding.hf_generate import generate_entry
except ImportError as e:  # the file runs from transformers' module cache, away from the repository
    raise ImportError("custom_generate needs DecodeScope's `decoding` package: run `pip install .` in the "
                      "DecodeScope repository (or put it on PYTHONPATH)") from e


def generate(model, inputs=None, generation_config=None, **kwargs):
    return generate_entry(model, inputs, generation_config, **kwargs)
