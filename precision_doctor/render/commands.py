"""What a report tells the reader to do next (`next_steps`: what and why, with the command) and the
precision-doctor commands it prints: run the diagnosis again (with other settings), continue it.

Each runs as printed from the report's own directory: the run's settings are kept with their paths relative to
it (`results.report.Invocation`), and a new run goes to a new directory beside it (`../<this run>-<why>`), since
a run directory holds one run. A service job's report gives `resubmit JOB` instead, for a continuation or other
settings (the daemon keeps the job's files: service/resubmit.py), and `submit` for a run on changed files: it names
them as uploaded, from the folder that holds the user's files.
A report without its settings (`invocation.spec`: one built by hand) falls back to the model path as given.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from precision_doctor.backends.registry import check_only
from precision_doctor.flags import command_line, flag_args
from precision_doctor.outcome import RunStatus
from precision_doctor.render.numbers import counted, fmt_short_pct
from precision_doctor.render.wording import floor_consequence, floor_finding, precision_name
from precision_doctor.results.report import Report, ServiceJob
from precision_doctor.results.verdict import NextKind, Status, Unvalidated, tolerance_changes
from precision_doctor.spec import RunSpec

HERE = "."  # a run directory, as a command run from it names it
RUN_FROM_HERE = ("Run these commands from the directory that holds this report: they name its files (fixed.onnx, "
                 "inputs.json, model.onnx) and your model and inputs by paths relative to it.")


def next_steps(report: Report) -> list[tuple[str, str | None]]:
    """What to do next, in order: (what and why, the command or None). The first is the statement's one next step
    (results/verdict.py `next`), then the others that apply, the last one the command that runs this diagnosis again.
    Commands run from the run directory (the one holding this report): they use paths relative to it."""
    first, st = first_step(report), report.statement
    steps = [first] + [(text, cmd) for kind, text, cmd in _other_steps(report)
                       if kind != st.next.kind and (cmd is None or cmd != first[1])]
    floor = report.analysis.rounding_floor
    realistic = floor.realistic(report.search.tolerance) if floor is not None and floor.below else None
    if st.next.kind == NextKind.CONTINUE and realistic is not None:  # after continuing: a tolerance the format allows
        steps.insert(1, _relax_step(report, dict(tolerance_changes(realistic))))
    if _service(report) and not report.interrupted:
        steps.append(("To run this diagnosis again after changing the model or the samples, from the folder that holds "
                      "them (precision-doctor resubmit runs it again on the daemon's copies of this job's files, with "
                      "flags for other settings):", rerun_command(report, "again")))
    elif report.invocation.spec is not None and not report.interrupted:
        steps.append(("To run this diagnosis again (after changing the model or the samples; add flags for other "
                      "settings), into a new directory beside this one:", rerun_command(report, "again")))
    return steps


def _service(report: Report) -> bool:
    """Whether the run was a daemon's job (its commands are `resubmit` and `submit`)."""
    return report.invocation.service_job is not None or report.invocation.origin == "service"


def first_step(report: Report) -> tuple[str, str | None]:
    """The statement's one next step, in words, with its command (None: none)."""
    st = report.statement
    nxt, changes = st.next, dict(st.next.changes)
    kind = nxt.kind
    if kind == NextKind.RELAX_TOLERANCE:
        return _relax_step(report, changes)
    if kind == NextKind.CONTINUE:
        return _continue_step(report)
    if kind == NextKind.MORE_DATA:
        return ("The answer fails held-out samples of your data: give more --inputs of your data (the search then sees "
                "more of what varies), or search with more room to spare. Searching again with a larger margin:",
                rerun_command(report, f"margin{changes['search.margin']:g}", changes))
    if kind == NextKind.CHECK_REFERENCE:
        return ("Even with every candidate node in FP32 the outputs miss the reference: the tolerance is tighter than "
                "FP32 itself reproduces (or the model is nondeterministic). Check the reference (--reference-outputs) "
                "or loosen --atol/--rtol, then run diagnose again.", None)
    if kind == NextKind.LOOSEN:
        return ("No set met the tolerance. Loosen --atol/--rtol (or use --check-error-stat mean) if your task allows "
                "it, give more representative --inputs, or try --strategy linear.", None)
    if kind == NextKind.VALIDATE:
        return _validate_step(report, changes)
    if kind == NextKind.KEEP_MORE_LOWP:
        t = st.benefit.better
        return (f"The answer keeps little of {st.precision}'s benefit: at {t.multiple:g}x this tolerance it would keep "
                f"{fmt_short_pct(t.fp32_flop_share)} of the FLOPs in FP32 ({counted(t.nodes, 'node')}). If your task allows that "
                "tolerance, run again with it:", rerun_command(report, f"tol{t.multiple:g}x", changes))
    if kind == NextKind.CHECK_ON_TARGET:
        text, check = _check_step(report)
        if check:
            return (text, check)
    return _confirm_step(report)


