"""report.md from the typed Report: one function per section, as html.py's; the sentences are wording.py's."""

from __future__ import annotations

from typing import Any

from precision_doctor.measure.tolerance import OutputCheck, Tolerance
from precision_doctor.render.files import artifact_title
from precision_doctor.render.layers import FOLDED_NOTE, layers_by_name, top_offenders
from precision_doctor.render.numbers import counted, fmt, fmt_flops, fmt_pct, fmt_time
from precision_doctor.render.pricing import markdown_lines as pricing_lines
from precision_doctor.render.sections import checks as checks_section
from precision_doctor.render.sections import next_steps as next_steps_section
from precision_doctor.render.sections import verdict as verdict_section
from precision_doctor.render.sections.markdown import lines as section_lines
from precision_doctor.render.target import target_lines
from precision_doctor.render.tensorrt import (
    engine_sentence,
    knobs_sentence,
    markdown_sections,
    named_onnx_sentence,
    trt_check_sentence,
)
from precision_doctor.render.wording import (
    code,
    folded_host,
    lowp_multiple,
    margin_words,
    model_file_sentence,
    output_run_labels,
    over_margin_share,
    precision_name,
    samples_cell,
    shapes_text,
    shapes_warning,
    tolerance_text,
    why,
    within_but_over_margin,
)
from precision_doctor.results.emit import LABELS as COMMAND_TITLES
from precision_doctor.results.report import ModelInfo, Report

MAX_TRAJECTORY_ROWS = 40


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
    sections = (_summary, _settings, _next_steps, _fallback, target_lines, markdown_sections, _outputs, _first_divergence,
                _commands, _top_offenders, _search, _artifacts, pricing_lines)
    return "\n".join(line for section in sections for line in section(report)).rstrip() + "\n"


def _summary(report: Report) -> list[str]:
    """The title, the verdict with its headline, warnings, and one bullet per fact of the run."""
    model = report.model or ModelInfo(path="?")
    prec = precision_name(report)
    L = [f"# precision-doctor report: {code(model.path)}", ""]
    L += section_lines(verdict_section.build(report))
    if (warning := shapes_warning(report)) is not None:
        L += [f"> **{warning}**", ""]
    if report.reason:
        L += [f"> Status `{report.status}`: {report.reason}", ""]
    memo = report.search.memo_hits
    memo_txt = f" ({memo} answered from the memo)" if memo else ""
    t = report.search.timing
    took = (f"in **{fmt_time(t.search_s)}**" + ("" if t.time_budget_s is None else f" (time budget {fmt_time(t.time_budget_s)})")
            + f"; the whole run {fmt_time(report.search.elapsed_s)} ({fmt_time(t.before_search_s)} before the search: loading, "
            f"capture and analysis; {fmt_time(t.after_search_s)} after it: the fixed capture, artifacts and report)"
            if t is not None else f"(the whole run: {fmt_time(report.search.elapsed_s)})")
    L += [
        f"- Search: **{counted(report.search.evaluations, 'evaluation')}**{memo_txt} {took}, "
        f"strategy `{report.search.strategy}`, cost `{report.search.cost}`, backend `{report.search.backend}`.",
    ]
    if report.answer.fallback_size and report.search.one_minimal_checked is not None:
        L.append("- Every member is needed: removing any one of them was evaluated and fails." if
                 report.search.one_minimal_checked else "- Whether every member is needed was not checked against the "
                 f"final set (it follows if adding {prec} nodes never reduces the error).")
    if report.promise.held_out_choice is not None:
        L.append(f"- Held out: {report.promise.held_out_choice.reason}.")
    L += section_lines(checks_section.build(report))
    for line in (trt_check_sentence(report), engine_sentence(report), knobs_sentence(report)):
        if line:
            L.append(f"- **{line}**" if line.startswith("WARNING") else f"- {line}")
    base = report.analysis.baseline
    if base is not None:
        m = lowp_multiple(report)
        if not base.passed and within_but_over_margin(report, m):
            L.append(f"- Everything in {prec} (baseline): meets the tolerance ({over_margin_share(report, m)}x) on the "
                     f"search samples it ran (up to the first that failed), but is above {margin_words(report)}.")
        else:
            L.append(f"- Everything in {prec} (baseline): {'passes' if base.passed else 'fails'} the tolerance.")
    a = report.analysis
    if a.first_divergence_node or a.first_divergence:
        host = folded_host(a.layers, a.first_divergence_node)
        folded = f" ({code(a.first_divergence_node)} folded into it)" if host else ""
        L.append(f"- First divergence in {prec}: {code(host or a.first_divergence_node or a.first_divergence)}{folded}.")
    L.append("")
    return L


