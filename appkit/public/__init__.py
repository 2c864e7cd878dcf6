"""Public mode: limits on every number, the model's fair turns between sessions, downloads on disk."""
