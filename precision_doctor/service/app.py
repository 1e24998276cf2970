"""The HTTP API and pages (routes only; the work is in jobs, store, workers, pages, events)."""

from __future__ import annotations

import logging
import traceback
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from precision_doctor import __version__
from precision_doctor.errors import one_line
from precision_doctor.service import pages
from precision_doctor.service.auth import COOKIE, Guard, csrf_value, session_value, token_ok
from precision_doctor.service.config import ServiceConfig, StateDir, limits
from precision_doctor.service.events import job_events
from precision_doctor.service.health import disk_use, out_of_space
from precision_doctor.service.jobs import create_job
from precision_doctor.service.resubmit import resubmit_job
from precision_doctor.service.schema import STATES
from precision_doctor.service.store import Job, Store, StoreBusy, StoreError, StoreFull, view
from precision_doctor.service.supervisor import Supervisor, WorkerLauncher
from precision_doctor.service.uploads import Refused, artifact, list_artifacts, read_resubmission, read_submission

log = logging.getLogger("precision_doctor.service")
API_BUSY_S = 3.0  # how long a request waits for the store's lock before it is answered 503
RETRY_AFTER_S = 5


def create_app(config: ServiceConfig, supervise: bool = True, launcher: WorkerLauncher | None = None) -> FastAPI:
    """The app for `config`; with `supervise` its lifespan runs the workers (through `launcher`, by default
    worker processes here). The routes are registered by topic: errors, health, jobs, a job's files, pages."""
    state = StateDir(config.state_dir)
    store = Store(state.db, busy_timeout_s=API_BUSY_S)
    svc = _Service(config, state, store, Supervisor(config, store, launcher), supervise)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if supervise:
            svc.supervisor.start()
        try:
            yield
        finally:
            if supervise:
                svc.supervisor.close()

    app = FastAPI(title="precision-doctor", version=__version__, lifespan=lifespan,
                  description="Diagnose why an ONNX model loses accuracy in FP16/BF16: submit jobs, follow them, "
                  "read their reports. Job settings are the RunSpec JSON sections (inputs, tolerance, search, capture, "
                  "backends).")
    app.add_middleware(Guard, token=config.token, max_bytes=config.max_upload_bytes)
    for register in (_error_handlers, _health_routes, _job_routes, _resubmit_route, _job_file_routes, _page_routes):
        register(app, svc)
    app.state.store, app.state.supervisor, app.state.config = store, svc.supervisor, config
    return app


@dataclass(frozen=True)
class _Service:
    """What the routes share: the daemon's settings, state directory, store and worker supervisor (`supervise`: the
    app's lifespan runs the workers)."""

    config: ServiceConfig
    state: StateDir
    store: Store
    supervisor: Supervisor
    supervise: bool

    def job(self, job_id: str) -> Job:
        """The job, or 404."""
        job = self.store.get(job_id)
        if job is None:
            raise Refused(404, f"no job '{job_id}'")
        return job

    def wake(self) -> None:
        """Tell the workers a job is waiting."""
        if self.supervise:
            self.supervisor.wake()


def _no_space(detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=507, headers={"retry-after": str(RETRY_AFTER_S * 12)})


def _error_handlers(app: FastAPI, svc: _Service) -> None:
    """Refusals, invalid requests, a busy or full store and crashes, each as a JSON answer of one line."""

    @app.exception_handler(Refused)
    async def refused(_: Request, exc: Refused) -> JSONResponse:
        body: dict[str, Any] = {"detail": exc.detail}
        if exc.setting:
            body["setting"] = exc.setting
        return JSONResponse(body, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "query")
        return JSONResponse({"detail": f"{where}: {first.get('msg', 'invalid request')}"}, status_code=422)

    @app.exception_handler(StoreBusy)
    async def busy(_: Request, exc: StoreBusy) -> JSONResponse:
        return JSONResponse({"detail": f"try again later: {exc}"}, status_code=503,
                            headers={"retry-after": str(RETRY_AFTER_S)})

    @app.exception_handler(StoreFull)
    async def store_full(_: Request, exc: StoreFull) -> JSONResponse:
        return _no_space(str(exc))

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        if out_of_space(exc):
            log.error("%s %s: %s", request.method, request.url.path, one_line(exc))
            return _no_space(f"the disk of the daemon's state directory is full ({svc.state.redact(one_line(exc))})")
        log.error("%s %s failed:\n%s", request.method, request.url.path, traceback.format_exc())
        return JSONResponse({"detail": "internal error (the daemon's log has the details)"}, status_code=500)


