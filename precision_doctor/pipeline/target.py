"""The other runtime (`backends.target`, graph/targets.py): after the search found the answer for the target runtime,
check it for the other one and, where it fails there, grow that runtime's own answer from it; write that answer's
fixed.onnx and commands into a folder named after the runtime; and the lines that label every artifact with the
runtime its answer holds for.

Where the other runtime is checked: on the machine the run measured on. A run that searched or confirmed on a GPU
measures it there (ort-cuda at ORT_ENABLE_ALL for ONNX Runtime; for TensorRT `trt` where its engines run, else the
proxy, ONNX Runtime CUDA with graph optimizations disabled); a run on the emulator emulates it with that runtime's
rules. The samples: every search sample (loaded on demand), the working set's perturbed copies and the held-out
samples, at the search's tolerance (the check itself is one evaluation: it stops at the first failing sample, and
runs every sample only where the answer passes). A failing answer grows by `search.auto.repair`: its members kept,
the fewest ranked islands added, then what was added pruned, and the fusion groups it added split where that pays
(`search.refine`, as after the search); so the second answer is the first plus what the other runtime needs, for
about the cost of a confirmation. On a GPU the growing runs on that runtime's gated graph first, counterexample-
guided as the search is (on the search's working set, the other samples checked after each answer). A time budget
left by the search bounds the growing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from precision_doctor.backends.registry import (
    AUTO_CONFIRM,
    AUTO_SEARCH_GPU,
    available_backends,
    check_only,
    make_backend,
    on_gpu,
)
from precision_doctor.control import PhaseEvent, notify
from precision_doctor.data.samples import Concat, Picked
from precision_doctor.errors import UserError
from precision_doctor.graph.ort_session import GpuRunError
from precision_doctor.graph.shapes import InputShape
from precision_doctor.graph.targets import TENSORRT, how_checked, of_tolerance, other, runtime
from precision_doctor.outcome import Outcome, RunStatus
from precision_doctor.pipeline.answers import flop_share
from precision_doctor.pipeline.artifacts import write_artifacts
from precision_doctor.pipeline.context import RunContext
from precision_doctor.pipeline.search_loop import Loop, RoundLog, SamplePool, run_loop
from precision_doctor.pipeline.strategy import evaluation_events, remaining, run_strategy, user_share
from precision_doctor.pipeline.trt import FIXED_ONNX, check_fixed
from precision_doctor.render.numbers import counted
from precision_doctor.results.report import OtherRuntime
from precision_doctor.search import Oracle
from precision_doctor.search.auto import repair
from precision_doctor.search.oracle import Budget
from precision_doctor.search.refine import refine
from precision_doctor.search.space import SearchSpace

CHECKPOINT = "other-{runtime}.jsonl"  # the other runtime's evaluations (a resumed run replays them)
GATED_CHECKPOINT = "other-{runtime}-gated.jsonl"  # those of its gated graph, where the growing runs first
GATED_ROUNDS = "other-{runtime}-gated-rounds.jsonl"  # the rounds of its counterexample-guided loop there
# The backend that checks an answer -> the one its growing runs on first: the gated graph computes what the real
# mixed graph computes (fusion sites gated whole for ort-cuda; every node its own kernel for TensorRT's proxy) for a
# feed per set instead of a session per set (GPU truth benchmark: 118 evaluations at 1.2 s each on a detector).
GROW_ON = {AUTO_CONFIRM: AUTO_SEARCH_GPU}


def measures_on_gpu(ctx: RunContext) -> bool:
    """Whether the run measured on a GPU (searched or confirmed there)."""
    plan = ctx.backends.plan
    return on_gpu(plan.search) or on_gpu(plan.confirm)


def where_checked(ctx: RunContext, name: str) -> tuple[str, bool]:
    """The backend that checks the answer for runtime `name`, and whether it runs on a GPU."""
    if not measures_on_gpu(ctx):
        return "emulate", False
    if name == TENSORRT and "trt" in available_backends():
        return "trt", True
    return "ort-cuda", True


def other_runtime_step(ctx: RunContext, outcome: Outcome) -> Outcome:
    """The diagnose step: the answer checked for the other runtime (`ctx.findings.other`). The outcome stays, but for
    a stop (Ctrl-C, SIGTERM) during the check: then the run is interrupted (its --resume replays the check)."""
    report, stopped = check_other_runtime(ctx, outcome)
    ctx.findings.other = report
    return Outcome(RunStatus.INTERRUPTED, stopped, outcome.found) if stopped is not None else outcome


def check_other_runtime(ctx: RunContext, outcome: Outcome) -> tuple[OtherRuntime | None, str | None]:
    """The answer (`outcome.found`) checked for the runtime it is not for, grown there where it fails (see the module
    docstring): the report's section (None without an answer) and, where a stop cut the check short, why."""
    spec, name = ctx.spec, other(ctx.spec.backends.target)
    if outcome.found is None:
        return None, None
    if not outcome.complete:
        return OtherRuntime(name, reason=f"the run ended early ({str(outcome.status).replace('_', ' ')})"), None
    backend_name, measured = where_checked(ctx, name)
    words = how_checked(backend_name, name)
    samples, refs, users = _samples(ctx)
    ctx.backends.pause()  # the search's sessions are made again where needed: the check's hold the weights meanwhile
    ctx.references.runner.pause()
    notify(ctx.progress, PhaseEvent("other-runtime", f"the answer on {runtime(name).label} ({words}), "
                                                     f"{counted(users, 'sample')}"))
    model = ctx.work.model
    try:
        backend = ctx.owned.enter_context(contextlib.closing(make_backend(
            backend_name, model, spec.precision, model.outputs, "backends.target", rules=runtime(name).profile,
            target=name)))
    except UserError as exc:
        return OtherRuntime(name, backend_name, measured, users, reason=str(exc)), None
    checkpoint = ctx.out_dir / CHECKPOINT.format(runtime=name)
    oracle = Oracle(backend, samples, refs, spec.search_tolerance, cost_of=ctx.space.cost, checkpoint=checkpoint,
                    writer=ctx.run_dir, stop=ctx.stop)
    if ctx.resume:
        oracle.load_checkpoint()
    elif checkpoint.exists():
        checkpoint.unlink()  # our own file from an earlier forced run
    try:
        return _checked(ctx, oracle, outcome.found, backend_name, name, measured, users)
    except GpuRunError as exc:  # the answer stands; that it was not checked there is said, not a failed run
        oracle.close()
        return OtherRuntime(name, backend_name, measured, users, reason=f"the GPU failed the check ({exc.what})"), None


