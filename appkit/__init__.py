"""The Gradio app's parts (app.py only wires them), one room each:

- page/: the layout (ui, widgets), the method list and controls generated from the method specs
  (method_controls), explanations, examples, hints, the lesson, the fields auto presets fill, tables;
- run/: one event's path to the engine: settings and their checks (settings, method_fields: the specs as the
  page sees them), the prepared event that builds drafters through decoding.build (prepared, sources), the
  Run tab's handlers and what every model event shares (handlers), streaming and Stop (stream), presets,
  CPU threads, analytic costs;
- race/: the Race, Profile, Sweep and Replay tabs, the tuner and the model loader (tabs), race rows and
  reasons (race), the scaling sweep (sweep), trace files (replay);
- public/: public mode: limits on every number (limits), the model's fair turns (fair), downloads on disk;
- models/: the default model's fetch, the model cache, shipped drafts, the model card.

Top level: the scriptable API's signatures (api) and the error policy (errors). Decoding, pictures and
profiling live in decoding/, viz/, profiling/.
"""
