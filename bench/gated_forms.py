"""Issue 20's 60 s: the gated graph without If nodes, and captured as a CUDA graph.

The gated graph (`graph.native.gated_native_graph`) gives each candidate an If on its gate; on ORT CUDA a sample
costs about 14 ms on nudenet-320n, against 2.6 ms for the real mixed graph: the If nodes' launches. The "where"
form computes each candidate both ways in the main graph and picks each output with a Where on a scalar gate: no
control flow, twice the arithmetic, and a graph ORT can capture as a CUDA graph (`enable_cuda_graph`, I/O bound
on the GPU, the gates updated in place between sets).

    python3 bench/gated_forms.py --zoo zoo --fallback FILE --out $OUT     # on the GPU machine

For the all-FP16 set, --fallback's set and every other candidate, on --samples renders: milliseconds per sample of
each form, and how far each form's outputs are from the If form's and from the real mixed graph's (a session per
set, EXHAUSTIVE as deployed) in shares of the recipe's tolerance. Writes gated_forms.json under --out.
"""

from __future__ import annotations

import json
import time

import numpy as np
import onnxruntime as ort
from recipe_renders import parser, recipe_renders

from precision_doctor.backends.ort import CUDA, OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.native import gated_native_graph
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.tolerance import check_all


class CudaGraphRunner:
    """The where form captured as a CUDA graph: inputs, gates and outputs bound to GPU buffers."""

    def __init__(self, proto, outs: list[str], sample: dict, gates: dict, out_shapes: dict):
        so = ort.SessionOptions()
        so.log_severity_level = 4
        self.sess = ort.InferenceSession(proto.SerializeToString(), so, providers=[
            (CUDA, {"use_tf32": "0", "enable_cuda_graph": "1"})])
        self.io = self.sess.io_binding()
        self.vals = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v), "cuda", 0)
                     for k, v in {**sample, **gates}.items()}
        for k, v in self.vals.items():
            self.io.bind_ortvalue_input(k, v)
        self.outs = {o: ort.OrtValue.ortvalue_from_shape_and_type(list(out_shapes[o]), np.float32, "cuda", 0)
                     for o in outs}
        for o, v in self.outs.items():
            self.io.bind_ortvalue_output(o, v)

    def run(self, feeds: dict) -> list[np.ndarray]:
        for k, v in feeds.items():
            self.vals[k].update_inplace(np.ascontiguousarray(v))
        self.sess.run_with_iobinding(self.io)
        return [v.numpy() for v in self.outs.values()]


def main() -> None:
    args = parser(__doc__, "plumbing only (the CPU provider, no CUDA graph)").parse_args()
    spec, model, samples, fallback = recipe_renders(args)
    ort.set_default_logger_severity(4)
    outs, fmt = list(model.outputs), get_format(spec.precision)
    refs = [ReferenceRunner(model).run(s) for s in samples]
    providers = ["CPUExecutionProvider"] if args.cpu else [(CUDA, {"use_tf32": "0"})]
    forms = {f: gated_native_graph(model, fmt, f) for f in ("if", "where")}
    sessions = {f: make_session(with_outputs(g.proto, outs, model.tensor_types), providers) for f, g in forms.items()}
    cands = forms["if"].candidates
    sets = {"all-fp16": [], "answer": sorted(fallback), "every-other": cands[::2]}
    real = OrtBackend(model, spec.precision, providers=providers + ["CPUExecutionProvider"] * (not args.cpu))
    graph_runner, rows = None, []

    def timed(fn) -> tuple[list[dict], float]:
        fn(samples[0])  # warm: the first run times cuDNN's algorithms (and captures a CUDA graph)
        t = time.perf_counter()
        got = [dict(zip(outs, fn(s))) for s in samples]
        return got, 1e3 * (time.perf_counter() - t) / len(samples)

    def shares(got: list[dict]) -> np.ndarray:
        return np.array([max(c.tol_used for c in check_all(g, r, spec.tolerance).values()) for g, r in zip(got, refs)])

    for label, fb in sets.items():
        results = {}
        for f, g in forms.items():
            gates = g.feeds(fb)
            results[f] = timed(lambda s, f=f, gates=gates: sessions[f].run(outs, {**s, **gates}))
        runner = real.prepare(frozenset(fb))
        results["real"] = timed(lambda s, runner=runner: [runner.run(s, outs)[o] for o in outs])
        if not args.cpu:
            gates = forms["where"].feeds(fb)
            try:
                if graph_runner is None:
                    shapes = {o: a.shape for o, a in results["where"][0][0].items()}
                    graph_runner = CudaGraphRunner(with_outputs(forms["where"].proto, outs, model.tensor_types),
                                                   outs, samples[0], gates, shapes)
                results["where+cudagraph"] = timed(lambda s, gates=gates, g=graph_runner: g.run({**s, **gates}))
            except Exception as e:  # noqa: BLE001 - a measurement: say why it could not run
                print(f"{label}: the CUDA graph could not run: {str(e).splitlines()[0][:300]}", flush=True)
                if graph_runner is None and label == "all-fp16":  # ORT's verbose log names the nodes placed on the CPU
                    so = ort.SessionOptions()
                    so.log_severity_level = 0
                    ort.InferenceSession(with_outputs(forms["where"].proto, outs, model.tensor_types).SerializeToString(),
                                         so, providers=providers)
        base = shares(results["real"][0])
        ifs = shares(results["if"][0])
        for f, (got, ms) in results.items():
            s = shares(got)
            row = {"set": label, "size": len(fb), "form": f, "ms_per_sample": ms, "worst_share": float(s.max()),
                   "share_diff_vs_real": float(np.abs(s - base).max()), "share_diff_vs_if": float(np.abs(s - ifs).max()),
                   "failures": int((s > 1).sum())}
            rows.append(row)
            print(json.dumps(row), flush=True)
    (args.out / "gated_forms.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