def _checked(ctx: RunContext, oracle: Oracle, found: frozenset[str], backend_name: str, name: str, measured: bool,
             users: int) -> tuple[OtherRuntime, str | None]:
    """`check_other_runtime` once its oracle is made: the answer checked there and grown where it fails."""
    spec, model = ctx.spec, ctx.work.model
    checked = run_strategy(oracle, ctx.space, lambda o, sp: found if o.passes(found, f"on {name}") else None, ctx.stop)
    verdict = oracle.known(found)
    gated_evaluations = 0  # those of the growing on the gated graph, where it ran
    report = OtherRuntime(name, backend_name, measured, users, None if verdict is None else verdict.passed,
                          user_share(spec, verdict))
    if verdict is None:
        report.reason = str(checked.reason)
    elif not verdict.passed:  # the check itself is never cut short; growing there spends what the search left
        try:
            checked, gated_evaluations = _grow_there(ctx, oracle, found, backend_name, name)
        except GpuRunError as exc:  # the failure stands; that no answer was grown there is said
            report.reason = f"no answer for it was grown: the GPU failed ({exc.what})"
            report.evaluations = oracle.evaluations
            oracle.close()
            return report, None
        answer = checked.found
        if answer is not None:
            report.answer = [n.name for n in model.nodes if n.name in answer]
            report.added = [n for n in report.answer if n not in found]
            report.answer_tolerance_used = user_share(spec, oracle.known(answer))
            report.fp32_flop_share = flop_share(model, answer, ctx.space.cost_model)
        if checked.status != RunStatus.COMPLETE:
            report.reason = f"its answer there is not settled: {checked.reason}"
        elif answer is None:
            report.reason = f"no set passes on {runtime(name).label}, not even with every candidate in FP32"
    report.evaluations = oracle.evaluations + gated_evaluations
    oracle.close()  # its backend's session is not needed again (a large model's weights, held to the run's end else)
    return report, checked.reason if checked.status == RunStatus.INTERRUPTED else None


