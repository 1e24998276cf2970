"""report.md from the typed Report, plus the number/verdict helpers the HTML renderer shares."""

from __future__ import annotations

import math
from typing import Any

from precision_doctor.backends.base import check_only
from precision_doctor.measure.analysis import INPUT_SENSITIVITY
from precision_doctor.measure.tolerance import OutputCheck, Tolerance
from precision_doctor.outcome import RunStatus
from precision_doctor.render.commands import rerun_command, resume_command
from precision_doctor.render.pricing import cost_sentence
from precision_doctor.render.pricing import markdown_lines as pricing_lines
from precision_doctor.render.tensorrt import (
    engine_sentence,
    knobs_sentence,
    markdown_sections,
    named_onnx_sentence,
    trt_check_sentence,
)
from precision_doctor.render.wording import (
    answers_sentence,
    bound_sentence,
    decided_sentence,
    fmt,
    fmt_flops,
    fmt_pct,
    fmt_time,
    headline_text,
    held_out_sentence,
    model_file_sentence,
    not_holding,
    num,
    precision_name,
    rounds_sentence,
    shapes_text,
    shapes_warning,
    tolerance_text,
    verdict,
)
from precision_doctor.results.emit import LABELS
from precision_doctor.results.report import Layer, ModelInfo, Report

TOP_OFFENDERS = 15
RUN_FROM_HERE = ("Run these commands from the directory that holds this report: they name its files (fixed.onnx, "
                 "inputs.json, model.onnx) and your model and inputs by paths relative to it.")
MAX_TRAJECTORY_ROWS = 40

COMMAND_TITLES = LABELS  # each command's release and what it reads and writes (results/emit.py)

# what analysis.py's `input_sensitive` means
INPUT_SENSITIVE_WHY = (f"its error comes from its rounded inputs (local error > {INPUT_SENSITIVITY:g}x the rounding of "
                       "its own output)")

ARTIFACT_TITLES = {
    "fixed_onnx": "the fixed model: your model in low precision with the FP32 nodes kept in FP32 (Casts only at "
                  "the borders of FP32 regions); build it with TensorRT 11, or strongly typed on 10",
    "activations": "every layer's activations in FP32, in low precision and after the fix (HDF5), for your own "
                   "analysis",
    "activations_summary": "the per-layer analysis (error statistics of every tensor) and the graph outputs in FP32, in "
                           "low precision and after the fix (HDF5; --keep-activations all keeps every layer's "
                           "activations)",
    "layers_csv": "the per-layer error table (one row per node: local error, rounding, propagated error, ranges)",
    "layers_json": "the same per-layer table with per-tensor statistics, as JSON",
    "checkpoint": "every evaluation of the search, one JSON line each (what --resume continues from)",
    "layer_precisions": "the FP32 nodes as trtexec's --layerPrecisions entries, one per line",
    "trtexec": "a script that builds the fixed engine with trtexec; it detects TensorRT 10 or 11 (TRT_MAJOR overrides)",
    "tensorrt_rtx": "a script that builds the fixed engine with TensorRT-RTX ahead of time, without a GPU",
    "inputs": "the samples the capture ran on (at most capture.max_samples), in polygraphy's --load-inputs format",
    "reference_outputs": "the FP32 reference outputs of those samples, in polygraphy's --load-outputs format",
    "autocast_nodes": "the FP32 nodes for ModelOpt AutoCast's --nodes_to_exclude",
    "report_md": "this report as Markdown",
    "report_html": "this report as one self-contained page with plots and a sortable layer table",
    "named_onnx": "the model with the node names this report uses (the tool named unnamed nodes); every command "
                  "reads it",
    "model": "your model, as the commands here name it (a relative symbolic link to it, or a copy: see the model's "
             "row above)",
    "trtexec_io": "the samples and their FP32 reference outputs as raw files, for trtexec's accuracy check of the "
                  "engine (TensorRT 11)",
    "ort_node_block_list": "the FP32 nodes as a JSON list: onnxconverter-common's node_block_list",
    "engine": "the fixed TensorRT engine built from fixed.onnx",
    "knob_checkpoints": "the knob search's evaluations, one JSON-lines file per configuration",
}