def _settings(report: Report) -> list[str]:
    """The run's settings as a table: model, hash, shapes, precision, tolerance, samples, status, creation."""
    model = report.model or ModelInfo(path="?")
    limits = report.analysis.format_limits
    L = ["| Setting | Value |", "| --- | --- |"]
    L.append(
        f"| Model | {code(model.path)}: {model.nodes} nodes, {model.candidates} candidates, "
        f"{fmt_flops(model.total_flops)} |"
    )
    if model.hash:
        L.append(f"| Model hash | {code(model.hash)} |")
    if (linked := model_file_sentence(report)) is not None:
        L.append(f"| Model in this directory | {_cell(linked)} |")
    if (shapes := shapes_text(report)) is not None:
        L.append(f"| Input shapes | {_cell(shapes)} |")
    L.append(
        f"| Precision | {precision_name(report)} (max {fmt(limits.max)}, smallest normal {fmt(limits.smallest_normal)}) |"
    )
    L.append(f"| Tolerance | {_tolerance_text(report.search.tolerance)} |")
    L.append(f"| Samples | {_cell(samples_cell(report))} |")
    L.append(f"| Status | `{report.status}` |")
    tool = f"{report.invocation.tool} {report.invocation.version}".strip()
    L.append(f"| Created | {report.invocation.created or '?'} by {tool} |")
    L.append("")
    return L


def _next_steps(report: Report) -> list[str]:
    return section_lines(next_steps_section.build(report))


def _fallback(report: Report) -> list[str]:
    """The FP32 fallback nodes, each with its op, errors and why."""
    fallback = [str(n) for n in report.answer.fallback_nodes]
    by_name = layers_by_name(report)
    L = [f"## FP32 fallback nodes ({len(fallback)})", ""]
    if not fallback:
        if report.answered:
            return L + [f"None: the answer keeps every candidate node in {precision_name(report)}.", ""]
        return L + ["None (no passing set was found).", ""]
    rows = []
    for i, name in enumerate(fallback, 1):
        lay = by_name.get(name)
        rows.append(
            [
                i,
                code(name),
                _cell(lay.op_type if lay else "?"),
                fmt(lay.local_rel_l2 if lay else None),
                f"{fmt(lay.lowp_rel_l2 if lay else None)} → {fmt(lay.fixed_rel_l2 if lay else None)}",
                fmt(lay.ref_absmax if lay else None),
                _cell("; ".join(why(lay, report)) if lay else "no per-layer data"),
            ]
        )
    L += _table(["#", "Node", "Op", "Local error", "Error before → after", "Output abs max", "Why"], rows, "rlllrrl")
    L.append("")
    L.append(f"FP32 share of FLOPs: {fmt_pct(report.answer.fp32_flop_share)}. Errors are relative L2 against FP32.")
    L.append("")
    return L


