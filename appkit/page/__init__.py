"""The page: the layout (ui), the method controls generated from the specs, explanations, examples, hints,
the lesson, the fields auto presets fill, and the markdown/tables a run is shown in."""