def artifact_title(key: str) -> str:
    """What an artifact of report.json's `artifacts` is, in words."""
    return ARTIFACT_TITLES.get(key, key.replace("_", " "))


def layers_in_order(report: Report) -> list[Layer]:
    """The report's layer rows in topological order."""
    return sorted(report.layers, key=lambda lay: num(lay.index))


# ---------------------------------------------------------------- verdict and reasons


def next_steps(report: Report) -> list[tuple[str, str | None]]:
    """What to do next, in order: (what and why, the command or None), the last one the command that runs this
    diagnosis again. Commands run from the run directory (the one holding this report): they use paths relative to
    it (render/commands.py)."""
    steps = _steps(report)
    if report.invocation is not None and not report.interrupted:
        steps.append(("To run this diagnosis again (after changing the model or the samples; add flags for other "
                      "settings), into a new directory beside this one:", rerun_command(report, "again")))
    return steps


def _steps(report: Report) -> list[tuple[str, str | None]]:
    cmds = report.commands
    if report.status in (RunStatus.INTERRUPTED, RunStatus.BUDGET_EXHAUSTED):
        steps = [("The search did not finish. Continue it where it stopped (its settings are recorded in the run "
                  "directory; a larger --max-evaluations or --time-budget lets it go further):",
                  resume_command(report))]
        return steps if not report.passed else steps + _build_steps(report, cmds)
    if not_holding(report):
        margin = round(min(0.9, float(report.margin or 0.0) + 0.1), 2)
        h = report.expected_headroom
        why = "fails on samples the search did not see" if h.failing_copies or h.failing_held_out else \
            "is predicted to exceed it on some new inputs (from how much its share varies between samples)"
        return [(f"The answer meets the tolerance on the searched samples but {why}: "
                 "give more --inputs of your data (from 4 on, some are held out to check it), or search with more room "
                 "to spare (a larger --margin, more --augment copies):",
                 rerun_command(report, f"margin{margin:g}", {"search.margin": margin}))]
    if not report.passed:
        base = report.baseline
        if base is not None and not base.passed and report.status == RunStatus.NO_SOLUTION:
            return [("Even with every candidate node in FP32 the outputs miss the reference: the tolerance is "
                     "tighter than FP32 itself reproduces (or the model is nondeterministic). Check the reference "
                     "(--reference-outputs) or loosen --atol/--rtol, then run diagnose again.", None)]
        return [("No set met the tolerance. Loosen --atol/--rtol (or use --check-error-stat mean) if your task "
                 "allows it, give more representative --inputs, or try --strategy linear.", None)]
    return _build_steps(report, cmds)


def _build_steps(report: Report, cmds: dict[str, str]) -> list[tuple[str, str | None]]:
    steps: list[tuple[str, str | None]] = []
    check = (cmds.get("polygraphy") or "").splitlines()
    if check:
        steps.append(("Check the fixed model on the target GPU with TensorRT, from this report's directory: "
                      "polygraphy runs it there and compares its outputs with the FP32 reference at your tolerance.",
                      check[-1]))
    if cmds.get("trtexec_trt11"):
        steps.append(("Build the engine with TensorRT 11 (strongly typed: fixed.onnx carries the precisions):",
                      cmds["trtexec_trt11"]))
    if cmds.get("trtexec_trt10"):
        steps.append(("Or with TensorRT 10 (the original model, FP32 layers pinned); ./trtexec.sh picks the right "
                      "build for the TensorRT installed (PD_STRONGLY_TYPED=1 builds fixed.onnx on 10.x too):",
                      "./trtexec.sh"))
    if cmds.get("tensorrt_rtx") or "tensorrt_rtx" in report.artifacts:
        steps.append(("Or with TensorRT-RTX, ahead of time without a GPU (engines run on Ampere and newer, not on "
                      "compute capability 9.0):", "./tensorrt_rtx.sh"))
    c = report.confirm
    if c is not None and c.passed and not check_only(c.backend):
        steps.append((f"The answer is already confirmed on {c.backend}; confirm it on your deployment GPU too if "
                      "that is another one.", None))
    else:
        steps.append(("The emulator can underestimate a GPU's FP16 error: let precision-doctor confirm (and repair) "
                      "the answer on the target GPU itself, with the same inputs and tolerance:",
                      rerun_command(report, "gpu", {"backends.confirm_backend": "ort-cuda"})))
    return steps


