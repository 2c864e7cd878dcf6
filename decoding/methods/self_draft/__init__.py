"""The target drafts for itself: Medusa and EAGLE heads, and self-speculation (shallow layers + adapter)."""
