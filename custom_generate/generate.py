"""transformers' custom_generate entry (a `custom_generate/generate.py` in a repository):

    model.generate(**inputs, custom_generate="path/to/DecodeScope", trust_remote_code=True,
                   method="lookahead", window=5, ngram=4, guesses=5)

transformers calls `generate(model, **every_generate_argument)` here; we hand the same call back to
`model.generate` with DecodeScope's decoding loop as the callable, so transformers still prepares the inputs
and generation config (decoding/hf_generate.py). Needs the `decoding` package importable (`pip install .`
in the DecodeScope repository, or the repository on sys.path).
"""
try:
    from decoding.hf_generate import decodescope_generate
except ImportError as e:  # the file runs from transformers' module cache, away from the repository
    raise ImportError("custom_generate needs DecodeScope's `decoding` package: run `pip install .` in the "
                      "DecodeScope repository (or put it on PYTHONPATH)") from e


def generate(model, inputs=None, generation_config=None, **kwargs):
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return model.generate(inputs, generation_config=generation_config, custom_generate=decodescope_generate, **kwargs)