def output_run_labels(report: Report) -> tuple[str, str]:
    """Labels of the answer's output checks and of the held-out ones (which may be of the searched
    answer, when the confirmation on another backend changed it)."""
    c, k = report.confirm, report.knobs
    fixed = f"fixed (on {c.backend}, all samples)" if c is not None and c.passed else "fixed (search samples)"
    if k is not None and k.changed_answer:
        fixed = f"fixed (on {k.backend} with knobs {k.best}, all samples)"
    held = "searched answer (validation)" if report.validation is not None and report.validation.of \
        else "fixed (validation)"
    return fixed, held


def _q(v: Any) -> Any:
    """`v`, or "?" where it was not recorded."""
    return "?" if v is None else v


def confirm_sentence(report: Report) -> str | None:
    """What carrying the searched answer over to the confirm backend did; None when not asked for."""
    c = report.confirm
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
                f"nodes) {held}; the answer is {len(report.fallback_nodes)} nodes.")
    head = f"Confirmed on {c.backend} over {_q(c.samples)} samples: the searched answer ({searched} nodes) {held}"
    if not c.passed:
        return head + f"; no passing set was found there ({_q(c.evaluations)} evaluations)."
    final = len(report.fallback_nodes)
    kept = "" if c.pruned_searched is not False else (
        f" (its own {searched} members were kept, not pruned there: each removal tried is a new session on "
        f"{c.backend}{'' if c.searched_answer_passed else '; only what was added there was pruned'})")
    return head + f"; after {_q(c.evaluations)} evaluations there the answer is {final} nodes{kept}."


def generalization_sentence(report: Report) -> str | None:
    """How the answer fares on samples the search did not see (pipeline/probe.py), and what that allows
    to be said: "holds" only on held-out samples of the user's data; None when no probe ran."""
    h = report.expected_headroom
    if h is None or not h.unseen:
        return None
    copies = f" with {h.search_copies} perturbed copies" if h.search_copies else ""
    held = f", {h.held_out} held out {'of your data' if h.held_out_from_user else '(generated)'}" if h.held_out else ""
    text = (f"Checked on {h.searched + h.unseen} samples ({h.searched} searched{copies}, {h.perturbed_copies} fresh "
            f"perturbed copies{held})")
    unseen = f"{h.unseen} unseen ones"
    if h.backend:  # the confirm backend checked the held-out samples and ran the fresh copies
        text += f"; the fresh copies run on {h.backend}, which also confirmed the answer on every other sample"
        unseen = f"{h.perturbed_copies} fresh copies"
    if h.share_unseen is not None and h.headroom is not None:
        text += (f": the largest share of the tolerance on the {unseen} is {100 * h.share_unseen:.1f}%, "
                 f"headroom {100 * h.headroom:.1f}%")
    if h.predicted_share is not None and h.risk is not None:
        text += (f"; from their spread, a new input is predicted to use up to {100 * h.predicted_share:.0f}% of the "
                 f"tolerance (exceeded with probability {100 * h.risk:g}%)")
    if h.researched:
        first = "" if h.first_answer_size is None else f" ({h.first_answer_size} nodes"
        if first and h.first_predicted_share is not None and h.first_predicted_share > 1.0:
            first += f", a new input predicted to use up to {100 * h.first_predicted_share:.0f}% of the tolerance"
        text += (f". The first answer{first + ')' if first else ''} was predicted not to hold; a second search at margin "
                 f"{h.research_margin or 0:g} with the unseen samples it missed found this one")
        if h.perturbed_copies:
            text += ", checked on fresh copies no search had seen"
    if not h.holds:
        fails = (f"fails on {h.failing_copies} perturbed cop{'y' if h.failing_copies == 1 else 'ies'} and "
                 f"{h.failing_held_out} held-out sample(s)") if h.failing_copies or h.failing_held_out else \
            "is predicted to exceed the tolerance on some new inputs"
        return (text + f". The answer meets the tolerance on the searched samples but {fails}: it is predicted NOT "
                "to hold on new inputs. Give more --inputs (some are then held out) or search with a larger --margin.")
    if not (h.held_out and h.held_out_from_user):
        text += ("; not validated on your data (no held-out sample of it): the perturbed copies predict the answer "
                 "holds, give 4 or more --inputs (or --validate-inputs) to check it on your data")
    return text + "."


