"""A small httpx client of the precision-doctor daemon (used by the `submit`, `resubmit`, `jobs`, `status`, `wait`
and `cancel` commands; usable from scripts). Jobs come back typed (`schema.JobView`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from precision_doctor.codec import BadValue
from precision_doctor.errors import UserError
from precision_doctor.service.schema import JobView

SERVER_ENV = "PRECISION_DOCTOR_SERVER"
TOKEN_ENV = "PRECISION_DOCTOR_TOKEN"
DEFAULT_SERVER = "http://127.0.0.1:8765"


class ClientError(UserError):
    """The daemon refused a request (`status` is the HTTP status; 0: it could not be reached)."""

    def __init__(self, message: str, status: int = 0, setting: str | None = None):
        super().__init__(message)
        self.status, self.setting = status, setting


class Client:
    """Talks to the daemon at `server` (default $PRECISION_DOCTOR_SERVER or the local one) with
    `token` (default $PRECISION_DOCTOR_TOKEN)."""

    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 60.0):
        self.server = (server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER).rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        try:
            resp = self.http.request(method, url, **kw)
        except httpx.TransportError as exc:
            raise ClientError(f"cannot reach the daemon at {self.server} ({type(exc).__name__}: {exc}); is "
                              "`precision-doctor serve` running? (--server URL or PRECISION_DOCTOR_SERVER)") from None
        if resp.status_code >= 400:
            self._raise_for(resp)
        return resp

    # -- calls ----------------------------------------------------------------------------------------
    def health(self) -> dict:
        return self._request("GET", "/healthz").json()

    def submit(self, settings: dict, model: Path | None = None, model_path: str | None = None,
               inputs: list[Path] | None = None, validate_inputs: list[Path] | None = None, name: str | None = None) -> JobView:
        """Queue a job (`settings`: the RunSpec's JSON sections): upload `model` and the sample files, or
        name `model_path` on the server."""
        if model is None:
            body = {"model": model_path, "settings": settings, "name": name}
            return self._job(self._request("POST", "/jobs", json=body).json())
        data = {"settings": json.dumps(settings), **({"name": name} if name else {})}
        if model_path is not None:
            data["model_path"] = model_path
        with ExitStack() as stack:
            files = [("model", (model.name, stack.enter_context(open(model, "rb")), "application/octet-stream"))]
            for field, paths in (("inputs", inputs or []), ("validate_inputs", validate_inputs or [])):
                for p in paths:
                    files.append((field, (Path(p).name, stack.enter_context(open(p, "rb")), "application/octet-stream")))
            try:
                return self._job(self._request("POST", "/jobs", data=data, files=files).json())
            except ClientError as exc:
                if exc.status == 0 and "WriteError" in str(exc):
                    raise ClientError(f"the daemon at {self.server} closed the connection during the upload (larger "
                                      "than its --max-upload-mb?)") from None
                raise

    def resubmit(self, job_id: str, settings: dict | None = None, name: str | None = None) -> tuple[JobView, bool]:
        """Queue a finished job again on the daemon's copies of its files, with `settings` (RunSpec JSON sections)
        changed: (the new job, whether it resumes the old one's search)."""
        body = {k: v for k, v in (("settings", settings), ("name", name)) if v}
        data = self._request("POST", f"/jobs/{job_id}/resubmit", json=body).json()
        if not isinstance(data, dict):
            raise ClientError(f"the daemon at {self.server} answered the resubmission with {type(data).__name__}")
        return self._job(data.get("job"), "job"), bool(data.get("continues"))

    def jobs(self, state: str | None = None, limit: int = 200) -> list[JobView]:
        params: dict[str, Any] = {"limit": limit, **({"state": state} if state else {})}
        return [self._job(j, f"jobs[{i}]") for i, j in enumerate(self._request("GET", "/jobs", params=params).json()["jobs"])]

    def job(self, job_id: str) -> JobView:
        return self._job(self._request("GET", f"/jobs/{job_id}").json())

    def report(self, job_id: str) -> dict | None:
        """The job's report.json as sent (`results.report.Report.from_json` reads it), or None when it has
        none (yet)."""
        try:
            return self._request("GET", f"/jobs/{job_id}/artifacts/report.json").json()
        except ClientError as exc:
            if exc.status == 404:
                return None
            raise

    def cancel(self, job_id: str) -> JobView:
        return self._job(self._request("DELETE", f"/jobs/{job_id}").json())

    def events(self, job_id: str) -> Iterator[tuple[str, JobView]]:
        """(event, job) from the job's server-sent events ("job" on each change, then "end") until the
        stream ends."""
        try:
            with self.http.stream("GET", f"/jobs/{job_id}/events", timeout=httpx.Timeout(10.0, read=60.0)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    self._raise_for(resp)
                event, data = "message", []
                for line in resp.iter_lines():
                    if not line:
                        if data:
                            yield event, self._job(json.loads("\n".join(data)))
                        event, data = "message", []
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
        except httpx.TransportError as exc:
            raise ClientError(f"lost the daemon at {self.server} ({type(exc).__name__})") from None

    def _job(self, data: Any, path: str = "") -> JobView:
        """The daemon's JSON of a job; ClientError naming the key it cannot read."""
        try:
            return JobView.from_json(data, path)
        except BadValue as exc:
            raise ClientError(f"the daemon at {self.server} sent a job this client cannot read: {exc}") from None

    def _raise_for(self, resp: httpx.Response) -> None:
        try:
            body = resp.json()
            detail, setting = body.get("detail", resp.text), body.get("setting")
        except (ValueError, AttributeError):
            detail, setting = resp.text.strip()[:300], None
        raise ClientError(f"{resp.status_code}: {detail}", resp.status_code, setting)
