"""Measuring error: the tolerance checks, mark-all capture into the activation store, and the per-layer analysis."""