def _outputs(report: Report) -> list[str]:
    """Each output's check: the baseline (everything low precision), the answer, the held-out samples."""
    L = ["## Outputs", ""]
    outs = report.checks.outputs
    base_outs = report.analysis.baseline.outputs if report.analysis.baseline is not None else {}
    val_outs = report.promise.validation.outputs if report.promise.validation is not None else {}
    names = list(dict.fromkeys([*base_outs, *outs, *val_outs]))
    base_label, fixed_label, held_label = output_run_labels(report)
    if names:
        rows = []
        for name in names:
            if name in base_outs:
                rows.append(_check_row(f"{code(name)} {base_label}", base_outs[name]))
            if name in outs:
                rows.append(_check_row(f"{code(name)} {fixed_label}", outs[name]))
            if name in val_outs:
                rows.append(_check_row(f"{code(name)} {held_label}", val_outs[name]))
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
    fd_node, fd_tensor = report.analysis.first_divergence_node, report.analysis.first_divergence
    if not (fd_node or fd_tensor):
        return L + [f"No tensor left the tolerance with everything in {prec}, or it was not recorded.", ""]
    s = f"With everything in {prec}, the first tensor out of tolerance (in topological order) is {code(fd_tensor or '?')}"
    host = folded_host(report.analysis.layers, fd_node)
    s += (f", produced by {code(host)} ({code(fd_node)} folded into it)." if host else
          f", produced by {code(fd_node)}." if fd_node else ".")
    lay = layers_by_name(report).get(str(fd_node)) if fd_node else None
    if lay:
        s += f" ({_cell(lay.op_type)}; " + "; ".join(why(lay, report)) + ".)"
    return L + [s, ""]


def _commands(report: Report) -> list[str]:
    cmds = report.answer.commands
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
    by_name = layers_by_name(report)

    def fp32(t) -> str:  # a folded pair: which of its two nodes the answer keeps in FP32
        kept = [n for n in (t.name, t.folded) if n and n in by_name and by_name[n].fallback]
        if not kept:
            return ""
        return "**FP32**" if len(kept) == (2 if t.folded else 1) else "**FP32**: " + code(kept[0])

    rows = [
        [
            fmt(t.row.rank),
            code(t.name) + (f" ({code(t.folded)} folded in)" if t.folded else ""),
            _cell(t.op),
            fmt(t.row.score),
            fmt(t.row.local_rel_l2),
            fmt(t.row.lowp_rel_l2),
            fmt(t.row.fixed_rel_l2),
            fmt(t.row.ref_absmax),
            fmt_pct(t.row.frac_above_max),
            fmt_pct(t.row.frac_below_normal, 1),
            fp32(t),
        ]
        for t in top
    ]
    head = ["Rank", "Node", "Op", "Score", "Local", "Before", "After", "Abs max", "> max", "< normal", ""]
    L += _table(head, rows, "rllrrrrrrrl")
    folded = sum(1 for t in top if t.folded)
    L += ["", f"Showing {len(top)} of {len(report.analysis.layers)} layers; the full table is in the HTML report."]
    return L + ([FOLDED_NOTE.format(rows=counted(folded, "row"))] if folded else []) + [""]


def _search(report: Report) -> list[str]:
    """The search's trajectory: its first 10 and last evaluations where there are more than `MAX_TRAJECTORY_ROWS`."""
    traj = report.search.trajectory
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
                    code(t.worst_output) if t.worst_output else "—",
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
    arts = report.answer.artifacts
    if arts:
        L += ["## Artifacts", ""]
        L += [f"- {code(path)}: {artifact_title(key)}" for key, path in arts.items() if path]
        L.append("")
    unsafe = model.unsafe_names
    renamed = [n for n in model.renamed_nodes if n not in unsafe]
    if renamed:
        listed = ", ".join(code(n) for n in renamed[:20]) + (", …" if len(renamed) > 20 else "")
        were = "was" if len(renamed) == 1 else "were"
        L += [f"Note: {counted(len(renamed), 'node')} had missing or duplicate names and {were} renamed: {listed}"]
        L.append("")
    if unsafe:
        listed = ", ".join(f"{code(new)} (was {code(old)})" for new, old in list(unsafe.items())[:20]) \
            + (", …" if len(unsafe) > 20 else "")
        L += [f"Warning: {counted(len(unsafe), 'node name')} held control characters or bytes that are not UTF-8, which "
              f"scripts and lists cannot carry safely, and {'was' if len(unsafe) == 1 else 'were'} renamed (shown escaped): "
              f"{listed}"]
        L.append("")
    return L