def certified_sentence(report: Report) -> str | None:
    """Which backend certified the final answer, in words (report.json's `certified_by`); None without one."""
    c = report.certified_by
    if c is None:
        return None
    where = {"confirmation": "confirmation", "validation": "search and held-out samples", "search": "search",
             "knobs": "knob search"}.get(c.how, c.how)
    if c.backend == "emulate":
        who = f"the emulator (`{c.rules or 'standard'}` rules)"
    else:
        who = f"`{c.backend}`" + (" (real low precision on the GPU)" if c.gpu else "")
    text = f"Certified by {who}: the final answer passes there on all {c.samples} samples ({where})"
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
    for n in report.emulation_notes:
        shown = ", ".join(_code(x) for x in n.nodes)
        more = f" and {n.count - len(n.nodes)} more" if n.count > len(n.nodes) else ""
        what = f"{n.count} {n.op_type} node(s) ({shown}{more})" if n.op_type else f"{n.count} node(s)"
        out.append(f"Not modelled ({n.kind}): {what}: {n.detail}.")
    return out


def headroom_sentence(report: Report) -> str | None:
    """How much of the tolerance a passing answer uses (search or held-out samples, the larger), with
    advice when little is left; None when not recorded."""
    used = report.tolerance_used
    confirm = report.confirm
    keys = ("confirm",) if confirm is not None else ("search", "validation")
    shares = [v for v in (num(getattr(used, k) if used else None) for k in keys) if not math.isnan(v)]
    if not report.passed or not shares:
        return None
    where = f" on {confirm.backend}" if confirm is not None else ""
    text = f"The answer uses {100 * max(shares):.1f}% of the tolerance{where}"
    margin = float(report.margin or 0.0)
    if margin:
        text += f" (searched with a margin of {100 * margin:g}%)"
    if max(shares) > 0.9 and not margin:
        text += (": little to spare, other hardware may tip it over (`--margin` searches for room to spare, "
                 "`--confirm-backend` checks on the target)")
    return text + "."


def why(layer: Layer, report: Report) -> list[str]:
    """Why a layer hurts in low precision, in words (measure/explain.py, from its recorded facts)."""
    from precision_doctor.measure.explain import Limits, explain

    limits = report.format_limits
    fmt = Limits(precision_name(report), num(limits.max), num(limits.smallest_normal))
    return [r.text for r in explain(layer, fmt, layer.producers)]


def layers_by_name(report: Report) -> dict[str, Layer]:
    return {str(lay.name): lay for lay in report.layers}


def top_offenders(report: Report, n: int = TOP_OFFENDERS) -> list[Layer]:
    """Layers by rank (1 = worst); layers without a rank last, by score."""

    def key(lay: Layer) -> tuple[float, float]:
        r = num(lay.rank)
        s = num(lay.score)
        return (r if math.isfinite(r) else math.inf, -s if not math.isnan(s) else math.inf)

    return sorted(report.layers, key=key)[:n]


# ---------------------------------------------------------------- markdown


def _code(s: Any) -> str:
    """Inline code safe inside a GFM table cell."""
    text = str(s).replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]], align: str | None = None) -> list[str]:
    align = align or "l" * len(head)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines


