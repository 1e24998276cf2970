"""The diagnosis daemon: an HTTP API (FastAPI) over a SQLite job store, worker processes that run the
jobs, server-rendered pages, and a capture cache shared across jobs.

It speaks the core's public API only: `spec.RunSpec` (a job's settings, as JSON), `api.diagnose` (in
`engine`, the one module that runs the core), `control` (stop tokens, progress events) and
`pipeline.capture_cache` (the cache protocol). Nothing here imports typer or rich.
"""
