"""Text lookup: prompt lookup and reference lookup copy continuations from text already at hand."""