def _relax_step(report: Report, changes: dict[str, Any]) -> tuple[str, str | None]:
    """Run again with a tolerance above the format's rounding of the outputs (`changes`: its settings)."""
    floor = report.analysis.rounding_floor
    return (f"{floor_finding(floor, report.search.tolerance)}: {floor_consequence(floor)}. Run again with a tolerance above "
            "the rounding (your task decides how much error it allows; this one leaves the computation at least twice "
            "the rounding, which may still keep many nodes in FP32):",
            rerun_command(report, f"atol{changes['tolerance.atol']:g}", changes))


def _continue_step(report: Report) -> tuple[str, str | None]:
    """Continue a run that stopped early where it stopped."""
    raised = raised_budget(report)
    how = ("the daemon keeps this job's files: precision-doctor resubmit queues a new job that resumes this one's search, "
           "without its budget unless you give one (--max-evaluations N, --time-budget S)") if _service(report) else (
        "its settings are recorded in the run directory, its budget too" + (
            f"; a larger evaluation budget ({' '.join(raised)}) lets it go further" if raised else
            "; a larger --time-budget lets it go further" if "time budget" in (report.reason or "") else ""))
    return (f"The run did not finish. Continue it where it stopped ({how}):", resume_command(report, raised))


def raised_budget(report: Report) -> list[str]:
    """The flags that let a run its --max-evaluations stopped go further (in the search, the confirmation or the knob
    search, which spend what the search left): the budget doubled, and at least the run's evaluations plus the
    budget, since it counts the evaluations before a resume too and the same budget would stop it again; [] for any
    other run (a --time-budget counts each invocation's seconds, so a resume has it again)."""
    spec = report.invocation.spec
    if report.status != RunStatus.BUDGET_EXHAUSTED or spec is None or spec.search.max_evaluations is None:
        return []
    if "evaluation budget" not in (report.reason or ""):
        return []
    most, c, k = spec.search.max_evaluations, report.checks.confirm, report.checks.knobs
    spent = report.search.evaluations + ((c.evaluations or 0) if c is not None else 0) + (k.evaluations if k else 0)
    return flag_args("search.max_evaluations", max(2 * most, spent + most))


def _check_step(report: Report, cmds: dict[str, str] | None = None) -> tuple[str, str | None]:
    """The check of fixed.onnx on the runtime its answer is for (`--target`): polygraphy on TensorRT, or on ONNX Runtime
    CUDA; its command (None: the run has none)."""
    cmds = report.answer.commands if cmds is None else cmds
    key, text = (("polygraphy_ort_cuda", _CHECK_ORT_TEXT) if report.search.target == "ort-cuda" else
                 ("polygraphy", _CHECK_TEXT))
    lines = (cmds.get(key) or "").splitlines()
    return text, lines[-1] if lines else None


_CHECK_ORT_TEXT = ("Check the fixed model on the target GPU with ONNX Runtime CUDA, from this report's directory: "
                   "polygraphy runs it there and compares its outputs with the FP32 reference at your tolerance.")
_CHECK_TEXT = ("Check the fixed model on the target GPU with TensorRT, from this report's directory: polygraphy runs it "
               "there and compares its outputs with the FP32 reference at your tolerance.")


GPU_DAEMON = "http://GPU-DAEMON:8799"  # a placeholder: the address of a daemon on a GPU machine


def _confirm_step(report: Report) -> tuple[str, str | None]:
    """Confirm (and repair) the answer on a GPU: the run again with ort-cuda confirming. A service job whose daemon's
    machine has no CUDA GPU sends its files to a daemon on one instead (a resubmit here would fail)."""
    text = (f"The emulator can underestimate a GPU's {precision_name(report)} error: let precision-doctor confirm (and "
            "repair) the answer on the target GPU itself, with the same inputs and tolerance:")
    changes = {"backends.confirm_backend": "ort-cuda"}
    cert, inv = report.checks.certified_by, report.invocation
    job = inv.service_job
    if job is None or cert is None or not cert.not_on_gpu:
        return text, rerun_command(report, "gpu", changes)
    elsewhere = dataclasses.replace(job, server=GPU_DAEMON, remote=False)
    spec = inv.spec if inv.spec is not None else _legacy_spec(report)
    return (f"{text.removesuffix(':')}. This daemon's machine cannot ({cert.not_on_gpu}): send the job to a daemon on a "
            f"GPU machine ({GPU_DAEMON}: its address), from the folder that holds its files:",
            submit_command(elsewhere, spec.with_settings(changes)))


