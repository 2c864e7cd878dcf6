"""Run summaries: pictures of whole runs and of several runs side by side (costs, race, sweep, step profile,
communication per step, the lookahead-parallel window) and the offline HTML report that gathers them.
"""
