"""The other tabs' handlers (Race, Profile, Sweep, Replay, the tuner and the model loader) and their numbers."""
