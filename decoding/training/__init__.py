"""Training code for the drafters that learn: Medusa / EAGLE heads and the self-speculation adapter
(python -m decoding train-heads). Kept apart from the methods, which only load what this writes."""
