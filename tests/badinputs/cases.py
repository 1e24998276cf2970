"""The catalogue of bad inputs. Fixture names in args (good.onnx, nan.npz, run_ok, zoo, ...) are
copied into the case directory, which is the CLI's working directory.

Expectations follow issue #11: bad input -> exit 2 with one line naming the flag/file/tensor;
otherwise the right verdict (0 pass, 1 fail); never a traceback; no pre-existing file changed.
`where` names the module that must handle the case (in the layout of the restructure).
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from badinputs.fixtures import GOOD_ARGS, GOOD_OUTPUT, RUN_OK_ARGS
from badinputs.harness import Case, Result, Step, case

V = (0, 1)  # a verdict: pass or fail, both fine
C = ["compare", "good.onnx", "--samples", "2"]
D = ["diagnose", "good.onnx", "--samples", "2", *GOOD_ARGS]
B = ["batch", "zoo"]
NOT_PICKLE = ("allow_pickle", "pickle")
INTERNAL = ("__pd", "pd_lowp", "_pdgate")

# Where the phase-2 fixes belong (modules as the restructure names them).
W_OPTS = "cli/options.py + spec.py: validate the flag before any work (RunSpec.validate), SpecError -> flag name"
W_USAGE = "cli/__init__.py: click usage errors as one line 'error: ...' (standalone_mode=False, exit 2)"
W_MARKUP = "cli/ (every err.print): print messages with markup=False (rich swallows '[...]')"
W_RUNDIR = "results/rundir.py: wrap OSError of mkdir/write into UserError naming --out"
W_FORCE = "results/rundir.py: --force refuses a dir holding the model/inputs, replaces only manifest-listed files"
W_REPORT = "results/report.py: Report.from_json raises UserError naming report.json and the key"
W_EMIT = "cli/emit.py: read report.json through Report.from_json; 'no passing set' only for a valid report"
W_LOCK = "results/rundir.py: run lock (diagnose, compare) naming the owner pid; stale locks taken over"
W_SETTINGS = "batch/orchestrate.py + pipeline/settings.py: record settings, re-run without flags continues or refuses"
W_HINT = "cli/batch.py: the interrupted-batch hint repeats every flag given"
W_CLEAN = "cli/diagnose.py + results/rundir.py: remove an --out this run created when it fails before writing"
W_BATCH_ERR = "batch/jobs.py: error rows say the model's node/op, never internal names"
W_RUN = ("measure/capture.py (+ backends/reference.py): an ORT run error -> UserError naming the model, node, op and "
         "the dynamic inputs generated as 1 (suggest --input-shapes)")


# -- setups and checks ----------------------------------------------------------------------------------


def files(**content: str | bytes) -> Callable[[Path], None]:
    """Setup: user files (keys are paths with '__' for '/')."""

    def setup(root: Path) -> None:
        for key, text in content.items():
            p = root / key.replace("__", "/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)

    return setup


def readonly(rel: str, *then: Callable[[Path], None]) -> Callable[[Path], None]:
    """Setup: a read-only directory `rel` (after the other setups)."""

    def setup(root: Path) -> None:
        for f in then:
            f(root)
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel).chmod(0o555)

    return setup


def moved(src: str, dst: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(root / src, root / dst)

    return setup


def both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        for s in setups:
            s(root)

    return setup


def report_json(transform: Callable[[str], str]) -> Callable[[Path], None]:
    """Setup: run_ok's report.json replaced by transform(its text)."""

    def setup(root: Path) -> None:
        p = root / "run_ok" / "report.json"
        p.write_text(transform(p.read_text()))

    return setup


def report_dict(transform: Callable[[dict], object]) -> Callable[[Path], None]:
    return report_json(lambda t: json.dumps(transform(json.loads(t))))


def _drop(key: str) -> Callable[[dict], dict]:
    return lambda d: {k: v for k, v in d.items() if k != key}


def _drop_in(part: str, key: str) -> Callable[[dict], dict]:
    """report.json without `key` of its `part` (`search`, `answer`, ...)."""
    return lambda d: {**d, part: _drop(key)(d[part])}


def no_dir(rel: str) -> Callable[[Path, list[Result]], list[str]]:
    """Check: a run that failed left no --out directory behind."""

    def check(root: Path, results: list[Result]) -> list[str]:
        p = root / rel
        if results[0].code == 2 and p.is_dir():
            return [f"the failed run left {rel}/ behind ({len(list(p.iterdir()))} entries)"]
        return []

    return check


