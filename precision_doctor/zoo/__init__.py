"""Real trained models from PyPI wheels: `registry` (the data), `fetch`, `synthetic` (rendered inputs)."""
