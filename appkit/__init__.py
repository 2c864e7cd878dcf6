"""Helpers for the Gradio app (app.py): the page layout (ui), limits and public mode, the model cache,
streaming a run from a worker thread, the error policy, trace uploads, the race and sweep tables, the
lookahead scaling sweep and the plain-words explanations. app.py keeps the event handlers and the wiring;
the decoding, pictures and profiling themselves live in decoding/, viz/ and profiling/."""
