"""Per-step views: what one decoding step did (window, pool, tree, mask, trajectory, retrieval match, draft
cost, heads), the linked stepper that shows them in the page, and the caption that says them in words.
"""