def _health_routes(app: FastAPI, svc: _Service) -> None:
    config, state, store, supervisor, supervise = svc.config, svc.state, svc.store, svc.supervisor, svc.supervise

    @app.get("/healthz", summary="Health: workers alive, jobs by state, the store and the disk",
             description="`ok` is false when something keeps jobs from being stored or run: `problems` says what "
             "(workers missing, the store locked by another process, the state directory's disk full). `storage`: "
             "what the state directory holds (jobs' files, the finished jobs' share, the capture cache, the store) "
             "and what the retention (`serve --keep-jobs`, `--keep-days`) removes at its next pass, as measured at "
             "its last pass (every minute; null before the first).")
    def healthz() -> dict:
        problems = supervisor.problems() if supervise else []
        store_problem = supervisor.store_problem if supervise else store.write_problem(0.1)
        try:
            counts: dict[str, int] | None = store.counts()
        except StoreError as exc:
            counts = None
            problems.append(str(exc))
        disk = disk_use(state.root)
        if disk is not None and (full := disk.problem()):
            problems.append(full)
        problems = list(dict.fromkeys(problems))  # the supervisor may have said it too
        return {"ok": not problems, "problems": problems, "version": __version__,
                "workers": supervisor.alive() if supervise else 0, "workers_wanted": config.workers if supervise else 0,
                "worker_deaths": supervisor.deaths, "jobs": counts,
                "store": {"writable": store_problem is None},
                "disk": disk.to_json() if disk is not None else None, "max_upload_mb": config.max_upload_mb,
                "limits": limits(config),
                "storage": supervisor.storage.to_json() if supervise and supervisor.storage is not None else None}


def _job_routes(app: FastAPI, svc: _Service) -> None:
    """Submitting, listing, reading and cancelling jobs."""

    @app.post("/jobs", status_code=201, summary="Submit a job",
              description="JSON `{model: server path, settings, name}`, or multipart with `model` (file) or `model_path`, "
              "`inputs` / `validate_inputs` (files, repeatable), `settings` (JSON), `name`. 201 with the job.")
    async def submit(request: Request) -> JSONResponse:
        submission = await read_submission(request)
        try:  # files, SQLite: off the loop
            job = await run_in_threadpool(create_job, submission, svc.config, svc.state, svc.store,
                                          str(request.base_url).rstrip("/"))
        except OSError as exc:
            if not out_of_space(exc):
                raise
            log.error("POST /jobs: %s", one_line(exc))
            raise Refused(507, f"the disk of the daemon's state directory is full ({svc.state.redact(one_line(exc))})"
                          ) from None
        svc.wake()
        return JSONResponse(view(job).to_json(), status_code=201, headers={"location": f"/jobs/{job.id}"})

    @app.get("/jobs", summary="Jobs, newest first")
    def list_jobs(state_: str | None = Query(None, alias="state"), limit: int = Query(200, ge=1, le=5000)) -> dict:
        if state_ is not None and state_ not in STATES:
            raise Refused(400, f"state must be one of {', '.join(STATES)}")
        return {"jobs": [view(j, detail=False).to_json() for j in svc.store.list(state_, limit)]}

    @app.get("/jobs/{job_id}", summary="One job: state, progress, result")
    def get(job_id: str) -> dict:
        return view(svc.job(job_id)).to_json()

    @app.delete("/jobs/{job_id}", summary="Cancel a job",
                description="A queued job is cancelled at once (200); a running one stops at its next safe point (202).")
    def cancel(job_id: str) -> JSONResponse:
        job = svc.job(job_id)
        if job.terminal:
            raise Refused(409, f"job {job_id} is already {job.state}")
        job = svc.store.request_cancel(job_id) or job
        return JSONResponse(view(job).to_json(), status_code=200 if job.terminal else 202)