def _check_row(label: str, oc: OutputCheck) -> list[Any]:
    ok = oc.passed
    mark = "—" if ok is None else ("pass" if ok else "**FAIL**")
    return [
        label,
        mark,
        fmt(oc.max_abs),
        fmt(oc.mean_abs),
        fmt(oc.max_rel),
        fmt(oc.mean_rel),
        fmt(oc.cosine, 8),
        f"{oc.mismatches} / {oc.size}",
    ]


def _tolerance_text(tol: Tolerance) -> str:
    return tolerance_text(tol, code="`")


def render_markdown(report: Report) -> str:
    """report.md: verdict first, then fallback nodes, outputs, divergence, commands, offenders, search."""
    sections = (_summary, _settings, _next_steps, _fallback, markdown_sections, _outputs, _first_divergence, _commands,
                _top_offenders, _search, _artifacts, pricing_lines)
    return "\n".join(line for section in sections for line in section(report)).rstrip() + "\n"


def _summary(report: Report) -> list[str]:
    """The title, the verdict with its headline and cost, warnings, and one bullet per fact of the run."""
    model = report.model or ModelInfo(path="?")
    prec = precision_name(report)
    label, _ = verdict(report)
    L = [f"# precision-doctor report: {_code(model.path)}", ""]
    cost = cost_sentence(report, with_share=False)
    L += [" ".join(x for x in (f"**Verdict: {label}.**", headline_text(report),
                               f"{cost[0].upper()}{cost[1:]}" if cost and report.passed else None) if x), ""]
    if (warning := shapes_warning(report)) is not None:
        L += [f"> **{warning}**", ""]
    if report.reason:
        L += [f"> Status `{report.status}`: {report.reason}", ""]
    memo = report.memo_hits
    memo_txt = f" ({memo} answered from the memo)" if memo else ""
    L += [
        f"- Search: **{report.evaluations} evaluations**{memo_txt} in **{fmt_time(report.elapsed_s)}**, "
        f"strategy `{report.strategy}`, cost `{report.cost}`, backend `{report.backend}`.",
    ]
    if report.fallback_size and report.one_minimal_checked is not None:
        L.append("- Every member is needed: " + (
            "checked (removing any one of them was evaluated and fails)." if report.one_minimal_checked else
            "not checked for every member against the final set (it holds if adding FP16 nodes never reduces the error)."))
    if report.validation is not None:
        L.append(f"- Validation: {held_out_sentence(report)}")
    else:
        L.append("- Validation: not run (no held-out samples).")
    if report.held_out_choice is not None:
        L.append(f"- Held out: {report.held_out_choice.reason}.")
    for line in (bound_sentence(report), decided_sentence(report), rounds_sentence(report), answers_sentence(report)):
        if line:
            L.append(f"- {line}")
    for line in (generalization_sentence(report), confirm_sentence(report), certified_sentence(report),
                 headroom_sentence(report), *emulation_note_lines(report)):
        if line:
            L.append(f"- {line}")
    for line in (trt_check_sentence(report), engine_sentence(report), knobs_sentence(report)):
        if line:
            L.append(f"- **{line}**" if line.startswith("WARNING") else f"- {line}")
    base = report.baseline
    if base is not None:
        L.append(f"- Everything in {prec} (baseline): {'passes' if base.passed else 'fails'} the tolerance.")
    if report.first_divergence_node or report.first_divergence:
        L.append(f"- First divergence in {prec}: {_code(report.first_divergence_node or report.first_divergence)}.")
    L.append("")
    return L


def _settings(report: Report) -> list[str]:
    """The run's settings as a table: model, hash, shapes, precision, tolerance, samples, status, creation."""
    model = report.model or ModelInfo(path="?")
    limits = report.format_limits
    samples = report.samples
    L = ["| Setting | Value |", "| --- | --- |"]
    L.append(
        f"| Model | {_code(model.path)}: {model.nodes} nodes, {model.candidates} candidates, "
        f"{fmt_flops(model.total_flops)} |"
    )
    if model.hash:
        L.append(f"| Model hash | {_code(model.hash)} |")
    if (linked := model_file_sentence(report)) is not None:
        L.append(f"| Model in this directory | {_cell(linked)} |")
    if (shapes := shapes_text(report)) is not None:
        L.append(f"| Input shapes | {_cell(shapes)} |")
    L.append(
        f"| Precision | {precision_name(report)} (max {fmt(limits.max)}, smallest normal {fmt(limits.smallest_normal)}) |"
    )
    L.append(f"| Tolerance | {_tolerance_text(report.tolerance)} |")
    L.append(f"| Samples | {samples.search} search, {samples.validation} validation |")
    L.append(f"| Status | `{report.status}` |")
    tool = f"{report.tool} {report.version}".strip()
    L.append(f"| Created | {report.created or '?'} by {tool} |")
    L.append("")
    return L