def _grow_there(ctx: RunContext, oracle: Oracle, found: frozenset[str], backend_name: str,
                name: str) -> tuple[Outcome, int]:
    """`found` grown on `oracle` (the other runtime's check) until it passes, spending what the search left; where
    that check makes an ONNX Runtime session per set (ort-cuda, about a second each), the growing runs first on the
    gated graph of the same runtime (one session, a set is a feed: `GROW_ON`), counterexample-guided as the search
    (`_gated_loop`), and `oracle` checks what it grew, going on from there only where it still fails. Returns the
    outcome and the gated graph's evaluations."""
    budget = Budget(None, remaining(ctx.budget, ctx.oracle).time_s)
    start, extra = found, 0
    gated = _gated_loop(ctx, oracle, found, backend_name, name)
    if gated is not None:
        loop, on_gated = gated
        on_gated.budget, on_gated.on_evaluation = budget, evaluation_events(ctx.progress)  # a progress line each
        try:
            grown = run_loop(loop, on_gated, ctx.space, lambda o, sp: _grown(o, sp, found),
                             lambda prev, failing: lambda o, sp: _grown(o, sp, prev), search=f"other-{name}",
                             stop=ctx.stop)
        finally:
            on_gated.close()  # as the check's own (`check_other_runtime`), a GPU failure too
        extra = on_gated.evaluations
        if grown.status == RunStatus.INTERRUPTED:
            return grown, extra
        if grown.found is not None:
            start = grown.found
        budget = Budget(None, remaining(budget, on_gated).time_s)
    oracle.budget, oracle.on_evaluation = budget, evaluation_events(ctx.progress)  # its own smallest sets
    if gated is None:
        return run_strategy(oracle, ctx.space, lambda o, sp: _grown(o, sp, start), ctx.stop), extra
    # what the gated graph grew (and refined), where the real graph passes it; else grown on from it there
    return run_strategy(oracle, ctx.space, lambda o, sp: start if o.passes(start) else _grown(o, sp, start),
                        ctx.stop), extra


def _gated_loop(ctx: RunContext, oracle: Oracle, found: frozenset[str], backend_name: str,
                name: str) -> tuple[Loop, Oracle] | None:
    """The counterexample-guided loop that grows `found` on the gated graph of runtime `name` over `oracle`'s samples,
    and its oracle: it searches on the final search's working set (and copies) and the sample `found` failed on
    there, and checks each answer on the others, adding those that fail it, as the search does (a passing set costs
    a run of a few samples, not of every one). None: `backend_name` is not one that makes a session per set, or
    the gated graph cannot be made here."""
    fast = GROW_ON.get(backend_name)
    if fast is None:
        return None
    model, spec = ctx.work.model, ctx.spec
    try:
        backend = ctx.owned.enter_context(contextlib.closing(make_backend(
            fast, model, spec.precision, model.outputs, "backends.target", rules=runtime(name).profile, target=name)))
    except UserError:
        return None
    pool = SamplePool(oracle.samples, oracle.references, list(range(len(oracle.samples))))
    working = list(range(len(ctx.oracle.samples)))  # _samples: the final search's samples and copies come first
    verdict = oracle.known(found)
    if verdict is not None and verdict.failed_sample is not None and verdict.failed_sample not in working:
        working.append(verdict.failed_sample)
    samples, refs = pool.working(working)
    checkpoint = ctx.out_dir / GATED_CHECKPOINT.format(runtime=name)
    gated = Oracle(backend, samples, refs, oracle.tolerance, cost_of=oracle.cost_of, checkpoint=checkpoint,
                   writer=ctx.run_dir, stop=ctx.stop)
    if ctx.resume:
        gated.load_checkpoint()
    elif checkpoint.exists():
        checkpoint.unlink()
    log = RoundLog(ctx.out_dir / GATED_ROUNDS.format(runtime=name), ctx.resume, ctx.run_dir)
    return Loop(pool, working, log), gated


