"""The sentences every front end shares (report.md, report.html, the CLI, the service pages, the batch summary),
beside the verdict's (render/verdict.py, one sentence per field of the run's statement): the tolerance against the
format's rounding, the whole model in low precision, the search's rounds and both answers; how the answer was checked
(confirmation, certification, headroom, what the emulator does not model, the perturbed-copy probe as an uncalibrated
diagnostic); why a layer hurts; the inputs' shapes; `compare`'s verdict and a batch row in brief. Numbers are written
by `numbers.py`. Literal names are Markdown code (`code`): report.html and the CLI drop the backticks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from precision_doctor.backends.registry import check_only
from precision_doctor.control import CaptureSizeEvent, ProgressEvent, RoundingFloorEvent
from precision_doctor.data.keep_plan import TENSORS_BYTES, KeepPlan
from precision_doctor.flags import flag, tolerance_flags
from precision_doctor.graph.coverage import EmulationNote, NoteKind
from precision_doctor.graph.names import shown
from precision_doctor.measure.analysis import INPUT_SENSITIVITY, Analysis
from precision_doctor.measure.floor import RoundingFloor
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.outcome import Growth, RunStatus, SummaryRow
from precision_doctor.render.numbers import (
    counted,
    fmt,
    fmt_3g,
    fmt_decimal_bytes,
    fmt_seconds,
    fmt_share,
    fmt_short_pct,
    fmt_time,
    num,
)
from precision_doctor.results.report import AnswerSummary, Layer, Report
from precision_doctor.words import repeat_words


def tolerance_text(tol: Tolerance, sep: str = ", ", code: str = "") -> str:
    """The tolerance in words: "atol 0.001, rtol 0.001, stat elemwise, cosine >= 0.999; output 'logits': atol
    0.01" (`sep` between the parts, `code` around literal names: "`" in Markdown)."""
    parts = [f"atol {fmt(tol.atol)}", f"rtol {fmt(tol.rtol)}", f"stat {code}{tol.check_error_stat}{code}"]
    if tol.cosine_floor is not None:
        parts.append(f"cosine ≥ {fmt(tol.cosine_floor, 7)}")
    own = []
    for name in tol.outputs_named:
        t = tol.for_output(name)
        own.append(f"output {code}{shown(name)}{code}: atol {fmt(t.atol)}, rtol {fmt(t.rtol)}")
    return sep.join(parts) + ("; " + "; ".join(own) if own else "")


def precision_name(report: Report) -> str:
    return str(report.search.precision or "low precision").upper()


def code(s: Any) -> str:
    """A literal name in a sentence: Markdown inline code, safe inside a GFM table cell (report.html and the CLI
    drop the backticks)."""
    text = str(s).replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------- the emulator, the tolerance, the whole model


def notes_clause(notes: Iterable[EmulationNote], precision: str) -> str | None:
    """The emulation notes that leave an emulator's verdict unconfirmed, in words; None without any."""
    parts = []
    for n in notes:
        if not n.unconfirmed:
            continue
        one = n.count == 1
        nodes = f"{n.count} {n.op_type} node{'' if one else 's'}"
        if n.kind == NoteKind.MEASURED_MISMATCH:
            parts.append(f"{nodes} {'errs' if one else 'err'} on a GPU up to {n.factor:.3g}x more than the emulator "
                         "computes")
        elif n.kind == NoteKind.UNMEASURED_PATTERN:
            parts.append(f"{n.count} {n.op_type} pair{'' if one else 's'} that ONNX Runtime may fuse "
                         f"{'was' if one else 'were'} never measured")
        elif n.kind == NoteKind.UNMEASURED_FORMAT:
            parts.append(f"{precision.upper()} was never measured on a GPU")
        else:
            parts.append(f"{nodes} {'behaves' if one else 'behave'} on a GPU in a way never measured")
    return "; ".join(parts) or None


def lowp_multiple(report: Report) -> float | None:
    """How many times the tolerance the whole model in low precision uses (its worst output; inf: inf or NaN),
    from the search's all-low-precision evaluation (report.json's `baseline`, whose shares are of the search
    tolerance: the user's scaled by 1 - margin). None when it was not evaluated."""
    base = report.analysis.baseline
    used = [num(o.tol_used) for o in base.outputs.values()] if base is not None else []
    used = [u for u in used if not math.isnan(u)]
    if not used:
        return None
    return max(used) * (1.0 - float(report.search.margin or 0.0))


def lowp_sentence(report: Report) -> str | None:
    """The whole model in low precision as a multiple of the tolerance, in words; None when not known."""
    m = lowp_multiple(report)
    if m is None:
        return None
    prec = precision_name(report)
    if math.isinf(m):
        return f"All in {prec}, the model's outputs overflow (inf or NaN)."
    base = report.analysis.baseline
    if base is not None and not base.passed and within_but_over_margin(report, m):
        return (f"All in {prec}, the model uses {over_margin_share(report, m)}x the tolerance on the search samples it "
                f"ran (up to the first that failed): within it there, but above {margin_words(report)}.")
    return f"All in {prec}, the model uses {m:.3g}x the tolerance."


def margin_words(report: Report) -> str:
    """The search's margin in words: "the 0.9x the search's 10% margin allows"."""
    margin = float(report.search.margin or 0.0)
    return f"the {1 - margin:.3g}x the search's {100 * margin:.3g}% margin allows"


def over_margin_share(report: Report, share: float) -> str:
    """A share that failed only the search's margin, with the digits that show it above 1 - margin ("0.90003", not
    "0.9", which reads as the margin itself)."""
    mark = 1 - float(report.search.margin or 0.0)
    for digits in range(3, 9):
        if float(text := f"{share:.{digits}g}") > mark:
            return text
    return repr(share)


def within_but_over_margin(report: Report, share: float | None) -> bool:
    """Whether a check that failed at the search's tolerance (the user's less the margin) failed only its margin: its
    share of the user's tolerance is above 1 - margin and within 1 (on the samples it ran: a failing check stops at
    its first failing sample), and no cosine floor could have failed it instead."""
    margin = float(report.search.margin or 0.0)
    return (share is not None and math.isfinite(share) and margin > 0 and 1 - margin < share <= 1
            and report.search.tolerance.cosine_floor is None)


def floor_finding(floor: RoundingFloor, tol: Tolerance) -> str | None:
    """Where the tolerance is tighter than the format can represent at the outputs, that in words ("The tolerance
    (atol 1e-05, rtol 1e-05, stat elemwise) is tighter than FP16 can represent at the outputs: rounding the FP32
    reference output 'y' to FP16 alone uses 48.8x it"); None where it is not."""
    if not floor.below:
        return None
    prec = floor.precision.upper()
    name, share = floor.worst
    head = f"The tolerance ({tolerance_text(tol)}) is tighter than {prec} can represent at the outputs: "
    mine = tol.for_output(name) if name is not None else tol
    if not math.isfinite(share) and mine.atol == 0 and mine.rtol == 0:
        return head + f"at '{shown(name)}' it allows no difference at all, and rounding its FP32 reference to {prec} changes it"
    if not math.isfinite(share):  # the range, not the tolerance: no tolerance admits an inf
        return f"The FP32 reference output '{shown(name)}' holds values beyond {prec}'s range (whatever the tolerance)"
    if share <= 1.0:  # within the tolerance, above what the search's margin leaves
        return (f"The tolerance ({tolerance_text(tol)}) leaves {prec} no room at the outputs under the search's margin: "
                f"rounding the FP32 reference output '{shown(name)}' to {prec} alone uses {share:.3g}x it, more than "
                f"the {floor.allowed:.3g}x the search asks for (--margin {1 - floor.allowed:.3g})")
    return head + f"rounding the FP32 reference output '{shown(name)}' to {prec} alone uses {share:.3g}x it"


def floor_consequence(floor: RoundingFloor) -> str:
    """What a tolerance below the format's rounding at an output means for the answer, no more than is certain."""
    prec = floor.precision.upper()
    return (f"every node that writes that output must stay in FP32, and the {prec} errors of the nodes before it "
            f"usually keep most of them in FP32 too (little or no {prec} benefit)")


def floor_warning(floor: RoundingFloor, tol: Tolerance) -> str | None:
    """The warning before a search whose tolerance is below the format's rounding at the outputs: the finding, what
    it means for the answer and the flags of a realistic tolerance; None where the tolerance is not below it."""
    finding = floor_finding(floor, tol)
    if finding is None:
        return None
    advice = floor_advice(floor, tol)
    return f"{finding}: {floor_consequence(floor)}." + (f" {advice}" if advice else "")


def kept_of_capture(keep: str) -> str:
    """What a run keeps of a large capture (`capture.keep`), said before it starts."""
    plan = KeepPlan.parse(keep)
    if plan.every:
        return "all of it is kept"
    layers = f"the tensors of the top {counted(plan.top, 'layer')}" if plan.top else ""
    named = f"{counted(len(plan.names), 'name')} given" if plan.names else ""
    kept = " and ".join(p for p in (layers, named) if p)
    if kept:
        kept += (f" (where the samples have one shape, of as many as fit in {fmt_decimal_bytes(TENSORS_BYTES)}"
                 + ("; a top layer of which one sample's do not fit is left out)" if plan.top else ")"))
    what = "every layer's error statistics, the graph outputs" + (f" and {kept}" if kept else "")
    return f"it keeps {what}" + ("; it is removed once the report is written" if plan.remove else "")


def capture_size_note(ev: CaptureSizeEvent) -> str:
    """Before a large capture (`control.CaptureSizeEvent`): how much it will write and where, the room there, what is
    kept of it and the flag that takes fewer samples."""
    # the top layers are known only after the capture: their tensors are counted as the largest layers' (an upper bound)
    plan = KeepPlan.parse(ev.keep)
    size = f"{'up to' if plan.top and not plan.every else 'about'} {fmt_decimal_bytes(ev.nbytes)}"
    return (f"the capture will write {size} into {ev.path} ({counted(ev.samples, 'sample')}; "
            f"{fmt_decimal_bytes(ev.free)} free there); {kept_of_capture(ev.keep)}; "
            f"{flag('capture.max_samples')} takes fewer")


def run_warning(event: ProgressEvent) -> str | None:
    """What a run's progress event warns of, in words (a tolerance below the format's rounding, a large capture);
    None for other events. The service keeps these with a job's progress."""
    if isinstance(event, RoundingFloorEvent):
        return floor_warning(event.floor, event.tolerance)
    if isinstance(event, CaptureSizeEvent):
        return capture_size_note(event)
    return None


def floor_advice(floor: RoundingFloor, tol: Tolerance) -> str | None:
    """Where the tolerance is below the format's rounding and scaling it helps, the least tolerance the rounding
    alone passes and the flags of a realistic one: "FP16 can meet a tolerance at the outputs only above atol 4.88e-04,
    rtol 4.88e-04 (its rounding alone); set one your task allows, e.g. --atol 0.001 --rtol 0.001." (Its computation
    errs more than the rounding: the model decides whether that one is enough.)"""
    suggested, needs = floor.realistic(tol), floor.needs(tol)
    if suggested is None or needs is None:
        return None
    return (f"{floor.precision.upper()} can meet a tolerance at the outputs only above atol {fmt(needs.atol)}, rtol "
            f"{fmt(needs.rtol)} (its rounding alone); set one your task allows, e.g. {tolerance_flags(suggested)}.")


def floor_sentence(report: Report) -> str | None:
    """The headline's note that the tolerance is tighter than the format can represent at the outputs, where it is,
    with the flags of a realistic one."""
    floor = report.analysis.rounding_floor
    if floor is None:
        return None
    finding = floor_finding(floor, report.search.tolerance)
    return " ".join(x for x in (f"{finding}.", floor_advice(floor, report.search.tolerance)) if x) if finding else None


def search_line(report: Report) -> str:
    """The search in one line, as the CLI prints it first: "fp16 on emulate, strategy auto: 40 evaluations in a 3.2 s
    search (the whole run 9.04 s: 2.1 s before the search, 3.74 s after)"; the time budget's where one was given."""
    s = report.search
    target = f" for {s.target}" if s.target else ""
    head = f"{s.precision}{target} on {s.backend}, strategy {s.strategy}: {s.evaluations} evaluations"
    t = report.search.timing
    if t is None:  # a report written before the search's time was kept apart
        return f"{head} in {fmt_seconds(report.search.elapsed_s)}"
    budget = "" if t.time_budget_s is None else f" of its {fmt_time(t.time_budget_s)} budget"
    return (f"{head} in a {fmt_time(t.search_s)} search{budget} (the whole run {fmt_time(report.search.elapsed_s)}: "
            f"{fmt_time(t.before_search_s)} before the search, {fmt_time(t.after_search_s)} after)")


# ---------------------------------------------------------------- the search's rounds and both answers


def _answer_words(a: AnswerSummary) -> str:
    return f"{counted(a.size, 'node')}, {fmt_short_pct(a.fp32_flop_share)} of the FLOPs"


_GROWN = {Growth.COUNTEREXAMPLES: "search samples outside the working set failed it",
          Growth.PREDICTION: "the perturbed-copy probe asked for a second, stricter search",
          Growth.CONFIRMATION: "the GPU's real kernels failed it on search samples",
          Growth.HELD_OUT: "held-out samples failed it (repaired with them, by what their error is attributed to)"}


def answers_sentence(report: Report) -> str | None:
    """Both answers, in words: the smaller one found first with its measured failures, the final one with its cost."""
    two = report.promise.answers
    if two is None:
        return None
    small, final = two.smaller, two.safer
    facts = []
    if small.search_failures:
        facts.append(f"failed {small.search_failures} of the search samples (at least: the check stops after a few)")
    if small.held_out is not None:
        b = small.held_out
        on = f" on {b.of.rpartition(' on ')[2]}" if " on " in b.of else ""
        facts.append(f"failed {b.failures} of {counted(b.samples, 'held-out sample')}{on}")
    why = "; ".join(_GROWN[g] for g in two.grown_by)
    measured = " and ".join(facts) if facts else "was not checked on held-out samples"
    smaller = small.size <= final.size and small.fp32_flop_share <= final.fp32_flop_share
    # the run keeps it as the cheaper one by the search's objective (its estimated deployment cost: casts count too)
    which = "smaller" if smaller else "cheaper"
    cheaper = "" if smaller else "; cheaper by the search's estimated deployment cost, though not smaller"
    how = "grown from it" if set(small.nodes) <= set(final.nodes) else "found after it"
    return (f"Two answers: the {which} one, the search's first round's ({_answer_words(small)}{cheaper}), {measured}; "
            f"the final one ({_answer_words(final)}) is the answer, {how} because {why}. Keep the {which} one only if "
            "those failures are acceptable.")


def rounds_sentence(report: Report) -> str | None:
    """The counterexample-guided search in words; None when it had a single round on every search sample."""
    r = report.search.rounds
    if r is None or not r.rounds or (len(r.rounds) == 1 and r.search_samples <= r.start and not r.stopped):
        return None
    first = [x for x in r.rounds if x.search == "first"]
    working = len(first[-1].working) if first else r.start
    added = working - min(r.start, r.search_samples)
    text = (f"Counterexample-guided search: {counted(len(first), 'round')} on {working} of the "
            f"{r.search_samples} search samples (the {min(r.start, r.search_samples)} hardest"
            + (f", then {added} that failed an answer" if added else "") + ")")
    if r.verified:
        return text + f"; the answer passes all {r.search_samples} ({r.checked} checks outside the working sets)."
    unchecked = ("the answer was not checked on every search sample" if report.statement.answered
                 else "it stopped before any set passed")
    return text + f"; {r.stopped or unchecked}."


# ---------------------------------------------------------------- how the answer was checked


def output_run_labels(report: Report) -> tuple[str, str, str]:
    """Labels of the baseline's output checks (a failing one stops at its first failing sample: its figures are of
    the samples up to that one), of the answer's and of the held-out ones (which may be of the searched answer, when
    the confirmation on another backend changed it)."""
    prec = precision_name(report)
    base = report.analysis.baseline
    baseline = (f"baseline (all {prec}, up to the first failing sample)" if base is not None and not base.passed
                else f"baseline (all {prec})")
    c, k = report.checks.confirm, report.checks.knobs
    fixed = f"fixed (on {c.backend}, all samples)" if c is not None and c.passed else "fixed (search samples)"
    if k is not None and k.changed_answer:
        fixed = f"fixed (on {k.backend} with knobs {k.best}, all samples)"
    return baseline, fixed, "fixed (validation)"


def samples_cell(report: Report) -> str:
    """The settings table's samples: search and validation, and the user's samples that repeated an earlier one (used
    once)."""
    samples = report.search.samples
    cell = f"{samples.search} search, {samples.validation} validation"
    inputs = report.search.inputs if isinstance(report.search.inputs, dict) else {}
    repeated = inputs.get("repeated") or []
    if repeated:
        dup, first = repeated[0]
        cell += (f"; {counted(len(repeated), 'repeated sample')} of the search's used once ({repeat_words(dup, first)}"
                 f"{', ...' if len(repeated) > 1 else ''})")
    if inputs.get("held_repeated"):
        cell += f"; {counted(int(inputs['held_repeated']), 'repeated held-out sample')} used once"
    return cell


def _q(v: Any) -> Any:
    """`v`, or "?" where it was not recorded."""
    return "?" if v is None else v


def confirm_sentence(report: Report) -> str | None:
    """What carrying the searched answer over to the confirm backend did; None when not asked for."""
    c = report.checks.confirm
    if c is None:
        return None
    searched = len(c.searched_answer)
    if c.skipped:
        return f"Not confirmed on {c.backend}: {c.skipped}."
    if c.passed is None:
        return (f"Not confirmed on {c.backend}: the confirmation stopped early ({c.status}) after "
                f"{_q(c.evaluations)} evaluations; the answer is the searched one ({searched} nodes).")
    held = {True: "held as is", False: "failed there"}.get(c.searched_answer_passed, "was not run there")
    if check_only(c.backend):
        return (f"Checked on {c.backend} over {_q(c.samples)} samples (a plumbing check: fixed.onnx loads and runs; "
                f"its FP16 verdicts are not FP16's, so it never removes a node): the searched answer ({searched} "
                f"nodes) {held}; the answer is {len(report.answer.fallback_nodes)} nodes.")
    head = f"Confirmed on {c.backend} over {_q(c.samples)} samples: the searched answer ({searched} nodes) {held}"
    if not c.passed:
        return head + f"; no passing set was found there ({_q(c.evaluations)} evaluations)."
    final = len(report.answer.fallback_nodes)
    added = "" if c.searched_answer_passed else (
        "; what was added there (the shortest passing prefix of the ranked nodes) was kept as it is"
        if c.pruned_added is False else "; only what was added there was pruned")
    kept = "" if c.pruned_searched is not False else (
        f" (its own {searched} members were kept, not pruned there: each removal tried is a new session on "
        f"{c.backend}{added})")
    return head + f"; after {_q(c.evaluations)} evaluations there the answer is {final} nodes{kept}." + _oracle_choice(c)


def _oracle_choice(c) -> str:
    """Which samples the confirmation's oracle held and why (a trial's session against a sample's run, where timed);
    with the working set, whether its answer then passed every other search sample; empty without rounds."""
    if c.every_sample is None:
        return ""
    t = c.trial_cost
    if c.every_sample:
        why = "" if t is None else (f" (a new session cost {t.session_s:.2f} s there, at least the "
                                    f"{t.others} other search samples' runs at {t.sample_s:.3f} s each)")
        return f" Every search sample was in its oracle from the start{why}."
    why = "" if t is None else (f" (the {t.others} other search samples' runs at {t.sample_s:.3f} s each cost more "
                                f"than a new session there, {t.session_s:.2f} s)")
    rest = ("its answer then passed every other search sample" if c.others_checked else
            "its answer was not checked on every other search sample (the search rounds say where it stopped)")
    return f" Its trials ran on the search's working set{why}; {rest}."


def certified_sentence(report: Report) -> str | None:
    """Which backend certified the final answer, in words (report.json's `certified_by`); None without one."""
    c = report.checks.certified_by
    if c is None:
        return None
    where = {"confirmation": "confirmation", "validation": "search and held-out samples", "search": "search",
             "knobs": "knob search"}.get(c.how, c.how)
    if c.backend == "emulate":
        who = f"the emulator (`{c.rules or 'standard'}` rules)"
    else:
        who = f"`{c.backend}`" + (" (real low precision on the GPU)" if c.gpu else "")
    search = report.search.samples.search
    total = search + report.search.samples.validation
    # a search cut short (--time-budget) checked its answer on part of the search samples only; a confirmation checks
    # the search samples (the held-out ones are the held-out check's, said apart)
    if c.samples >= total:
        on = f"all {c.samples} samples"
    elif c.how in ("confirmation", "search") and c.samples >= search:
        on = f"all {c.samples} search samples"
    else:
        on = f"{c.samples} of the {total} samples"
    text = f"Certified by {who}: the final answer passes there on {on} ({where})"
    if c.unconfirmed:
        text += (f", except for what the emulator does not model on a GPU ({', '.join(c.unconfirmed)}; "
                 "below): confirm it there")
    if not c.gpu:
        text += "; not checked on a GPU"
        if c.not_on_gpu:
            text += f": {c.not_on_gpu} (`--backend auto` confirms on ort-cuda where one is)"
    return text + "."


def emulation_note_lines(report: Report) -> list[str]:
    """One line per group of nodes whose behaviour on the target the emulator does not model."""
    out = []
    for n in report.checks.emulation_notes:
        shown = ", ".join(code(x) for x in n.nodes)
        more = f" and {n.count - len(n.nodes)} more" if n.count > len(n.nodes) else ""
        what = f"{n.count} {n.op_type} node(s) ({shown}{more})" if n.op_type else f"{n.count} node(s)"
        out.append(f"Not modelled ({n.kind}): {what}: {n.detail}.")
    return out


def headroom_sentence(report: Report) -> str | None:
    """How much of the tolerance a passing answer uses (search or held-out samples, the larger), with
    advice when little is left; None when not recorded."""
    used = report.checks.tolerance_used
    confirm = report.checks.confirm
    keys = ("confirm",) if confirm is not None else ("search", "validation")
    shares = [v for v in (num(getattr(used, k) if used else None) for k in keys) if not math.isnan(v)]
    if not report.passed or not shares:
        return None
    where = f" on {confirm.backend}" if confirm is not None else ""
    text = f"The answer uses {100 * max(shares):.1f}% of the tolerance{where}"
    margin = float(report.search.margin or 0.0)
    if margin:
        text += f" (searched with a margin of {100 * margin:.3g}%)"
    if max(shares) > 0.9 and not margin:
        text += (": little to spare, other hardware may tip it over (`--margin` searches for room to spare, "
                 "`--confirm-backend` checks on the target)")
    return text + "."


# ---------------------------------------------------------------- layers

# what analysis.py's `input_sensitive` means
INPUT_SENSITIVE_WHY = (f"its error comes from its rounded inputs (local error > {INPUT_SENSITIVITY:g}x the rounding of "
                       "its own output)")


def why(layer: Layer, report: Report) -> list[str]:
    """Why a layer hurts in low precision, in words (measure/explain.py, from its recorded facts)."""
    from precision_doctor.measure.explain import Limits, explain

    limits = report.analysis.format_limits
    fmt = Limits(precision_name(report), num(limits.max), num(limits.smallest_normal))
    return [r.text for r in explain(layer, fmt, layer.producers)]


# ---------------------------------------------------------------- the run's status


def status_line(report: Report) -> str | None:
    """"Status <status in words>: <reason>" when the run did not simply complete (as report.html says it)."""
    if not report.reason and report.status in (None, RunStatus.COMPLETE):
        return None
    return f"Status {str(report.status).replace('_', ' ')}" + (f": {report.reason}" if report.reason else "")


# ---------------------------------------------------------------- inputs and files


def _dims(dims: tuple) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


def shapes_text(report: Report) -> str | None:
    """The dynamic inputs' shapes as the samples ran them, against the model's declaration ("x: 1x3x48x192
    (the model declares ?x3x?x?)"); None when no input is dynamic."""
    parts = []
    for s in report.search.input_shapes:
        if not s.dynamic:
            continue
        ran = _dims(s.opt) if not s.varies else f"{_dims(s.min)} to {_dims(s.max)} ({_opt_text(s)})"
        parts.append(f"{shown(s.name)}: {ran} (the model declares {_dims(s.declared)})")
    return "; ".join(parts) or None


def _opt_text(s) -> str:
    """Which shape of a range the TensorRT commands optimize for (`--optShapes`), and why: "1x3x48x160 in 7 of 20
    samples, the most common: the engine's opt shape"."""
    held = f" in {s.opt_samples} of {s.samples} samples, the most common" if s.samples else ", the most common"
    return f"{_dims(s.opt)}{held}: the engine's opt shape"


def shapes_warning(report: Report) -> str | None:
    """A warning when the samples' shapes are far from the model's use (`graph.shapes.ShapeConcern`): polygraphy's
    1x1 placeholders for dynamic dimensions, or an image a few pixels wide. None when nothing says so."""
    from precision_doctor.graph.shapes import ShapeConcern

    worried = [s for s in report.search.input_shapes if s.concern is not None]
    if not worried:
        return None
    s = worried[0]
    name = shown(s.name)
    if s.concern == ShapeConcern.PLACEHOLDER:
        why = (f"every sample gives input '{name}' the shape {_dims(s.max)}, while the model leaves its dimensions "
               f"{_dims(s.declared)} open: 1 is the placeholder polygraphy (and precision-doctor's generated samples) "
               "put in an open dimension")
    else:
        why = (f"every sample gives the image input '{name}' at most {_dims(s.max)} pixels (the model declares "
               f"{_dims(s.declared)}), far from any image it is used on")
    base = report.analysis.baseline
    said = (f' "The whole model in {precision_name(report)} meets the tolerance" is about these inputs only.'
            if base is not None and base.passed else "")
    more = f" ({counted(len(worried) - 1, 'more input')} alike)" if len(worried) > 1 else ""
    example = ",".join(str(d) if d is not None else ("1" if i == 0 else "?") for i, d in enumerate(s.declared))
    return (f"WARNING: {why}{more}. Low-precision errors depend on the inputs' size, so this verdict says little about "
            f"real inputs.{said} Give samples of your data (--inputs), or their shape (--input-shapes "
            f"{name}:[{example}] with your sizes for ?).")


def model_file_sentence(report: Report) -> str | None:
    """How the run directory's commands reach the model: model.onnx, a relative link or a copy; None otherwise."""
    link = report.model.link if report.model is not None else None
    if link == "symlink":
        return "model.onnx here is a relative symbolic link to your model (nothing copied): keep the two where they are."
    if link == "copy":
        return "model.onnx here is a copy of your model (this file system takes no symbolic links)."
    return None


# ---------------------------------------------------------------- compare


def divergence_text(tensor: str | None, node: str | None, folded_into: str | None = None) -> str:
    """The first diverging tensor, quoted, and the node that computes it: "'848' (from node Conv_41)" (tensor names
    are often bare numbers); a node folded into another (`folded_into`: a BatchNormalization into its Conv) is named
    as what runs: "(from node Conv_41, BatchNormalization_42 folded into it)"."""
    if folded_into and node:
        return f"'{tensor or '?'}' (from node {folded_into}, {node} folded into it)"
    return f"'{tensor or '?'}'" + (f" (from node {node})" if node else "")


def folded_host(rows: Iterable[Layer] | Iterable[Any], node: str | None) -> str | None:
    """The node `node` is folded into (a layer row's `folded_into`), if any."""
    return next((r.folded_into for r in rows if r.name == node), None) if node else None


def compare_verdict(analysis: Analysis, tol: Tolerance, notes: Iterable[EmulationNote] = (),
                    floor: RoundingFloor | None = None) -> str:
    """`compare`'s verdict: PASS or FAIL of the emulated low-precision model; a PASS resting on nodes the emulator
    does not model on a GPU (`notes`) says so, and a tolerance tighter than the format can represent at the outputs
    (`floor`) is said after it."""
    text = _compare_verdict(analysis, tol, notes)
    finding = floor_finding(floor, tol) if floor is not None else None
    if finding is None:
        return text
    advice = floor_advice(floor, tol)
    return f"{text}. {finding}: no answer that leaves an output's node in {floor.precision.upper()} can pass." + (
        f" {advice}" if advice else "")


def _compare_verdict(analysis: Analysis, tol: Tolerance, notes: Iterable[EmulationNote]) -> str:
    worst = max(analysis.verdict.items(), key=lambda kv: (not kv[1].passed, kv[1].max_abs), default=None)
    node = analysis.first_divergence_node
    where = (f"; first diverging tensor: {divergence_text(analysis.first_divergence, node, folded_host(analysis.layers, node))}"
             if analysis.first_divergence else "")
    if analysis.passed:
        caveat = notes_clause(notes, analysis.precision)
        lead = f"PASS on the emulator ({caveat}: confirm on the GPU)" if caveat else "PASS"
        return f"{lead}: all outputs within the tolerance ({tolerance_text(tol)}){where}"
    name, c = worst
    own = tol.for_output(name)
    return (
        f"FAIL: output '{name}' max abs err {fmt_3g(c.max_abs)}, max rel err {fmt_3g(c.max_rel)}, "
        f"{c.mismatches} of {c.size} elements outside atol={own.atol:g} rtol={own.rtol:g}{where}"
    )


# ---------------------------------------------------------------- the batch


def row_brief(row: SummaryRow) -> str:
    """A finished model of a batch in brief, as the CLI prints it: "(3 node(s) in FP32, 12.5% of FLOPs, 40
    evaluations)"; "" without an answer."""
    if row.fallback_size is None:
        return ""
    share = fmt_share(row.fp32_flop_share)
    return f"({row.fallback_size} node(s) in FP32, {share} of FLOPs, {row.evaluations} evaluations)"