def _validate_step(report: Report, changes: dict[str, Any]) -> tuple[str, str | None]:
    """What validates an answer that no held-out sample of the user's data checked."""
    why = report.statement.claim.unvalidated if report.statement.claim is not None else None
    if why == Unvalidated.SPLIT_ZERO:
        return ("No held-out sample of your data checked this answer (--validation-split 0). Run again with the default "
                "split, which holds a fifth of your --inputs out to check it:", rerun_command(report, "validate", changes))
    if why == Unvalidated.GENERATED:
        return ("The samples were generated, not your data: run again with --inputs of your data (or a "
                "--data-loader-script); from 4 of them on, some are held out to check the answer.", None)
    if why == Unvalidated.REPAIRED:
        return ("The held-out samples shaped this answer: check it on new samples of your data that no search saw "
                "(--validate-inputs), or give more --inputs so that some stay unseen.", None)
    if why == Unvalidated.FEW_HELD_OUT:
        return ("Too few held-out samples of your data checked this answer to say anything useful: give more --inputs "
                "(a fifth is held out; 5 passing ones bound the failure rate below 50%, 59 at 5%), or --validate-inputs "
                "with samples the search does not see, and run again.", None)
    return ("No held-out sample of your data checked this answer: give 4 or more --inputs of your data (a fifth, at "
            "least 2, is held out to check it; 59 passing ones bound its failure rate at 5%), or --validate-inputs with "
            "samples the search does not see, and run again.", None)


def _runtime_steps(report: Report) -> tuple[list[tuple[str, str | None]], bool]:
    """The steps that say which runtime each answer is for (report.json's `target`, `other_runtime`), and whether
    this directory's fixed.onnx is the one to build with TensorRT (not where TensorRT has its own answer)."""
    o, steps = report.checks.other_runtime, []
    if report.search.target == "ort-cuda":
        steps.append((f"This answer is for ONNX Runtime CUDA: run fixed.onnx (FP32 inputs and outputs, the "
                      f"{precision_name(report)} regions inside) with onnxruntime-gpu's CUDAExecutionProvider at the "
                      "default graph optimizations.", None))
    if o is None or o.passed is not False or o.answer is None or not o.directory:
        return steps, True
    if o.runtime == "tensorrt":
        steps.append((f"For TensorRT build {o.directory}/fixed.onnx instead, the answer for TensorRT (this one fails "
                      f"there); its scripts pick the TensorRT version and read this directory's inputs:",
                      f"./{o.directory}/trtexec.sh"))
        steps.append(("Or with TensorRT-RTX, ahead of time without a GPU:", f"./{o.directory}/tensorrt_rtx.sh"))
        return steps, False
    steps.append((f"For ONNX Runtime CUDA run {o.directory}/fixed.onnx instead, the answer for it (this one fails "
                  "there).", None))
    return steps, True


def _other_steps(report: Report) -> list[tuple[NextKind | None, str, str | None]]:
    """The steps after the first, by kind (None: a step the statement never picks first): for an answer, build and
    check it; for a run that stopped early, what it would deploy; else nothing."""
    if not report.answered or report.statement.status == Status.NO_SOLUTION or report.statement.held_out_failed:
        return []
    cmds = report.answer.commands
    runtime, tensorrt_here = _runtime_steps(report)
    steps: list[tuple[NextKind | None, str, str | None]] = [(None, text, cmd) for text, cmd in runtime]
    text, check = _check_step(report, cmds)
    if check:
        steps.append((NextKind.CHECK_ON_TARGET, text, check))
    if not tensorrt_here:  # TensorRT has its own answer in a subdirectory: this fixed.onnx is not the one to build
        cmds = {}
    if cmds.get("trtexec_trt11"):
        steps.append((None, "Build the engine with TensorRT 11 (strongly typed: fixed.onnx carries the precisions):",
                      cmds["trtexec_trt11"]))
    if cmds.get("trtexec_trt10"):
        steps.append((None, "Or with TensorRT 10 (the original model, FP32 layers pinned); ./trtexec.sh picks the right "
                      "build for the TensorRT installed (PD_STRONGLY_TYPED=1 builds fixed.onnx on 10.x too):",
                      "./trtexec.sh"))
    if tensorrt_here and (cmds.get("tensorrt_rtx") or "tensorrt_rtx" in report.answer.artifacts):
        steps.append((None, "Or with TensorRT-RTX, ahead of time without a GPU (engines run on Ampere and newer, not on "
                      "compute capability 9.0):", "./tensorrt_rtx.sh"))
    c = report.checks.confirm
    if c is not None and c.passed and not check_only(c.backend):
        steps.append((None, f"The answer is already confirmed on {c.backend}; confirm it on your deployment GPU too if "
                      "that is another one.", None))
    else:
        steps.append((NextKind.CONFIRM_ON_GPU, *_confirm_step(report)))
    return steps