def _next_steps(report: Report) -> list[str]:
    L = ["## Next steps", ""]
    for i, (text, cmd) in enumerate(next_steps(report), 1):
        L.append(f"{i}. {text}")
        if cmd:
            L += ["", "   ```bash", *(f"   {line}" for line in cmd.splitlines()), "   ```"]
    return L + ["", RUN_FROM_HERE, ""]


def _fallback(report: Report) -> list[str]:
    """The FP32 fallback nodes, each with its op, errors and why."""
    fallback = [str(n) for n in report.fallback_nodes]
    by_name = layers_by_name(report)
    L = [f"## FP32 fallback nodes ({len(fallback)})", ""]
    if not fallback:
        if report.passed:
            return L + [f"None: the model meets the tolerance with every candidate node in {precision_name(report)}.", ""]
        return L + ["None (no passing set was found).", ""]
    rows = []
    for i, name in enumerate(fallback, 1):
        lay = by_name.get(name)
        rows.append(
            [
                i,
                _code(name),
                _cell(lay.op_type if lay else "?"),
                fmt(lay.local_rel_l2 if lay else None),
                f"{fmt(lay.lowp_rel_l2 if lay else None)} → {fmt(lay.fixed_rel_l2 if lay else None)}",
                fmt(lay.ref_absmax if lay else None),
                _cell("; ".join(why(lay, report)) if lay else "no per-layer data"),
            ]
        )
    L += _table(["#", "Node", "Op", "Local error", "Error before → after", "Output abs max", "Why"], rows, "rlllrrl")
    L.append("")
    L.append(f"FP32 share of FLOPs: {fmt_pct(report.fp32_flop_share)}. Errors are relative L2 against FP32.")
    L.append("")
    return L


def _outputs(report: Report) -> list[str]:
    """Each output's check: the baseline (everything low precision), the answer, the held-out samples."""
    prec = precision_name(report)
    L = ["## Outputs", ""]
    outs = report.outputs
    base_outs = report.baseline.outputs if report.baseline is not None else {}
    val_outs = report.validation.outputs if report.validation is not None else {}
    names = list(dict.fromkeys([*base_outs, *outs, *val_outs]))
    fixed_label, held_label = output_run_labels(report)
    if names:
        rows = []
        for name in names:
            if name in base_outs:
                rows.append(_check_row(f"{_code(name)} baseline (all {prec})", base_outs[name]))
            if name in outs:
                rows.append(_check_row(f"{_code(name)} {fixed_label}", outs[name]))
            if name in val_outs:
                rows.append(_check_row(f"{_code(name)} {held_label}", val_outs[name]))
        L += _table(
            ["Output / run", "Check", "Max abs", "Mean abs", "Max rel", "Mean rel", "Cosine", "Mismatches"], rows, "llrrrrrr"
        )
    else:
        L.append("No output checks recorded.")
    L.append("")
    return L


def _first_divergence(report: Report) -> list[str]:
    prec = precision_name(report)
    L = ["## First divergence", ""]
    fd_node, fd_tensor = report.first_divergence_node, report.first_divergence
    if not (fd_node or fd_tensor):
        return L + [f"No tensor left the tolerance with everything in {prec}, or it was not recorded.", ""]
    s = f"With everything in {prec}, the first tensor out of tolerance (in topological order) is {_code(fd_tensor or '?')}"
    s += f", produced by {_code(fd_node)}." if fd_node else "."
    lay = layers_by_name(report).get(str(fd_node)) if fd_node else None
    if lay:
        s += f" ({_cell(lay.op_type)}; " + "; ".join(why(lay, report)) + ".)"
    return L + [s, ""]


