"""Small helpers for the Gradio app (app.py): limits and public mode, the model cache, streaming a run
from a worker thread, trace uploads, the lookahead scaling sweep and the plain-words explanations.
The decoding, pictures and profiling themselves live in decoding/, viz/ and profiling/."""