def rerun_command(report: Report, suffix: str, changes: dict[str, Any] | None = None) -> str:
    """The command that runs this diagnosis again with `changes` ({setting path: value}) into a new directory
    beside this one, named after it with `suffix`; a `submit` command for a service job."""
    inv = report.invocation
    if inv.spec is None and inv.service_job is None:
        return _legacy(report, changes or {}, f"RUN_DIR-{suffix}")
    if _service(report) and changes:  # the daemon keeps the job's files: the job again, with the changes
        return resubmit_command(inv.service_job, changes)
    spec = (inv.spec if inv.spec is not None else _legacy_spec(report)).with_settings(changes or {})
    if _service(report):
        return _submit(report, spec)
    return command_line("diagnose", spec.model, spec, "--out", f"../{inv.directory}-{suffix}")


def resume_command(report: Report, more: Sequence[str] = ()) -> str:
    """The command that continues this run where it stopped (its settings are recorded in its directory); `more`:
    flags on top (`raised_budget`)."""
    inv = report.invocation
    if inv.spec is None:
        return _legacy(report, None, "RUN_DIR")
    if _service(report):
        return resubmit_command(inv.service_job)
    return shlex.join(["precision-doctor", "diagnose", inv.spec.model, "--resume", "--out", HERE, *more])


def resubmit_command(job: ServiceJob | None, changes: dict[str, Any] | None = None) -> str:
    """The `resubmit` that queues a service job again on the daemon's copies of its files, with `changes` ({setting
    path: value}) as flags; it resumes the job's search where only the budget changes (service/resubmit.py)."""
    args = ["precision-doctor", "resubmit", job.id if job is not None else "JOB_ID"]
    for path, value in (changes or {}).items():
        if value is not None:
            args += flag_args(path, value)
    if job is not None and job.server:
        args += ["--server", job.server]
    return shlex.join(args)


def _submit(report: Report, spec) -> str:
    """A service job's `submit` (`submit_command`)."""
    return submit_command(report.invocation.service_job, spec)


def submit_command(job: ServiceJob | None, spec: RunSpec) -> str:
    """The `submit` that sends a service job's files again: as the submitter named them (report.json's `service_job`:
    upload names, or paths on the server with `--remote`) to the daemon it reached; without that record, the file
    names."""
    named = (lambda f: f) if job is not None and job.remote else (lambda f: Path(f).name)
    files = {"inputs.files": [named(f) for f in (job.inputs if job and job.inputs else spec.inputs.files)],
             "inputs.validate_files": [named(f) for f in (job.validate_inputs if job else spec.inputs.validate_files)]}
    ref = job.reference_outputs if job is not None else spec.inputs.reference_outputs
    if ref:
        files["inputs.reference_outputs"] = named(ref)
    model = named(job.model if job is not None and job.model else spec.model)
    where = (["--remote"] if job is not None and job.remote else []) + (
        ["--server", job.server] if job is not None and job.server else [])
    return command_line("submit", model, spec.with_settings(files), *where)


def _legacy_spec(report: Report) -> RunSpec:
    """The settings a report without its settings recorded still tells: precision and tolerance."""
    return RunSpec(model="", precision=report.search.precision, tolerance=report.search.tolerance)


def _legacy(report: Report, changes: dict[str, Any] | None, out: str) -> str:
    """The command of a report without its settings recorded: the model as given."""
    model = report.model.path if report.model is not None and report.model.path else "MODEL"
    if changes is None:
        return shlex.join(["precision-doctor", "diagnose", model, "--resume", "--out", out])
    files = report.search.inputs.get("files") if isinstance(report.search.inputs, dict) else None
    args = ["precision-doctor", "diagnose", model]
    if files:
        args += [a for f in files for a in ("--inputs", str(f))]
    args += ["--precision", report.search.precision, "--atol", f"{report.search.tolerance.atol:g}", "--rtol",
             f"{report.search.tolerance.rtol:g}"]
    for path, value in changes.items():
        args += [f"--{path.split('.')[-1].replace('_', '-')}", str(value)]
    return shlex.join([*args, "--out", out])