def _grown(oracle: Oracle, space: SearchSpace, found: frozenset[str]) -> frozenset[str] | None:
    """`found` grown until it passes on `oracle` (`repair`: its members kept, what was added pruned), then the fusion
    groups it added split where a member alone matters and that pays (`search.refine`, as after the search), the
    members of `found` kept: the answer for the other runtime, grown from the target's."""
    grown = repair(oracle, space, found, True, True)
    if grown is None or space.grouping is None:
        return grown
    refined = refine(oracle, space, grown).answer | found
    return refined if refined == grown or oracle.passes(refined) else grown


def _samples(ctx: RunContext) -> tuple[Sequence, Sequence, int]:
    """What the other runtime is checked on: the final search's samples and perturbed copies, every other search
    sample (loaded on demand) and the held-out samples a repair did not add to the search's oracle; and how many of
    them are the user's."""
    loop, r, checked = ctx.loop, ctx.references, ctx.findings.held
    rest = loop.pool.outside(loop.working)
    added = checked.in_search_oracle if checked is not None else frozenset()
    others = [i for i in range(len(r.held)) if i not in added]
    held, held_refs = Picked(r.held, others), Picked(r.held_refs, others)
    samples = Concat(Concat(ctx.oracle.samples, Picked(loop.pool.samples, rest)), held)
    refs = Concat(Concat(ctx.oracle.references, Picked(loop.pool.refs, rest)), held_refs)
    return samples, refs, loop.user_samples + len(rest) + len(held)


def answer_for(ctx: RunContext) -> list[str]:
    """The lines at the top of the answer's scripts and lists (and in fixed.onnx's metadata): which runtime the answer
    holds for, on what that rests, and how it fared on the other runtime."""
    target = ctx.spec.backends.target
    b, f = ctx.backends, ctx.findings
    by = b.confirm if b.confirm is not None and f.confirmed is not None and f.confirmed.passed \
        and not check_only(b.confirm.name) else b.search
    lines = [f"This answer is for {runtime(target).label} (--target {target}), {how_checked(by.name, target)}"
             + (": TensorRT itself was not run." if target == TENSORRT and by.name != "trt" else ".")]
    o = f.other
    if o is not None and o.passed is not None:
        there = f"On {runtime(o.runtime).label} ({how_checked(o.backend, o.runtime)}) it "
        if o.passed:
            lines.append(there + f"passes too ({of_tolerance(o.tolerance_used)}).")
        else:
            lines.append(there + f"fails ({of_tolerance(o.tolerance_used)}): "
                         + (f"that runtime's own answer is in {o.runtime}/ (fixed.onnx and these files there)."
                            if o.answer is not None else "no answer for it was found."))
    return lines


def write_other_answer(ctx: RunContext, shapes: Sequence[InputShape]) -> None:
    """Where the answer failed on the other runtime and that runtime has its own answer: its fixed.onnx, lists and
    scripts in the folder named after it (`OtherRuntime.directory`, `files`), each labelled; for TensorRT, its
    fixed.onnx checked by the TensorRT parser here (`trt_check`)."""
    o = ctx.findings.other
    if o is None or o.passed or o.answer is None:
        return
    target, name = ctx.spec.backends.target, o.runtime
    answer = frozenset(o.answer)
    lines = [f"This answer is for {runtime(name).label} (--target {name}), {how_checked(o.backend, name)}: the "
             f"--target {target} answer failed there ({of_tolerance(o.tolerance_used)}); this one keeps "
             f"{counted(len(o.added), 'more node')} in FP32 and uses {of_tolerance(o.answer_tolerance_used)} there.",
             f"The answer for {runtime(target).label} is the run directory's (../fixed.onnx)."]
    spec = ctx.spec.with_settings({"backends.target": name, "backends.rules": None})
    written = write_artifacts(ctx.run_dir, ctx.work, ctx.references.refs, answer, spec, None, list(shapes),
                              answer_for=lines, where=name, kept_ops=ctx.backends.kept_fp32())
    o.directory = name
    o.files = {k: v for k, v in written.files.items() if v.startswith(name + "/")}
    if name == TENSORRT:
        model = ctx.work.model
        o.trt_check = check_fixed(ctx.out_dir / name / FIXED_ONNX, answer, [n.name for n in model.candidates],
                                  spec.precision, written.forced)
