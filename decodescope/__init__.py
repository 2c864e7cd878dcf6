"""The `decodescope` console command (pyproject [project.scripts]): one entry for the engine, the
profiler, the report and the app. The library itself is `decoding` (engine), `viz`, `profiling`, `appkit`."""
