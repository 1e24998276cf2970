"""The diagnosis daemon: an HTTP API (FastAPI) over a SQLite job store, worker processes that run the
jobs, server-rendered pages, and a capture cache shared across jobs.

Only `engine` knows the core (`precision_doctor.diagnose` today, `precision_doctor.api` after the
restructure); nothing here imports typer.
"""
