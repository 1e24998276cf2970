"""Server-sent events: a job's state and progress as they change, until it ends."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from precision_doctor.service.schema import TERMINAL
from precision_doctor.service.store import Store, view

POLL_S = 0.2
KEEPALIVE_S = 15.0


def sse(event: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


async def job_events(store: Store, job_id: str, request: Request) -> AsyncIterator[str]:
    """`job` events (the job as GET /jobs/{id} shows it) whenever it changes, then one `end` event
    when it is done, failed or cancelled; comments keep idle connections open."""
    yield "retry: 1000\n\n"
    last, quiet_since = None, time.monotonic()
    while not await request.is_disconnected():
        seen = await run_in_threadpool(store.version, job_id)
        if seen is None:
            yield sse("end", {"id": job_id, "name": "", "state": "gone"})
            return
        if seen[0] != last:
            job = await run_in_threadpool(store.get, job_id)
            if job is None:
                continue
            last, quiet_since = job.version, time.monotonic()
            data = view(job, detail=False).to_json()
            yield sse("job", data, job.version)
            if job.state in TERMINAL:
                yield sse("end", data, job.version)
                return
        elif time.monotonic() - quiet_since > KEEPALIVE_S:
            quiet_since = time.monotonic()
            yield ": keepalive\n\n"
        await asyncio.sleep(POLL_S)
