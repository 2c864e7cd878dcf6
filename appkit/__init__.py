"""The Gradio app's parts (app.py only wires them): the page (ui), the settings dataclass and its checks
(settings), the handlers (handlers: Run tab and what every model event shares; tabs: Race, Profile, Sweep,
Replay, tuner), one worker/stop mechanism (stream), the error policy (errors), per-device presets
(presets), analytic run costs (costs), race rows and reasons (race), the scaling sweep (sweep), limits and
public mode (limits), the model cache (model_cache), trace files (replay), status lines and tables (tables) and
the plain-words explanations (explain). Decoding, pictures and profiling live in decoding/, viz/, profiling/.
"""
