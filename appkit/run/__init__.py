"""One event's path from the page to the engine: settings and their checks, the method fields read from the
specs, what a run needs prepared (models, resources, presets, threads), the Run tab's handlers and streaming."""