def _resubmit_route(app: FastAPI, svc: _Service) -> None:
    @app.post("/jobs/{job_id}/resubmit", status_code=201, summary="Run a finished job again on its own files",
              description="JSON `{settings, name}`, both optional: `settings` the RunSpec JSON sections to change (not "
              "the files: the job's pinned copies are used). Where only the budget changes (or nothing) and the run "
              "can be continued, the new job resumes the old one's search from its checkpoint (`continues`: true). 201 "
              "with `{job, continues, resubmitted_from}`; 409 while the job runs, 410 when its files were removed.")
    async def resubmit(job_id: str, request: Request) -> JSONResponse:
        body = await read_resubmission(request)
        old = svc.job(job_id)
        try:
            job, continues = await run_in_threadpool(resubmit_job, old, body.get("settings"), body.get("name"),
                                                     svc.state, svc.store)
        except OSError as exc:
            if not out_of_space(exc):
                raise
            raise Refused(507, f"the disk of the state directory {svc.state.root} is full ({one_line(exc)})") from None
        svc.wake()
        return JSONResponse({"job": view(job).to_json(), "continues": continues, "resubmitted_from": job_id},
                            status_code=201, headers={"location": f"/jobs/{job.id}"})


def _job_file_routes(app: FastAPI, svc: _Service) -> None:
    """A job's report, its summary, its run directory's files and its progress events."""
    state = svc.state

    @app.get("/jobs/{job_id}/report", summary="The HTML report", response_class=HTMLResponse)
    def report(job_id: str) -> FileResponse:
        job = svc.job(job_id)
        path = state.run_dir(job_id) / "report.html"
        if job.files_removed:
            raise Refused(410, job.files_removed)
        if not path.is_file():
            raise Refused(404, f"job {job_id} has no report yet (it is {job.state})")
        return FileResponse(path, media_type="text/html")

    @app.get("/jobs/{job_id}/summary", summary="The report in brief: verdict, key figures, held-out result, next steps",
             description="What the job page shows of the report, in the report's words (404 while there is no report, 409 for "
                         "a report.json of another version).")
    def summary(job_id: str) -> dict:
        from precision_doctor.results.report import ReportError

        job = svc.job(job_id)
        try:
            digest = pages.report_summary(state.run_dir(job_id))
        except ReportError as exc:  # one this daemon does not read (an earlier version's): why, not the server's path
            raise Refused(409, f"job {job_id}'s report.json: {exc.reason}") from None
        if digest is None:
            raise Refused(404, f"job {job_id} has no report (it is {job.state})")
        return digest

    @app.get("/jobs/{job_id}/artifacts", summary="The files of a job's run directory, with their sizes")
    def artifacts(job_id: str) -> dict:
        svc.job(job_id)
        return {"artifacts": list_artifacts(state.run_dir(job_id))}

    @app.get("/jobs/{job_id}/artifacts/{name:path}", summary="One file of a job's run directory")
    def get_artifact(job_id: str, name: str) -> FileResponse:
        svc.job(job_id)
        path = artifact(state.run_dir(job_id), name)
        return FileResponse(path, headers={"x-content-type-options": "nosniff"})

    @app.get("/jobs/{job_id}/events", summary="Progress as server-sent events (`job` on each change, `end` at the end)")
    def events(job_id: str, request: Request) -> StreamingResponse:
        svc.job(job_id)
        return StreamingResponse(job_events(svc.store, job_id, request), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


def _page_routes(app: FastAPI, svc: _Service) -> None:
    """The pages a browser reads: the job list, a job, the login form."""
    config = svc.config

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=303)

    csrf = csrf_value(config.token) if config.token else ""  # what the pages send with a cancel (auth.py)

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    def ui_jobs() -> HTMLResponse:
        return HTMLResponse(pages.job_list_page(svc.store.list(limit=200), svc.store.counts(), csrf))

    @app.get("/ui/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def ui_job(job_id: str) -> HTMLResponse:
        from precision_doctor.results.report import ReportError

        job = svc.job(job_id)
        try:
            summary = pages.report_summary(svc.state.run_dir(job_id)) if job.terminal else None
        except ReportError:  # the page shows the job without the report's brief (its files stay listed)
            summary = None
        return HTMLResponse(pages.job_page(job, summary, csrf))

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_form() -> HTMLResponse:
        return HTMLResponse(pages.login_page())

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        if config.token is None:
            return RedirectResponse("/ui", status_code=303)
        form = await request.form()
        given = form.get("token")
        if not isinstance(given, str) or not token_ok(given, config.token):
            return HTMLResponse(pages.login_page(failed=True), status_code=401)
        resp = RedirectResponse("/ui", status_code=303)
        resp.set_cookie(COOKIE, session_value(config.token), httponly=True, samesite="strict")
        return resp
