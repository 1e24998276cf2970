"""A real daemon for the service tests: `precision-doctor serve` in its own process on a free loopback
port, real client processes, and models whose jobs take a known while."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import planted

CLI = [sys.executable, "-m", "precision_doctor"]
# how long a step may take before the test calls it hung: far beyond a loaded machine's slowest (a job of seconds
# took minutes with two test suites and other work on 2 cores), so that no test depends on the machine's load
LIVENESS_S = 600.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """`precision-doctor serve` on 127.0.0.1:<free port> with `state_dir`; stderr goes to `log`; `preexec_fn` runs in the
    daemon's process before it starts (a resource limit its workers inherit)."""

    def __init__(self, state_dir: Path, *args: str, workers: int = 1, env: dict | None = None, preexec_fn=None):
        self.state_dir, self.args, self.workers, self.preexec_fn = state_dir, list(args), workers, preexec_fn
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state_dir.parent / f"{state_dir.name}-daemon.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0, headers: dict | None = None) -> Daemon:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [*CLI, "serve", "--port", str(self.port), "--state-dir", str(self.state_dir),
                 "--workers", str(self.workers), *self.args],
                stdout=log, stderr=subprocess.STDOUT, env=self.env, preexec_fn=self.preexec_fn,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).json()["workers"] == self.workers:
                    return self
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"daemon did not come up in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the daemon alone (its workers are in their own sessions)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def cli(self, *args: str, timeout: float = LIVENESS_S, token: str | None = None) -> subprocess.CompletedProcess[str]:
        """A client command as its own process against this daemon (`timeout`: a bound on a hang, not on speed)."""
        env = {**self.env, "PRECISION_DOCTOR_SERVER": self.url}
        env.pop("PRECISION_DOCTOR_TOKEN", None)
        if token:
            env["PRECISION_DOCTOR_TOKEN"] = token
        return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)

    def job(self, job_id: str, **kw) -> dict:
        return httpx.get(f"{self.url}/jobs/{job_id}", timeout=10, **kw).json()

    def wait_for(self, job_id: str, cond, timeout: float = LIVENESS_S, what: str = "condition",
                 after_end: bool = False) -> dict:
        """The job once `cond(job)` holds; an AssertionError at `timeout`, or at once where the job ended without it
        (`after_end`: what is waited for comes after the job's end, from the daemon: wait on)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if cond(job):
                return job
            if not after_end and job.get("state") in ("done", "failed", "cancelled"):
                break
            time.sleep(0.1)
        raise AssertionError(f"job {job_id}: no {what} within {timeout} s; last: {json.dumps(job)[:2000]}")

    def worker_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-f", f"precision_doctor.service.workers --state-dir {self.state_dir}"],
                             capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]


def planted_job_files(root: Path, name: str = "three_defects", n: int = 3) -> tuple[Path, list[Path], dict]:
    """A planted case's model and sample files under `root`, and the tolerance settings for it."""
    case = planted.CASES[name]()
    root.mkdir(parents=True, exist_ok=True)
    model = root / f"{name}.onnx"
    onnx.save(case.model, str(model))
    files = []
    for i, s in enumerate(case.samples(n, seed=0)):
        files.append(root / f"{name}_{i}.npz")
        np.savez(files[-1], **s)
    return model, files, {"tolerance": {"atol": case.atol, "rtol": case.rtol}}


def slow_model(path: Path, blocks: int = 8, iterations: int = 1500, width: int = 256, batch: int = 32) -> tuple[Path, dict]:
    """A model whose evaluations are slow and whose capture is cheap, so that a job spends seconds in
    its search: a chain of small elementwise blocks with one planted defect (a Mul by 1e5, undone by the
    next Mul: the minimal FP32 set is that Mul), plus a Loop of `iterations` MatMul+Tanh steps beside
    it. The Loop is control flow: one FP32 unit, never a candidate, one captured tensor, but it runs in
    every evaluation. Returns the model path and settings (`linear`: an evaluation per block or so)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(1e5), "up"),
             numpy_helper.from_array(np.float32(1e-5), "down"), numpy_helper.from_array(np.float32(1.5), "gain"),
             numpy_helper.from_array(np.array(iterations, dtype=np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "go")]
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "w"], ["mm"], name="body_mm"),
         helper.make_node("Tanh", ["mm"], ["h_out"], name="body_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [batch, width])],
    )
    nodes = [helper.make_node("Loop", ["trips", "go", "x"], ["looped"], name="heavy_loop", body=body)]
    h = "x"
    for i in range(blocks):
        nodes.append(helper.make_node("Tanh", [h], [f"t{i}"], name=f"b{i}_tanh"))
        nodes.append(helper.make_node("Mul", [f"t{i}", "gain"], [f"m{i}"], name=f"b{i}_gain"))
        h = f"m{i}"
        if i == blocks // 2:
            nodes.append(helper.make_node("Mul", [h, "up"], ["up_out"], name="scale_up"))
            nodes.append(helper.make_node("Mul", ["up_out", "down"], ["down_out"], name="scale_down"))
            h = "down_out"
    nodes.append(helper.make_node("Add", [h, "looped"], ["y"], name="join"))
    graph = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", planted.OPSET)])
    model.ir_version = planted.IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path, {"inputs": {"samples": 2, "seed": 0}, "tolerance": {"atol": 1e-2, "rtol": 1e-2},
                  "search": {"strategy": "linear"}}


def assert_resumed_once(run_dir: Path, before: list[str]) -> None:
    """The run directory of a job cut off (its checkpoint then held `before`) and resumed: the checkpoint
    kept those lines as they were (the attempt continued, it did not start over) and the complete report
    counts exactly the checkpoint's evaluations, none repeated; its artifacts are whole."""
    assert before, "the job was cut off before its first evaluation"
    final = (run_dir / "search.jsonl").read_text().splitlines()
    assert final[: len(before) - 1] == before[:-1]  # (the last line may have been cut short by the kill)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "complete" and report["passed"] is True
    lines = [json.loads(x) for x in final if x.strip()]
    sets = [tuple(sorted(x["fallback"])) for x in lines]
    assert len(sets) == len(set(sets)) == report["search"]["evaluations"]
    onnx.load(str(run_dir / "fixed.onnx"))
    assert (run_dir / "report.html").stat().st_size > 1000
