"""Backends: one protocol. `prepare(fallback)` gives a runner; `runner.run(feeds)` gives outputs."""