def checkpoint_intact(rel: str) -> Callable[[Path, list[Result]], list[str]]:
    """Check after resumes: every line of the checkpoint is a record, and its steps are 1..n, each once
    (a torn line appended to, an evaluation repeated or lost all show here)."""

    def check(root: Path, results: list[Result]) -> list[str]:
        p = root / rel
        if not p.is_file():
            return [f"{rel} missing"]
        steps, bad = [], []
        for i, line in enumerate(p.read_text().splitlines()):
            try:
                steps.append(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                bad.append(i + 1)
        if bad:
            return [f"{rel}: line(s) {bad} are not records (a torn line was appended to)"]
        if len(steps) != len(set(steps)):
            return [f"{rel}: steps recorded twice: {sorted({s for s in steps if steps.count(s) > 1})[:5]}"]
        if sorted(steps) != list(range(1, len(steps) + 1)):
            return [f"{rel}: steps {sorted(set(range(1, max(steps) + 1)) - set(steps))[:5]} lost"]
        return []

    return check


def one_locked_out(root: Path, results: list[Result]) -> list[str]:
    """Check for two runs on one --out: the second is refused, naming the first's process."""
    first, second = results
    if second.code != 2:
        return [f"both runs went ahead on one --out (exits {first.code} and {second.code}); no run lock"]
    if str(first.pid) not in second.err:
        return [f"the refusal does not name the owner process {first.pid}: {second.err.strip()[:150]}"]
    return []


def report_parses(rel: str) -> Callable[[Path, list[Result]], list[str]]:
    def check(root: Path, results: list[Result]) -> list[str]:
        try:
            json.loads((root / rel).read_text())
        except (OSError, ValueError) as exc:
            return [f"{rel} unreadable afterwards: {exc}"]
        return []

    return check


def all_of(*checks: Callable[[Path, list[Result]], list[str]]) -> Callable[[Path, list[Result]], list[str]]:
    return lambda root, results: [f for c in checks for f in c(root, results)]


# -- the catalogue --------------------------------------------------------------------------------------


def model_cases() -> list[Case]:
    W_MODEL = "graph/model.py (load_model/from_proto)"
    out = [
        case("model/missing", "compare", "nope.onnx", names=["nope.onnx"]),
        case("model/directory", "compare", "modeldir.onnx", names=["modeldir.onnx"]),
        case("model/empty-file", "compare", "empty.onnx", names=["empty.onnx"], where=W_MODEL),
        case("model/text-file", "compare", "text.onnx", names=["text.onnx"], where=W_MODEL),
        case("model/truncated", "compare", "truncated.onnx", names=["truncated.onnx"], where=W_MODEL),
        case("model/npz-renamed-onnx", "compare", "zip.onnx", names=["zip.onnx"], where=W_MODEL),
        case("model/external-data-missing", "compare", "extdata.onnx", names=[("extdata.onnx.data", "external")],
             where=W_MODEL),
        case("model/custom-domain-op", "compare", "custom_op.onnx", names=["Frob", "custom_op.onnx"],
             absent=INTERNAL, where=W_MODEL),
        case("model/custom-domain-op-diagnose", "diagnose", "custom_op.onnx", "--samples", "2", names=["Frob"],
             absent=INTERNAL, where=W_MODEL),
        case("model/unsupported-opset", "compare", "opset99.onnx", names=["opset", "opset99.onnx"], where=W_MODEL),
        case("model/unsupported-ir-version", "compare", "ir99.onnx", names=["ir99.onnx"], where=W_MODEL),
        case("model/no-float-tensors", "compare", "nofloat.onnx", names=["nofloat.onnx"]),
        case("model/dynamic-dim-fails-at-run-time", "compare", "dyn_fails.onnx", names=["x", "--input-shapes"],
             absent=INTERNAL, where=W_RUN),
        case("model/dynamic-dim-fails-diagnose", "diagnose", "dyn_fails.onnx", "--samples", "2", names=["--input-shapes"],
             absent=INTERNAL, where=W_RUN),
        case("model/string-input", "compare", "string_in.onnx", names=["'s'", "--inputs"],
             where="data/inputs.py generate_samples"),
        case("model/no-graph-inputs", "compare", "noinputs.onnx", "--samples", "1", expect=(0, 1, 2)),
        case("model/float64", "compare", "f64.onnx", "--samples", "2", expect=V),
        case("model/unproduced-output", "compare", "ghost_out.onnx", names=["ghost", "ghost_out.onnx"], where=W_MODEL),
        case("model/untyped-output", "compare", "untyped_out.onnx", names=["'y'", "untyped_out.onnx"], where=W_MODEL),
        case("model/unnamed-nodes", "compare", "unnamed.onnx", "--samples", "2", expect=V),
        case("model/markup-in-missing-path", "compare", "m[red]x.onnx", names=["m[red]x.onnx"], where=W_MARKUP),
    ]
    return out


def input_cases() -> list[Case]:
    W_IN = "data/inputs.py (load_samples/validate_samples)"
    one = lambda id, f, names, expect=(2,), absent=(), model="good.onnx", where=W_IN: case(  # noqa: E731
        f"inputs/{id}", "compare", model, "--inputs", f, expect=expect, names=names, absent=absent, where=where)
    return [
        one("missing-file", "nope.npz", ["nope.npz"]),
        one("directory", "dir.npz", ["dir.npz"], absent=("not found",)),
        one("unknown-extension", "data.txt", ["data.txt"]),
        one("plain-npy", "array.npy", [], expect=V),  # one sample of a one-input model (issue 20: .npy samples)
        one("corrupt-npz", "corrupt.npz", ["corrupt.npz"], absent=NOT_PICKLE),
        one("text-as-npz", "text.npz", ["text.npz"], absent=NOT_PICKLE),
        one("empty-npz-file", "zero.npz", ["zero.npz"], absent=NOT_PICKLE),
        one("truncated-npz", "truncated.npz", ["truncated.npz"], absent=NOT_PICKLE),
        one("npy-renamed-npz", "npy_as.npz", ["npy_as.npz"], absent=("TypeError", "AttributeError")),
        one("h5-renamed-npz", "h5_as.npz", ["h5_as.npz"], absent=NOT_PICKLE),
        one("npz-renamed-json", "npz_as.json", ["npz_as.json"]),
        one("npz-renamed-h5", "npz_as.h5", ["npz_as.h5"]),
        one("object-array-npz", "object.npz", ["object.npz", "x"]),
        one("npz-no-arrays", "noarrays.npz", ["'x'", "noarrays.npz"]),
        one("wrong-name", "wrongname.npz", ["'y'", "wrongname.npz"]),
        one("extra-array", "extra.npz", ["'z'", "extra.npz"]),
        one("wrong-shape", "wrongshape.npz", ["'x'", "wrongshape.npz"]),
        one("wrong-rank", "wrongrank.npz", ["'x'", "wrongrank.npz"]),
        one("scalar", "scalar.npz", ["'x'", "scalar.npz"]),
        one("int-for-float", "int.npz", ["'x'", "int.npz"]),
        one("bool-for-float", "bool.npz", ["'x'", "bool.npz"]),
        one("complex-for-float", "complex.npz", ["'x'", "complex.npz"]),
        one("float64-cast", "f64.npz", [], expect=V),
        one("nan", "nan.npz", ["'x'", "--allow-nonfinite-inputs", "nan.npz"]),
        one("inf", "inf.npz", ["'x'", "--allow-nonfinite-inputs", "inf.npz"]),
        case("inputs/nan-allowed", "compare", "good.onnx", "--inputs", "nan.npz", "--allow-nonfinite-inputs",
             expect=V, where=W_IN),
        one("empty-tensor", "empty_tensor.npz", ["'x'", "empty_tensor.npz"], model="dyn.onnx"),
        one("json-ok", "ok.json", [], expect=V),
        one("json-truncated", "truncated.json", ["truncated.json"]),
        one("json-text", "text.json", ["text.json"]),
        one("json-list-of-numbers", "numbers.json", ["numbers.json"]),
        one("json-empty-list", "empty_list.json", ["empty_list.json"]),
        one("json-empty-object", "empty_obj.json", ["'x'", "empty_obj.json"]),
        one("json-plain-lists", "plain_lists.json", [], expect=V),
        one("json-plain-wrong-shape", "plain_wrongshape.json", ["'x'", "plain_wrongshape.json"]),
        one("h5-ok", "ok.h5", [], expect=V),
        one("h5-corrupt", "corrupt.h5", ["corrupt.h5"]),
        one("h5-group-not-dataset", "group_only.h5", ["'x'", "group_only.h5"]),
        one("h5-strings", "strings.h5", ["'x'", "strings.h5"]),
        case("inputs/markup-in-missing-path", "compare", "good.onnx", "--inputs", "data[1].npz",
             names=["data[1].npz"], where=W_MARKUP),
        case("inputs/validate-corrupt", *D, "--inputs", "ok0.npz", "--inputs", "ok1.npz", "--validate-inputs",
             "corrupt.npz", names=["corrupt.npz"], absent=NOT_PICKLE, where=W_IN),
        case("inputs/validate-wrong-shape", *D, "--inputs", "ok0.npz", "--validate-inputs", "wrongshape.npz",
             names=["'x'", "wrongshape.npz"], where=W_IN),
        case("inputs/mixed-shapes", "compare", "dyn.onnx", "--inputs", "ok0.npz", "--inputs", "ok.h5",
             "--input-shapes", "x:[2,16]", expect=V, where=W_IN),
    ]


def _flag_cases(cmd: str, base: list[str], flags: list[tuple[str, str, Sequence[int]]]) -> list[Case]:
    out = []
    for flag, value, expect in flags:
        names = [flag] if 2 in expect else []
        out.append(case(f"{cmd}/{flag.lstrip('-')}={value}", *base, flag, value, expect=expect, names=names,
                        where=W_OPTS))
    return out


def flag_cases() -> list[Case]:
    bad = (2,)
    common = [
        ("--atol", "nan", bad), ("--atol", "inf", bad), ("--atol", "-1", bad), ("--rtol", "nan", bad),
        ("--rtol", "-0.5", bad), ("--cosine-floor", "nan", bad), ("--cosine-floor", "1.5", bad),
        ("--samples", "0", bad), ("--samples", "-2", bad), ("--seed", "-1", bad), ("--group-mb", "0", bad),
        ("--group-mb", "-5", bad), ("--group-mb", "nan", bad), ("--precision", "fp8", bad),
        ("--check-error-stat", "p99", bad),
    ]
    out = _flag_cases("compare", C, [*common, ("--top", "-1", bad), ("--atol", "0", V)])
    out += _flag_cases("diagnose", D, [
        ("--atol", "nan", bad), ("--atol", "inf", bad), ("--group-mb", "0", bad), ("--samples", "0", bad),
        ("--max-evaluations", "0", bad), ("--max-evaluations", "-3", bad), ("--time-budget", "-1", bad),
        ("--time-budget", "0", bad), ("--time-budget", "nan", bad), ("--margin", "-0.1", bad),
        ("--margin", "1", bad), ("--margin", "nan", bad), ("--risk", "0", bad), ("--risk", "1", bad),
        ("--risk", "-0.01", bad), ("--risk", "nan", bad), ("--risk", "often", bad), ("--validation-split", "1.5", bad),
        ("--validation-split", "-0.5", bad), ("--validation-split", "nan", bad), ("--strategy", "fastest", bad),
        ("--backend", "cuda", bad), ("--cost", "time", bad), ("--confirm-backend", "emulate", bad),
        ("--confirm-backend", "gpu", bad), ("--cosine-floor", "-2", bad), ("--precision", "bf16", V),
    ])
    out += [
        case("diagnose/validation-split=1.5-with-files", *D, "--inputs", "ok0.npz", "--inputs", "ok1.npz",
             "--validation-split", "1.5", names=["--validation-split"], where=W_OPTS),
        case("diagnose/backend=ort-cuda-no-gpu", *D, "--backend", "ort-cuda", "--out", "r", names=[("--backend", "ort-cuda")],
             check=no_dir("r"), where=W_CLEAN),
        case("diagnose/backend=trt-missing", *D, "--backend", "trt", "--out", "r", names=[("--backend", "'trt'")],
             check=no_dir("r"), where=W_CLEAN),
    ]
    out += _flag_cases("batch", B, [
        ("--jobs", "-1", bad), ("--max-evaluations", "0", bad), ("--time-budget", "-1", bad), ("--atol", "nan", bad),
        ("--margin", "2", bad), ("--risk", "0.5", bad), ("--samples", "0", bad), ("--precision", "fp8", bad),
        ("--strategy", "fastest", bad),
    ])
    out += [
        case("emit/format=pdf", "emit", "run_ok", "--format", "pdf", names=["--format"]),
        case("usage/unknown-command", "frobnicate", names=["frobnicate"], where=W_USAGE),
        case("usage/compare-no-model", "compare", names=["MODEL"], where=W_USAGE),
        case("usage/unknown-option", *C, "--bogus", names=["--bogus"], where=W_USAGE),
        case("usage/samples-not-int", *C[:2], "--samples", "two", names=["--samples"], where=W_USAGE),
        case("usage/atol-not-number", *C, "--atol", "1e-2x", names=["--atol"], where=W_USAGE),
        case("usage/env-extra-arg", "env", "now", names=["now"], where=W_USAGE),
        case("usage/zoo-unknown-subcommand", "zoo", "get", names=["get"], where=W_USAGE),
        case("env/runs", "env", expect=(0,)),
    ]
    return out


def shape_range_cases() -> list[Case]:
    W_SH = "data/inputs.py parse_input_shapes + graph/model.py set_input_shapes"
    out = [
        case("shapes/contradicts-static-dim", *C, "--input-shapes", "x:[3,16]", names=["'x'", "[3,16]"], where=W_SH),
        case("shapes/wrong-rank", *C, "--input-shapes", "x:[2]", names=["x"], where=W_SH),
        case("shapes/fractional", *C, "--input-shapes", "x:[2.5,16]", names=["x"], where=W_SH),
        case("shapes/negative", *C, "--input-shapes", "x:[-1,16]", names=["x"], where=W_SH),
        case("shapes/unknown-input", *C, "--input-shapes", "q:[1,2]", names=["'q'"], where=W_SH),
        case("shapes/no-name", *C, "--input-shapes", "[2,16]", names=["[2,16]"], where=W_SH + "; " + W_MARKUP),
        case("shapes/not-a-list", *C, "--input-shapes", "x:[a,b]", names=["x:[a,b]"], where=W_SH + "; " + W_MARKUP),
        case("shapes/zero-dim", "compare", "dyn.onnx", "--input-shapes", "x:[0,16]", names=["x", "[0,16]"],
             where=W_SH + "; " + W_MARKUP),
        case("shapes/dynamic-ok", "compare", "dyn.onnx", "--input-shapes", "x:[4,16]", "--samples", "2", expect=V),
        case("shapes/dynamic-wrong-rank", "compare", "dyn.onnx", "--input-shapes", "x:[1,16,1]", names=["x"],
             where=W_SH),
        case("shapes/fixes-runtime-failure", "compare", "dyn_fails.onnx", "--input-shapes", "x:[1,16]",
             "--samples", "2", expect=V),
        case("shapes/contradicts-inputs-file", "compare", "dyn.onnx", "--inputs", "ok0.npz", "--input-shapes",
             "x:[3,16]", names=["'x'", "ok0.npz"], where=W_SH),
        case("range/low-above-high", *C, "--val-range", "x:[1,0]", names=["[1,0]"], where=W_MARKUP),
        case("range/one-value", *C, "--val-range", "x:[0]", names=["x:[0]"], where=W_MARKUP),
        case("range/nan", *C, "--val-range", "x:[nan,1]", names=["--val-range", "x:[nan,1]"], where=W_MARKUP),
        case("range/unknown-input", *C, "--val-range", "z:[0,1]", names=["'z'"]),
        case("range/markup-name", *C, "--val-range", "[bold]x:[0,1]", names=["[bold]x"], where=W_MARKUP),
        case("range/overflows-float32", *C, "--val-range", "x:[1e39,1e40]", names=["x", "--val-range"],
             where="data/inputs.py generate_samples: a range beyond the input's dtype names --val-range"),
    ]
    return out


def outdir_cases() -> list[Case]:
    out = [
        case("out/is-a-file", *C, "--out", "afile", names=["afile"], setup=files(afile="mine")),
        case("out/parent-is-a-file", *C, "--out", "afile/sub", names=["afile"], setup=files(afile="mine"),
             where=W_RUNDIR),
        case("out/read-only-parent", *C, "--out", "ro/run", names=["ro/run"], setup=readonly("ro"), where=W_RUNDIR),
        case("out/read-only-dir-diagnose", *D, "--out", "ro", "--force", names=["ro"],
             setup=readonly("ro", files(ro__notes="mine")), where=W_RUNDIR),
        case("out/not-empty", *C, "--out", "mine", names=["--force"], setup=files(mine__notes="mine")),
        case("out/not-empty-force-keeps-others", *D, "--out", "mine", "--force", expect=(0,),
             setup=files(mine__notes="mine")),
        case("out/markup-in-path", *C, "--out", "o[bold]ut", names=["o[bold]ut"], setup=files(**{"o[bold]ut": "x"}),
             where=W_MARKUP),
        case("out/cwd-with-user-inputs-json", "diagnose", "m/good.onnx", "--samples", "2", *GOOD_ARGS, "--out", ".",
             "--force", names=["inputs.json"], setup=both(moved("good.onnx", "m/good.onnx"),
                                                          files(**{"inputs.json": "[]  # mine\n"})),
             use=["good.onnx"], where=W_FORCE),
        case("out/model-dir-force", "diagnose", "m/good.onnx", "--samples", "2", *GOOD_ARGS, "--out", "m", "--force",
             names=["good.onnx"], setup=moved("good.onnx", "m/good.onnx"), use=["good.onnx"], where=W_FORCE),
        case("out/model-named-fixed-onnx", "diagnose", "w/fixed.onnx", "--samples", "2", *GOOD_ARGS, "--out", "w",
             "--force", names=["fixed.onnx"], setup=moved("good.onnx", "w/fixed.onnx"), use=["good.onnx"],
             where=W_FORCE),
        case("out/user-report-md-force", *D, "--out", "w", "--force", names=["report.md"],
             setup=files(**{"w__report.md": "# mine\n"}),
             where=W_FORCE),
        case("out/user-layers-csv-compare", *C, "--out", "w", "--force", names=["layers.csv"],
             setup=files(**{"w__layers.csv": "mine\n"}), where=W_FORCE),
        case("out/inputs-file-in-out-force", *D, "--inputs", "w/ok0.npz", "--inputs", "w/ok1.npz", "--out", "w",
             "--force", names=["ok0.npz"], setup=both(moved("ok0.npz", "w/ok0.npz"), moved("ok1.npz", "w/ok1.npz")),
             use=["ok0.npz", "ok1.npz"], where=W_FORCE),
        case("out/empty-string", *C, "--out", "", names=["--out"]),
        case("out/earlier-run-force", *D, "--out", "run", "--force", expect=(0,), prep=[Step([*D, "--out", "run"],
             frozenset({0}))], owned=["run/*"]),
    ]
    return out


def rundir_cases() -> list[Case]:
    def rep(id: str, setup, names, cmd: str = "report", where: str = W_REPORT, absent=(), expect=(2,)) -> Case:
        return case(f"{cmd}/{id}", cmd, "run_ok", names=names, setup=setup, absent=absent, where=where,
                    owned=["run_ok/report.*"] if cmd == "report" else (), expect=expect)

    out = []
    for cmd in ("report", "emit"):
        w = W_REPORT if cmd == "report" else W_EMIT + "; " + W_REPORT
        no_set = ("no passing set",) if cmd == "emit" else ()
        out += [
            rep("truncated-json", report_json(lambda t: t[: len(t) // 3]), ["report.json"], cmd, w, no_set),
            rep("empty-file", report_json(lambda t: ""), ["report.json"], cmd, w, no_set),
            rep("empty-object", report_json(lambda t: "{}"), ["report.json"], cmd, w, no_set),
            rep("list", report_json(lambda t: "[1, 2]"), ["report.json"], cmd, w, no_set),
            rep("null", report_json(lambda t: "null"), ["report.json"], cmd, w, no_set),
            rep("missing-fallback-nodes", report_dict(_drop_in("answer", "fallback_nodes")), ["answer.fallback_nodes"], cmd, w,
                no_set),
            # emit needs only the commands: printing them is a right answer too
            rep("missing-tolerance", report_dict(_drop_in("search", "tolerance")), ["search.tolerance"], cmd, w,
                expect=(2,) if cmd == "report" else (0, 2)),
            rep("binary", report_json(lambda t: "\x00\x01\xff garbage"), ["report.json"], cmd, w, no_set),
            rep("earlier-schema", report_dict(lambda d: {**d, "schema_version": 1}), ["report.json", "schema_version 1"],
                cmd, w, no_set),
            rep("wrong-type", report_dict(lambda d: {**d, "answer": {**d["answer"], "fallback_nodes": 7, "commands": [1]}}),
                ["report.json"], cmd, w, no_set),
            case(f"{cmd}/no-report-json", cmd, "run_ok", names=["report.json"],
                 setup=lambda root: (root / "run_ok" / "report.json").unlink()),
            case(f"{cmd}/missing-dir", cmd, "nope", names=["nope"]),
            case(f"{cmd}/a-file", cmd, "afile", names=["afile"], setup=files(afile="x"), where=w),
        ]
    out += [
        case("report/ok", "report", "run_ok", expect=(0,), owned=["run_ok/report.*"]),
        case("emit/ok-json", "emit", "run_ok", "--format", "json", expect=(0,)),
        case("emit/no-passing-set", "emit", "run_ok", names=["no passing set"], setup=report_dict(
            lambda d: {**d, "passed": False, "status": "no_solution",
                       "answer": {**d["answer"], "fallback_nodes": [], "commands": {}}})),
    ]
    return out


def batch_cases() -> list[Case]:
    def recipe(**r) -> Callable[[Path], None]:
        return files(**{"zoo__good.json": json.dumps({"inputs": {"samples": 2}, "max_evaluations": 20, **r})})

    W_RECIPE = "batch/recipes.py: validate recipe values (RunSpec.validate), errors name the recipe key"
    return [
        case("batch/zoo-missing", "batch", "nozoo", names=["nozoo"]),
        case("batch/zoo-empty", "batch", "emptyzoo", names=["emptyzoo"], setup=files(emptyzoo__readme="none")),
        case("batch/manifest-corrupt", "batch", "zoo.json", names=["zoo.json"], setup=files(**{"zoo.json": "{oops"})),
        case("batch/manifest-not-list", "batch", "zoo.json", names=["models"],
             setup=files(**{"zoo.json": '{"models": 3}'})),
        case("batch/manifest-wrong-suffix", "batch", "zoo.txt", names=["zoo.txt"], setup=files(**{"zoo.txt": "x"})),
        case("batch/only-unknown", *B, "--only", "nope", names=["nope"]),
        case("batch/out-is-a-file", *B, "--out", "afile", names=["afile"], setup=files(afile="x")),
        case("batch/out-not-empty", *B, "--out", "mine", names=["--force"], setup=files(mine__notes="x")),
        case("batch/out-is-the-zoo", *B, "--out", "zoo", "--force", names=["zoo"], where=W_FORCE),
        case("batch/recipe-unknown-key", *B, expect=(1, 2), names=["speed"], setup=recipe(speed=3)),
        case("batch/recipe-atol-nan", *B, expect=(1, 2), names=["atol"], setup=recipe(tolerance={"atol": "nan"}),
             where=W_RECIPE),
        case("batch/recipe-negative-budget", *B, expect=(1, 2), names=["max_evaluations"],
             setup=recipe(max_evaluations=-5), where=W_RECIPE),
        case("batch/recipe-missing-inputs-file", *B, expect=(1, 2), names=["gone.npz"],
             setup=recipe(inputs={"files": ["gone.npz"]})),
        case("batch/recipe-not-json", *B, expect=(1, 2), names=["good.json"], setup=files(**{"zoo__good.json": "{"})),
        case("batch/custom-op-model", *B, expect=(1,), names=["Frob"], absent=INTERNAL,
             setup=lambda root: shutil.copy(root / "custom_op.onnx", root / "zoo" / "frob.onnx"),
             use=["custom_op.onnx"], where=W_BATCH_ERR),
        case("batch/stale-lock-file", *B, "--out", "b", expect=(0,), setup=files(**{
            "b__.locks__batch.lock": "12345\n", "b__batch.json": '{"tool": "precision-doctor"}'}),
            owned=["b/*", "b/.locks/*"]),
    ]


def interrupt_cases() -> list[Case]:
    slow = ["diagnose", "slow.onnx", "--strategy", "linear", "--samples", "2", "--max-evaluations", "40", "--out", "r"]
    # Runs that a signal must catch while they work: long enough (up to ~80 evaluations of 4 samples) that a
    # harness starved of CPU on a loaded machine still catches them (the signal cuts them short).
    slow_long = ["diagnose", "slow.onnx", "--strategy", "linear", "--samples", "4", "--out", "r"]
    ok_args = RUN_OK_ARGS

    def tear(root: Path) -> None:
        """A finished run whose report is gone and whose last checkpoint line was cut by a kill."""
        run = root / "r"
        for name in ("report.json", "report.md", "report.html", "fixed.onnx"):
            (run / name).unlink(missing_ok=True)
        p = run / "search.jsonl"
        text = p.read_text()
        last = text.rstrip("\n").rfind("\n") + 1
        p.write_text(text[: last + (len(text) - last) // 2])

    torn_prep = [Step([*ok_args, "--out", "r"], frozenset({0}))]
    return [
        Case("resume/torn-checkpoint-line", [Step([*ok_args, "--out", "r", "--resume"], frozenset({0})),
                                             Step([*ok_args, "--out", "r", "--resume"], frozenset({0}))],
             use=["ok0.npz", "ok1.npz", "ok2.npz", "ok3.npz"], prep=torn_prep,
             after_prep=tear, owned=["r/*"], check=checkpoint_intact("r/search.jsonl"),
             where="search/oracle.py load_checkpoint: truncate a torn last line before appending"),
        Case("resume/finished-run-repeats-nothing", [Step([*ok_args, "--out", "r", "--resume"], frozenset({0}))],
             use=["ok0.npz", "ok1.npz", "ok2.npz", "ok3.npz"], prep=torn_prep, owned=["r/*"],
             check=checkpoint_intact("r/search.jsonl")),
        case("resume/no-out", *D, "--resume", names=["--resume", "--out"]),
        case("resume/missing-dir", *D, "--resume", "--out", "gone", names=["gone"]),
        Case("resume/other-settings", [Step([*D, "--out", "r", "--resume", "--atol", "0.5"], frozenset({2}),
                                            names=["--resume"])],
             prep=[Step([*D, "--out", "r"], frozenset({0}))], owned=["r/*"]),
        Case("interrupt/diagnose-ctrl-c", [Step(slow_long, frozenset({130}), names=["--resume"],
                                                signal_when="r/search.jsonl")],
             where="cli/diagnose.py print_outcome: an interrupted search says how to continue (--resume --out DIR) "
             "and lists only the artifacts written"),
        Case("interrupt/rerun-without-resume", [Step(slow_long, frozenset({2}), names=["--resume"])],
             prep=[Step(slow_long, frozenset({130}), signal_when="r/search.jsonl")], owned=["r/*"],
             where="results/rundir.py: a non-empty --out holding an interrupted run suggests --resume"),
        Case("interrupt/stale-lock-after-kill", [Step([*slow, "--resume"], frozenset({0, 1}))],
             prep=[Step(slow, frozenset({-9}), signal_when="r/search.jsonl", signal=signal.SIGKILL)], owned=["r/*"],
             check=checkpoint_intact("r/search.jsonl"), where=W_LOCK),
        Case("interrupt/batch-hint-keeps-flags",
             [Step(["batch", "slowzoo", "--out", "b", "--strategy", "linear", "--atol", "1e-6", "--samples", "4"],
                   frozenset({130}), names=["--strategy linear", "--atol", "--samples 4"],
                   signal_when="b/slow/search.jsonl")],
             setup=moved("slow.onnx", "slowzoo/slow.onnx"), use=["slow.onnx"], where=W_HINT),
        Case("resume/batch-rerun-without-flags-keeps-results",
             [Step(["batch", "zoo2", "--out", "b"], frozenset({0, 2}), names=[])],
             prep=[Step(["batch", "zoo2", "--out", "b", "--atol", "1e-2", "--rtol", "1e-2"], frozenset({0}))],
             setup=both(moved("zoo", "zoo2"), files(**{"zoo2__good.json": json.dumps(
                 {"inputs": {"samples": 2}, "max_evaluations": 40})})),
             use=["zoo"], owned=["b/summary.*", "b/batch.json", "b/.locks/*"], where=W_SETTINGS),
        Case("concurrency/two-diagnoses-one-out",
             [Step(slow, frozenset({0, 1})), Step([*slow, "--force"], frozenset({2}), start_when="r/run_settings.json")],
             concurrent=True, check=all_of(one_locked_out, report_parses("r/report.json")), where=W_LOCK),
        Case("concurrency/two-batches-one-out",
             [Step(["batch", "slowzoo", "--out", "b", "--strategy", "linear", "--samples", "2", "--max-evaluations", "40"],
                   frozenset({0})),
              Step(["batch", "slowzoo", "--out", "b"], frozenset({2}), names=["another batch"], start_when="b/batch.json")],
             setup=moved("slow.onnx", "slowzoo/slow.onnx"), use=["slow.onnx"], concurrent=True),
        Case("failed-run/rerun-after-runtime-failure",
             [Step(["compare", "dyn_fails.onnx", "--out", "r"], frozenset({2})),
              Step(["compare", "dyn_fails.onnx", "--out", "r", "--input-shapes", "x:[1,16]"], frozenset(V))],
             where=W_RUN + "; " + W_CLEAN),  # the second run is refused if the first left r/ behind
    ]


def reference_cases() -> list[Case]:
    """--reference-outputs: polygraphy --save-outputs files of good.onnx on ok0..ok3.npz, good and broken."""
    W_REF = "data/references.py: one-line refusals naming the file (iteration, output)"
    ins = [a for i in range(4) for a in ("--inputs", f"ok{i}.npz")]

    def ref(id: str, f: str, names, expect=(2,), cmd=("compare", "good.onnx"), inputs=ins, extra=()) -> Case:
        return case(f"refs/{id}", *cmd, *inputs, "--reference-outputs", f, *extra, expect=expect, names=names,
                    where=W_REF)

    return [
        ref("ok-compare", "refs.json", [], expect=V),
        ref("ok-diagnose", "refs.json", [], expect=(0,), cmd=("diagnose", "good.onnx", *GOOD_ARGS)),
        ref("other-values-fail", "refs_other.json", [], expect=(1,)),
        ref("missing-file", "nope.json", ["nope.json", "--reference-outputs"]),
        ref("directory", "dir.npz", ["dir.npz", "--reference-outputs"]),
        ref("inputs-file-not-outputs", "ok.json", ["ok.json", "--save-outputs"]),
        ref("text", "text.json", ["text.json"]),
        ref("truncated", "refs_truncated.json", ["refs_truncated.json"]),
        ref("count-mismatch", "refs.json", ["refs.json", "--inputs"], inputs=["--inputs", "ok0.npz"]),
        ref("count-mismatch-diagnose", "refs.json", ["refs.json"], cmd=("diagnose", "good.onnx"),
            inputs=["--inputs", "ok0.npz", "--inputs", "ok1.npz"]),
        ref("missing-output", "refs_noy.json", ["refs_noy.json", f"'{GOOD_OUTPUT}'"]),
        ref("wrong-shape", "refs_shape.json", ["refs_shape.json", f"'{GOOD_OUTPUT}'"]),
        ref("wrong-dtype", "refs_int.json", ["refs_int.json", f"'{GOOD_OUTPUT}'"]),
        ref("two-runners", "refs_two.json", ["refs_two.json", "trt-runner"]),
        ref("without-inputs", "refs.json", ["--reference-outputs", "--inputs"], inputs=["--samples", "2"]),
        ref("validate-inputs-count", "refs.json", ["refs.json", "--validate-inputs"], cmd=("diagnose", "good.onnx"),
            inputs=[*ins, "--validate-inputs", "ok0.npz"]),
    ]


def zoo_cases() -> list[Case]:
    return [
        case("zoo/dest-is-a-file", "zoo", "fetch", "--dest", "afile", names=["afile"], setup=files(afile="mine"),
             where="zoo/fetch.py"),
        case("zoo/dest-read-only", "zoo", "fetch", "--dest", "ro/zoo", "--name", "silero-vad-16k", names=["ro/zoo"],
             setup=readonly("ro"), where="zoo/fetch.py"),
        case("zoo/unknown-name", "zoo", "fetch", "--dest", "z", "--name", "nope", names=["nope"]),
        case("zoo/list-dest-file", "zoo", "list", "--dest", "afile", expect=(0, 2), setup=files(afile="mine")),
    ]


def more_cases() -> list[Case]:
    """Flags, locks and settings added with phase 2 (issue #11)."""
    import socket

    stale = json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname(), "command": "precision-doctor diagnose x",
                        "started": "2026-01-01T00:00:00"})
    ok_args = RUN_OK_ARGS

    def drop_report(root: Path) -> None:
        (root / "r" / "report.json").unlink()  # as if cut off before its report

    zoo_tol = ["batch", "zoo", "--out", "b", "--atol", "1e-2", "--rtol", "1e-2"]
    return [
        *_flag_cases("compare", C, [("--top", "0", (2,)), ("--group-mb", "inf", (2,)), ("--rtol", "inf", (2,))]),
        *_flag_cases("diagnose", D, [("--seed", "-1", (2,)), ("--max-evaluations", "1.5", (2,)),
                                     ("--time-budget", "inf", (2,)), ("--cosine-floor", "inf", (2,))]),
        case("out/stale-lock-of-dead-process", *D, "--out", "r", expect=(0,),
             setup=files(**{"r__.precision-doctor.lock": stale}), owned=["r/*"], where=W_LOCK),
        case("out/force-into-inputs-dir-names-both", "diagnose", "good.onnx", "--inputs", "w/ok0.npz", "--inputs",
             "w/ok1.npz", *GOOD_ARGS, "--out", "w", "--force", names=["w/ok0.npz", "report.md"],
             setup=both(moved("ok0.npz", "w/ok0.npz"), moved("ok1.npz", "w/ok1.npz"),
                        files(**{"w__report.md": "# mine\n"})), use=["ok0.npz", "ok1.npz", "good.onnx"], where=W_FORCE),
        Case("resume/without-flags-continues-recorded-settings",
             [Step(["diagnose", "good.onnx", "--resume", "--out", "r"], frozenset({0}))],
             use=["ok0.npz", "ok1.npz", "ok2.npz", "ok3.npz"], prep=[Step([*ok_args, "--out", "r"], frozenset({0}))],
             after_prep=drop_report, owned=["r/*"], check=report_parses("r/report.json"), where=W_SETTINGS),
        Case("resume/other-flags-print-the-command",
             [Step(["diagnose", "good.onnx", "--resume", "--out", "r", "--rtol", "0.5"], frozenset({2}),
                   names=["--atol 0.01", "--resume --out r"])],
             use=["ok0.npz", "ok1.npz", "ok2.npz", "ok3.npz"], prep=[Step([*ok_args, "--out", "r"], frozenset({0}))],
             after_prep=drop_report, owned=["r/*"], where=W_SETTINGS),
        Case("resume/batch-other-flags-need-rerun", [Step([*zoo_tol[:4], "--atol", "0.5"], frozenset({2}),
                                                          names=["--rerun", "--atol 0.01"])],
             prep=[Step(zoo_tol, frozenset({0}))], use=["zoo"], owned=["b/.locks/*"], where=W_SETTINGS),
        Case("resume/batch-rerun-replaces-when-asked", [Step([*zoo_tol[:4], "--atol", "0.5", "--rerun"],
                                                             frozenset({0}))],
             prep=[Step(zoo_tol, frozenset({0}))], use=["zoo"], owned=["b/*", "b/good/*", "b/.locks/*"]),
    ]


def no_bare_command(glob: str, word: str) -> Callable[[Path, list[Result]], list[str]]:
    """Check: no line of the files `glob` starts with `word` (a name printed bare into a script)."""

    def check(root: Path, results: list[Result]) -> list[str]:
        bad = [f"{p.relative_to(root)}: {ln[:80]!r}" for p in sorted(root.glob(glob))
               for ln in p.read_text(errors="replace").splitlines() if ln.lstrip().startswith(word)]
        return [f"a name became a command line: {bad[0]}"] if bad else []

    return check


def symlink_loop(a: str, b: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / a).symlink_to(b)
        (root / b).symlink_to(a)

    return setup


def resume_broken(change: Callable[[Path], None]) -> Callable[[Path], None]:
    """After prep (a finished run in r/): its report gone (as if cut off), then `change(r)`."""

    def after(root: Path) -> None:
        (root / "r" / "report.json").unlink()
        change(root / "r")

    return after


def _settings(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        p = run / "run_settings.json"
        p.write_text(json.dumps(change(json.loads(p.read_text()))))

    return apply


def _checkpoint_line(line: str) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        with (run / "search.jsonl").open("a") as f:
            f.write(line + "\n")

    return apply


def _checkpoint_dir(run: Path) -> None:
    (run / "search.jsonl").unlink()
    (run / "search.jsonl").mkdir()


def security_cases() -> list[Case]:
    """Issue 19, the file and CLI side: sample files that read other files or bomb memory, names that are shell
    lines or not UTF-8, files of the user's where report/emit write, wrong exits."""
    W_FILES = "data/arrayfiles.py: sample files are data, bounded before reading"
    W_NAMES = "graph/names.py + graph/model.py name_nodes: unsafe names renamed; results/emit.py quotes"
    W_UPDATE = "results/rundir.updating: report/emit write only files the manifest lists"
    W_RESUME = "search/oracle.py load_checkpoint + pipeline/settings.py: what a resume reads is checked"
    one = lambda id, f, names, use=(), absent=(), model="good.onnx": case(  # noqa: E731
        f"inputs/{id}", "compare", model, "--inputs", f, names=names, use=use, absent=absent, where=W_FILES)
    refs = [a for i in range(4) for a in ("--inputs", f"ok{i}.npz")]
    ok_args = RUN_OK_ARGS
    resumed = ["diagnose", "good.onnx", "--resume", "--out", "r"]

    def resume(id: str, change: Callable[[Path], None], names) -> Case:
        return Case(f"resume/{id}", [Step(resumed, frozenset({2}), names)], use=["ok0.npz", "ok1.npz", "ok2.npz",
                    "ok3.npz"], prep=[Step([*ok_args, "--out", "r"], frozenset({0}))], after_prep=resume_broken(change),
                    owned=["r/*"], where=W_RESUME)

    deep = report_json(lambda t: '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return [
        one("h5-external-storage", "ext_storage.h5", ["ext_storage.h5", "'x'", "external"], absent=("root:",)),
        one("h5-external-link", "ext_link.h5", ["ext_link.h5", "'x'", "external link"], use=["target.h5"]),
        one("h5-virtual-dataset", "virtual.h5", ["virtual.h5", "'x'", "virtual"], use=["target.h5"]),
        one("h5-soft-link", "soft_link.h5", ["soft_link.h5", "'x'", "soft link"], use=["target.h5"]),
        one("h5-bomb-2gib", "bomb.h5", ["bomb.h5", "'x'", "before reading"]),
        one("npz-bomb-2gib", "bomb.npz", ["bomb.npz", "'x'", "before reading"]),
        one("npz-bomb-dynamic-input", "bomb_small.npz", ["bomb_small.npz", "'x'"], model="dyn.onnx"),
        one("npz-member-not-npy", "raw_member.npz", ["raw_member.npz", "x.npy"]),
        one("json-torch-payload", "torch.json", ["torch.json", "torch"]),
        case("refs/npz-payload-bomb", "compare", "good.onnx", *refs, "--reference-outputs", "refs_bomb.json",
             names=["--reference-outputs", "refs_bomb.json", "before reading"], where=W_FILES),
        case("shapes/huge-dim", "compare", "dyn.onnx", "--input-shapes", "x:[4000000000,16]",
             names=["--input-shapes", "x:[4000000000,16]", "2**28"], where="data/inputs.py parse_input_shapes"),
        case("shapes/huge-dim-beyond-int64", "compare", "dyn.onnx", "--input-shapes", "x:[99999999999999999999,16]",
             names=["--input-shapes", "2**28"], where="data/inputs.py parse_input_shapes"),
        case("model/node-name-injects-a-shell-line", "diagnose", "injected.onnx", "--samples", "2", "--augment", "0",
             *GOOD_ARGS, "--out", "r", expect=(0,), names=["warning:", "Max_5", "maxnode\\ntouch"], owned=["r/*"],
             check=all_of(no_bare_command("r/*.sh", "touch"), no_bare_command("r/*.txt", "touch")), where=W_NAMES),
        case("model/node-name-not-utf8", "compare", "nonutf8_node.onnx", "--samples", "2", expect=V,
             names=["Tanh_1", "bad\\xff"], where=W_NAMES),
        case("model/tensor-name-not-utf8", "compare", "nonutf8_tensor.onnx", "--samples", "2",
             names=["nonutf8_tensor.onnx", "not valid UTF-8", "pre_tanh"], where=W_NAMES),
        case("report/users-own-reports-beside-report-json", "report", "mine", names=["mine", "report.md"],
             absent=("--out",), use=["run_ok"], setup=lambda root: (
                 (root / "mine").mkdir(), shutil.copy(root / "run_ok" / "report.json", root / "mine"),
                 (root / "mine" / "report.md").write_text("# mine\n"),
                 (root / "mine" / "report.html").write_text("<p>mine</p>\n")), where=W_UPDATE),
        case("emit/engine-users-own-fixed-plan", "emit", "run_ok", "--format", "engine", names=["fixed.plan"],
             absent=("--out",), setup=files(**{"run_ok__fixed.plan": "my engine"}), where=W_UPDATE),
        case("report/deeply-nested-json", "report", "run_ok", names=["report.json", "nested"], setup=deep,
             where=W_REPORT),
        case("emit/deeply-nested-json", "emit", "run_ok", names=["report.json", "nested"], setup=deep, where=W_REPORT),
        case("out/symlink-loop", *C, "--out", "loopA/sub", names=["--out", "loopA"], setup=symlink_loop("loopA", "loopB"),
             where=W_RUNDIR),
        resume("checkpoint-wrong-types", _checkpoint_line('{"step": 9, "fallback": "pre", "passed": "yes"}'),
               ["search.jsonl", "line"]),
        resume("checkpoint-is-a-directory", _checkpoint_dir, ["search.jsonl"]),
        resume("settings-empty-object", _settings(lambda d: {}), ["run_settings.json", "--force"]),
        resume("settings-missing-key", _settings(_drop("precision")), ["run_settings.json", "'precision'"]),
        resume("settings-wrong-type", _settings(lambda d: {**d, "tolerance": "loose"}),
               ["run_settings.json", "'tolerance'"]),
    ]


def trtexec_refuses(rel: str) -> Callable[[Path, list[Result]], list[str]]:
    """Check: the run's trtexec.sh says it cannot name a dynamic input, and builds nothing."""

    def check(root: Path, results: list[Result]) -> list[str]:
        p = root / rel
        text = p.read_text() if p.is_file() else ""
        if "# Not possible: trtexec cannot be given the shape" not in text or "\nexit 2\n" not in text:
            return [f"{rel} does not refuse the input trtexec cannot name: {text[-300:]!r}"]
        return []

    return check


def bytes_cases() -> list[Case]:
    """Issue 32, "Bounded by bytes": what a file's headers declare counted in bytes and against the model's types, the
    run's samples bounded, a loader script that exits, a tolerance that would overflow, commands that would leave out a
    dynamic input."""
    W_BYTES = "data/arrayfiles.py Bounds + data/sources.py: bytes from the header, the run's Budget"
    W_LOADER = "data/loader_script.py: SystemExit is the script's error"
    one = lambda id, f, names, model="good.onnx": case(  # noqa: E731
        f"inputs/{id}", "compare", model, "--inputs", f, names=names, where=W_BYTES)
    millions = [a for i in range(8) for a in ("--inputs", f"m{i}.npz")]
    loader = lambda id, script, names: case(  # noqa: E731
        f"loader/{id}", *D, "--data-loader-script", script, "--out", "r", names=[script, "SystemExit", *names],
        check=no_dir("r"), where=W_LOADER)
    return [
        one("h5-wide-text", "wide.h5", ["wide.h5", "'x'", "|S33554432", "before reading"]),
        one("npz-wide-text", "wide.npz", ["wide.npz", "'x'", "|S33554432", "before reading"]),
        one("json-wide-text-payload", "wide.json", ["wide.json", "'x'", "|S33554432", "before reading"]),
        case("inputs/eight-million-sample-files", "compare", "good.onnx", *millions, names=["m1.npz", "1,048,576"],
             where=W_BYTES),
        one("zero-leading-dim", "zero_lead.npz", ["zero_lead.npz", "'x'", "no samples"]),
        one("negative-leading-dim", "negative_lead.npz", ["negative_lead.npz", "'x'", "negative dimension"]),
        case("inputs/glob-parent-after-wildcard", "compare", "good.onnx", "--inputs", "gdir/*/../ok0.npz",
             names=["--inputs", "gdir/*/../ok0.npz", "'..'"], use=["ok0.npz"], where="data/sources.py glob_files"),
        loader("exit-0", "exit0.py", ["sys.exit(0)", "line 3"]),
        loader("exit-at-import", "exit_import.py", ["sys.exit(3)", "imported"]),
        loader("exit-while-yielding", "exit_later.py", ["sys.exit('done')", "sample 1"]),
        *_flag_cases("diagnose", D, [("--atol", "1e308", (2,)), ("--rtol", "1e301", (2,))]),
        *_flag_cases("compare", C, [("--atol", "1e308", (2,))]),
        *_flag_cases("submit", ["submit", "good.onnx", "--server", "http://127.0.0.1:9"], [("--atol", "1e308", (2,))]),
        case("emit/trtexec-refuses-a-dynamic-input-it-cannot-name", "diagnose", "quote_in.onnx", "--samples", "2",
             "--augment", "0", *GOOD_ARGS, "--out", "r", expect=(0,), owned=["r/*"], check=trtexec_refuses("r/trtexec.sh"),
             where="results/commands.py unwritable_inputs"),
    ]


def service_cases() -> list[Case]:
    """`serve` settings refused before the daemon starts, and `submit` settings refused before it sends
    anything (issue 19); the API's own refusals are tests/service/test_service_security.py's."""
    W_SERVE = "service/daemon.py check (+ service/auth.py token_problem): one line, exit 2, before the state dir"
    serve = ["serve", "--state-dir", "s"]
    out = [case(f"serve/{flag.lstrip('-')}={value}", *serve, flag, value, names=[flag], check=no_dir("s"),
                where=W_SERVE)
           for flag, value in [("--max-upload-mb", "nan"), ("--max-upload-mb", "inf"), ("--max-upload-mb", "0"),
                               ("--cache-mb", "nan"), ("--cache-mb", "-1"), ("--lease-s", "0"), ("--port", "99999"),
                               ("--port", "0"), ("--workers", "100000")]]
    out += [case(f"serve/token-{label}", *serve, "--token", token, names=["--token"], absent=[token], check=no_dir("s"),
                 where=W_SERVE)
            for label, token in [("space", "has space 123"), ("semicolon", "semi;colon;123"),
                                 ("quote", 'quo"te"12345'), ("newline", "new\nline1234")]]
    huge = "1" + "0" * 30
    out += _flag_cases("submit", ["submit", "good.onnx", "--server", "http://127.0.0.1:9"], [
        ("--group-mb", "1e400", (2,)), ("--seed", huge, (2,)), ("--max-evaluations", huge, (2,)),
        ("--samples", huge, (2,))])
    out += _flag_cases("diagnose", D, [("--group-mb", "1e308", (2,)), ("--seed", huge, (2,)),
                                       ("--max-evaluations", huge, (2,)), ("--samples", "1000000", (2,)),
                                       ("--time-budget", "1e300", (2,))])
    out += _flag_cases("compare", C, [("--group-mb", "1e308", (2,)), ("--seed", huge, (2,))])
    return out


def catalogue() -> list[Case]:
    cases = [*model_cases(), *input_cases(), *flag_cases(), *shape_range_cases(), *outdir_cases(),
             *rundir_cases(), *batch_cases(), *interrupt_cases(), *zoo_cases(), *reference_cases(), *more_cases(),
             *security_cases(), *bytes_cases(),
             *service_cases()]
    ids = [c.id for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, f"duplicate case ids: {dup}"
    return cases