def _commands(report: Report) -> list[str]:
    cmds = report.commands
    if not cmds:
        return []
    L = ["## Commands", ""]
    if named := named_onnx_sentence(report):
        L += [named, ""]
    for key, cmd in cmds.items():
        if not cmd:
            continue
        L += [f"{COMMAND_TITLES.get(key, key)}:", "", "```bash", str(cmd), "```", ""]
    return L


def _top_offenders(report: Report) -> list[str]:
    top = top_offenders(report)
    L = ["## Top offenders", ""]
    if not top:
        return L + ["No per-layer analysis recorded.", ""]
    rows = [
        [
            fmt(lay.rank),
            _code(lay.name),
            _cell(lay.op_type),
            fmt(lay.score),
            fmt(lay.local_rel_l2),
            fmt(lay.lowp_rel_l2),
            fmt(lay.fixed_rel_l2),
            fmt(lay.ref_absmax),
            fmt_pct(lay.frac_above_max),
            fmt_pct(lay.frac_below_normal, 1),
            "**FP32**" if lay.fallback else "",
        ]
        for lay in top
    ]
    head = ["Rank", "Node", "Op", "Score", "Local", "Before", "After", "Abs max", "> max", "< normal", ""]
    L += _table(head, rows, "rllrrrrrrrl")
    return L + ["", f"Showing {len(top)} of {len(report.layers)} layers; the full table is in the HTML report.", ""]


def _search(report: Report) -> list[str]:
    """The search's trajectory: its first 10 and last evaluations where there are more than `MAX_TRAJECTORY_ROWS`."""
    traj = report.trajectory
    L = ["## Search", ""]
    if traj:
        shown = traj if len(traj) <= MAX_TRAJECTORY_ROWS else traj[:10] + traj[-(MAX_TRAJECTORY_ROWS - 10) :]
        rows = []
        for i, t in enumerate(shown):
            if len(traj) > MAX_TRAJECTORY_ROWS and i == 10:
                rows.append(["…", f"{len(traj) - MAX_TRAJECTORY_ROWS} steps omitted", "", "", "", "", ""])
            rows.append(
                [
                    t.step,
                    _cell(t.phase),
                    t.size,
                    fmt(t.cost),
                    "pass" if t.passed else "fail",
                    _code(t.worst_output) if t.worst_output else "—",
                    fmt(t.max_abs),
                ]
            )
        L += _table(["Step", "Phase", "Size", "Cost", "Result", "Worst output", "Max abs"], rows, "rlrrllr")
    else:
        L.append("No evaluations recorded.")
    L.append("")
    return L


def _artifacts(report: Report) -> list[str]:
    """The files the run wrote, and the nodes it renamed (missing, duplicate or unsafe names)."""
    model = report.model or ModelInfo(path="?")
    L: list[str] = []
    arts = report.artifacts
    if arts:
        L += ["## Artifacts", ""]
        L += [f"- {_code(path)}: {artifact_title(key)}" for key, path in arts.items() if path]
        L.append("")
    unsafe = model.unsafe_names
    renamed = [n for n in model.renamed_nodes if n not in unsafe]
    if renamed:
        listed = ", ".join(_code(n) for n in renamed[:20]) + (", …" if len(renamed) > 20 else "")
        L += [f"Note: {len(renamed)} node(s) had missing or duplicate names and were renamed: {listed}"]
        L.append("")
    if unsafe:
        listed = ", ".join(f"{_code(new)} (was {_code(old)})" for new, old in list(unsafe.items())[:20]) \
            + (", …" if len(unsafe) > 20 else "")
        L += [f"Warning: {len(unsafe)} node name(s) held control characters or bytes that are not UTF-8, which "
              f"scripts and lists cannot carry safely, and were renamed (shown escaped): {listed}"]
        L.append("")
    return L
