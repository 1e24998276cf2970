"""report.md from report.json, plus the number/verdict helpers the HTML renderer shares."""

from __future__ import annotations

import math
from typing import Any

TOP_OFFENDERS = 15
MAX_TRAJECTORY_ROWS = 40

COMMAND_TITLES = {
    "trtexec_trt10": "TensorRT 10 (weakly typed: per-layer precisions)",
    "trtexec_trt11": "TensorRT 11 (strongly typed: the fixed ONNX carries the precisions)",
    "polygraphy": "Polygraphy: check the fixed model on the real backend",
    "polygraphy_trt10": "Polygraphy on TensorRT 10 with the same per-layer precisions",
    "autocast": "ModelOpt AutoCast with the same nodes excluded",
}

ARTIFACT_TITLES = {
    "fixed_onnx": "mixed-precision model (FP32 islands, Casts at the borders)",
    "activations": "captured per-layer activations",
    "layer_precisions": "per-node precisions, one per line",
    "trtexec": "trtexec build script",
    "report_md": "this report",
    "report_html": "interactive report with plots",
}


# ---------------------------------------------------------------- numbers


def num(v: Any) -> float:
    """A report number as float: "inf"/"-inf"/"nan" strings and None (-> nan) included."""
    if v is None or isinstance(v, bool):
        return float(v) if isinstance(v, bool) else math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def layers_in_order(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's layer rows in topological order."""
    return sorted(report.get("layers") or [], key=lambda lay: num(lay.get("index")))


def fmt(v: Any, digits: int = 3) -> str:
    """Compact number: "inf", "nan", "0", 0.0123, 1.23e-05, 65504."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    x = num(v)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    ax = abs(x)
    if 1e3 <= ax < 1e6:
        return f"{x:.0f}"
    if 1e-3 <= ax < 1e3:
        return f"{x:.{digits}g}"
    mant, _, exp = f"{x:.{max(digits - 1, 0)}e}".partition("e")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{exp}"


def fmt_pct(v: Any, digits: int = 2) -> str:
    """Fraction 0..1 as a percentage; tiny non-zero shares stay visible ("<0.01 %")."""
    x = num(v)
    if math.isnan(x):
        return "nan"
    if x == 0:
        return "0 %"
    p = 100 * x
    floor = 10.0**-digits
    if 0 < p < floor:
        return f"<{floor:g} %"
    return f"{p:.{digits}f} %"


def fmt_flops(v: Any) -> str:
    """FLOPs with an SI prefix."""
    x = num(v)
    if not math.isfinite(x):
        return fmt(x)
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} FLOP"


def fmt_time(v: Any) -> str:
    """Seconds as "0.42 s", "12.3 s", "4 min 05 s", "2 h 03 min"."""
    s = num(v)
    if not math.isfinite(s):
        return fmt(s)
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def precision_name(report: dict[str, Any]) -> str:
    return str(report.get("precision") or "low precision").upper()


def is_nonfinite(v: Any) -> bool:
    return not math.isfinite(num(v))


# ---------------------------------------------------------------- verdict and reasons


def verdict(report: dict[str, Any]) -> tuple[str, str]:
    """(label, kind) with kind one of "pass", "warn", "fail"."""
    status = report.get("status") or "complete"
    passed = bool(report.get("passed"))
    validation = report.get("validation")
    if status == "no_solution":
        return "NO SOLUTION", "fail"
    if status in ("interrupted", "budget_exhausted"):
        what = "interrupted" if status == "interrupted" else "budget exhausted"
        return (f"PASSED (search {what})", "warn") if passed else (f"INCOMPLETE ({what})", "fail")
    if not passed:
        return "FAILED", "fail"
    if validation and not validation.get("passed", True):
        return "PASSED ON SEARCH SAMPLES, FAILED VALIDATION", "warn"
    return "PASSED", "pass"


def verdict_sentence(report: dict[str, Any]) -> str:
    """One plain-text sentence saying what the run found."""
    prec = precision_name(report)
    size = int(report.get("fallback_size", len(report.get("fallback_nodes") or [])))
    cands = (report.get("model") or {}).get("candidates")
    of = f" of {cands} candidate" if cands is not None else ""
    share = fmt_pct(report.get("fp32_flop_share", 0.0))
    status = report.get("status") or "complete"
    if status == "no_solution":
        return f"No FP32 fallback set made the model meet the tolerance in {prec}."
    if not report.get("passed"):
        return f"The best fallback set found ({size}{of} nodes in FP32) does not meet the tolerance in {prec}."
    if size == 0:
        return f"The model meets the tolerance entirely in {prec}: no node needs FP32."
    lead = "The model meets the tolerance" if status == "complete" else "The best set so far meets the tolerance"
    nodes = "node" if size == 1 else "nodes"
    return f"{lead} in {prec} with {size}{of} {nodes} kept in FP32 ({share} of FLOPs)."


def output_run_labels(report: dict[str, Any]) -> tuple[str, str]:
    """Labels of the answer's output checks and of the held-out ones (which may be of the searched
    answer, when the confirmation on another backend changed it)."""
    c = report.get("confirm") or {}
    fixed = f"fixed (on {c['backend']}, all samples)" if c.get("passed") else "fixed (search samples)"
    held = "searched answer (validation)" if (report.get("validation") or {}).get("of") else "fixed (validation)"
    return fixed, held


def confirm_sentence(report: dict[str, Any]) -> str | None:
    """What carrying the searched answer over to the confirm backend did; None when not asked for."""
    c = report.get("confirm")
    if not c:
        return None
    searched = len(c.get("searched_answer") or [])
    if c.get("skipped"):
        return f"Not confirmed on {c.get('backend')}: {c['skipped']}."
    if c.get("passed") is None:
        return (f"Not confirmed on {c.get('backend')}: the confirmation stopped early ({c.get('status')}) after "
                f"{c.get('evaluations', '?')} evaluations; the answer is the searched one ({searched} nodes).")
    held = {True: "held as is", False: "failed there"}.get(c.get("searched_answer_passed"), "was not run there")
    head = f"Confirmed on {c.get('backend')} over {c.get('samples', '?')} samples: the searched answer ({searched} nodes) {held}"
    if not c.get("passed"):
        return head + f"; no passing set was found there ({c.get('evaluations', '?')} evaluations)."
    final = len(report.get("fallback_nodes") or [])
    return head + f"; after {c.get('evaluations', '?')} evaluations there the answer is {final} nodes."


def headroom_sentence(report: dict[str, Any]) -> str | None:
    """How much of the tolerance a passing answer uses (search or held-out samples, the larger), with
    advice when little is left; None when not recorded."""
    used = report.get("tolerance_used") or {}
    confirm = report.get("confirm") or {}
    keys = ("confirm",) if confirm else ("search", "validation")
    shares = [v for v in (num(used.get(k)) for k in keys) if not math.isnan(v)]
    if not report.get("passed") or not shares:
        return None
    where = f" on {confirm.get('backend')}" if confirm else ""
    text = f"The answer uses {100 * max(shares):.1f}% of the tolerance{where}"
    margin = float(report.get("margin") or 0.0)
    if margin:
        text += f" (searched with a margin of {100 * margin:g}%)"
    if max(shares) > 0.9 and not margin:
        text += (": little to spare, other hardware may tip it over (`--margin` searches for room to spare, "
                 "`--confirm-backend` checks on the target)")
    return text + "."


def why(layer: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """Short reasons a layer hurts in low precision, from its recorded facts."""
    prec = precision_name(report)
    limits = report.get("format_limits") or {}
    fmax, fmin = num(limits.get("max")), num(limits.get("smallest_normal"))
    out: list[str] = []
    local, rounding = num(layer.get("local_rel_l2")), num(layer.get("rounding_rel_l2"))
    above, below = num(layer.get("frac_above_max")), num(layer.get("frac_below_normal"))
    ref, inp = num(layer.get("ref_absmax")), num(layer.get("input_ref_absmax"))
    if math.isinf(local):
        out.append(f"output overflows in {prec} (local error inf)")
    elif math.isnan(local):
        out.append(f"output becomes NaN in {prec}")
    if above > 0:
        out.append(f"{fmt_pct(above)} of outputs above {prec} max (|max| {fmt(ref)} > {fmt(fmax)})")
    elif math.isfinite(fmax) and ref > fmax:
        out.append(f"output |max| {fmt(ref)} > {prec} max {fmt(fmax)}")
    if math.isfinite(fmax) and inp > fmax:
        out.append(f"input |max| {fmt(inp)} > {prec} max: overflows when rounded")
    if below >= 0.1:
        out.append(f"{fmt_pct(below, 0)} of outputs below smallest normal {fmt(fmin)} (underflow)")
    if math.isfinite(local) and local > 0:
        if rounding > 0 and local > 10 * rounding:
            out.append(f"local error {fmt(local)} ({local / rounding:.0f}x plain rounding)")
        elif not out:
            out.append(f"local error {fmt(local)}")
    if layer.get("input_sensitive"):
        out.append("error varies strongly between samples")
    if not out:
        out.append("needed to meet the tolerance (found by the search)")
    return out


def layers_by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(lay.get("name")): lay for lay in report.get("layers") or []}


def top_offenders(report: dict[str, Any], n: int = TOP_OFFENDERS) -> list[dict[str, Any]]:
    """Layers by rank (1 = worst); layers without a rank last, by score."""

    def key(lay: dict[str, Any]) -> tuple[float, float]:
        r = num(lay.get("rank"))
        s = num(lay.get("score"))
        return (r if math.isfinite(r) else math.inf, -s if not math.isnan(s) else math.inf)

    return sorted(report.get("layers") or [], key=key)[:n]


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


def _check_row(label: str, oc: dict[str, Any]) -> list[Any]:
    ok = oc.get("passed")
    mark = "—" if ok is None else ("pass" if ok else "**FAIL**")
    return [
        label,
        mark,
        fmt(oc.get("max_abs")),
        fmt(oc.get("mean_abs")),
        fmt(oc.get("max_rel")),
        fmt(oc.get("mean_rel")),
        fmt(oc.get("cosine"), 8),
        f"{oc.get('mismatches', '—')} / {oc.get('size', '—')}",
    ]


def _tolerance_text(tol: dict[str, Any]) -> str:
    parts = [f"atol {fmt(tol.get('atol'))}", f"rtol {fmt(tol.get('rtol'))}", f"stat `{tol.get('check_error_stat', 'elemwise')}`"]
    if tol.get("cosine_floor") is not None:
        parts.append(f"cosine ≥ {fmt(tol.get('cosine_floor'), 7)}")
    return ", ".join(parts)


def render_markdown(report: dict[str, Any]) -> str:
    """report.md: verdict first, then fallback nodes, outputs, divergence, commands, offenders, search."""
    model = report.get("model") or {}
    prec = precision_name(report)
    label, _ = verdict(report)
    fallback = [str(n) for n in report.get("fallback_nodes") or []]
    by_name = layers_by_name(report)
    limits = report.get("format_limits") or {}
    validation = report.get("validation")
    L: list[str] = []

    L += [f"# precision-doctor report: {_code(model.get('path', '?'))}", ""]
    L += [f"**Verdict: {label}.** {verdict_sentence(report)}", ""]
    if report.get("reason"):
        L += [f"> Status `{report.get('status')}`: {report['reason']}", ""]
    memo = report.get("memo_hits")
    memo_txt = f" ({memo} answered from the memo)" if memo else ""
    L += [
        f"- Search: **{report.get('evaluations', '?')} evaluations**{memo_txt} in **{fmt_time(report.get('elapsed_s'))}**, "
        f"strategy `{report.get('strategy', '?')}`, cost `{report.get('cost', '?')}`, backend `{report.get('backend', '?')}`.",
    ]
    if report.get("fallback_size") and report.get("one_minimal_checked") is not None:
        L.append("- Every member is needed: " + (
            "checked (removing any one of them was evaluated and fails)." if report["one_minimal_checked"] else
            "not checked for every member against the final set (it holds if adding FP16 nodes never reduces the error)."))
    if validation:
        res = "passed" if validation.get("passed") else "**FAILED**"
        L.append(f"- Validation on {validation.get('samples', '?')} held-out samples: {res}.")
    else:
        L.append("- Validation: not run (no held-out samples).")
    for line in (confirm_sentence(report), headroom_sentence(report)):
        if line:
            L.append(f"- {line}")
    base = report.get("baseline") or {}
    if base:
        L.append(f"- Everything in {prec} (baseline): {'passes' if base.get('passed') else 'fails'} the tolerance.")
    if report.get("first_divergence_node") or report.get("first_divergence"):
        L.append(f"- First divergence in {prec}: {_code(report.get('first_divergence_node') or report.get('first_divergence'))}.")
    L.append("")

    samples = report.get("samples") or {}
    L += ["| Setting | Value |", "| --- | --- |"]
    L.append(
        f"| Model | {_code(model.get('path', '?'))}: {model.get('nodes', '?')} nodes, {model.get('candidates', '?')} candidates, "
        f"{fmt_flops(model.get('total_flops'))} |"
    )
    if model.get("hash"):
        L.append(f"| Model hash | {_code(model['hash'])} |")
    L.append(
        f"| Precision | {prec} (max {fmt(limits.get('max'))}, smallest normal {fmt(limits.get('smallest_normal'))}) |"
    )
    L.append(f"| Tolerance | {_tolerance_text(report.get('tolerance') or {})} |")
    L.append(f"| Samples | {samples.get('search', '?')} search, {samples.get('validation', 0)} validation |")
    L.append(f"| Status | `{report.get('status', '?')}` |")
    tool = f"{report.get('tool', 'precision-doctor')} {report.get('version', '')}".strip()
    L.append(f"| Created | {report.get('created', '?')} by {tool} |")
    L.append("")

    # fallback nodes
    L += [f"## FP32 fallback nodes ({len(fallback)})", ""]
    if not fallback:
        if report.get("passed"):
            L += [f"None: the model meets the tolerance with every candidate node in {prec}.", ""]
        else:
            L += ["None (no passing set was found).", ""]
    else:
        rows = []
        for i, name in enumerate(fallback, 1):
            lay = by_name.get(name, {})
            rows.append(
                [
                    i,
                    _code(name),
                    _cell(lay.get("op_type", "?")),
                    fmt(lay.get("local_rel_l2")),
                    f"{fmt(lay.get('lowp_rel_l2'))} → {fmt(lay.get('fixed_rel_l2'))}",
                    fmt(lay.get("ref_absmax")),
                    _cell("; ".join(why(lay, report)) if lay else "no per-layer data"),
                ]
            )
        L += _table(["#", "Node", "Op", "Local error", "Error before → after", "Output abs max", "Why"], rows, "rlllrrl")
        L.append("")
        L.append(f"FP32 share of FLOPs: {fmt_pct(report.get('fp32_flop_share', 0.0))}. Errors are relative L2 against FP32.")
        L.append("")

    # outputs
    L += ["## Outputs", ""]
    outs = report.get("outputs") or {}
    base_outs = base.get("outputs") or {}
    val_outs = (validation or {}).get("outputs") or {}
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

    # first divergence
    L += ["## First divergence", ""]
    fd_node, fd_tensor = report.get("first_divergence_node"), report.get("first_divergence")
    if fd_node or fd_tensor:
        s = f"With everything in {prec}, the first tensor out of tolerance (in topological order) is {_code(fd_tensor or '?')}"
        s += f", produced by {_code(fd_node)}." if fd_node else "."
        lay = by_name.get(str(fd_node)) if fd_node else None
        if lay:
            s += f" ({_cell(lay.get('op_type', '?'))}; " + "; ".join(why(lay, report)) + ".)"
        L += [s, ""]
    else:
        L += [f"No tensor left the tolerance with everything in {prec}, or it was not recorded.", ""]

    # commands
    cmds = report.get("commands") or {}
    if cmds:
        L += ["## Commands", ""]
        for key, cmd in cmds.items():
            if not cmd:
                continue
            L += [f"{COMMAND_TITLES.get(key, key)}:", "", "```bash", str(cmd), "```", ""]

    # top offenders
    top = top_offenders(report)
    L += ["## Top offenders", ""]
    if top:
        rows = [
            [
                fmt(lay.get("rank")),
                _code(lay.get("name", "?")),
                _cell(lay.get("op_type", "?")),
                fmt(lay.get("score")),
                fmt(lay.get("local_rel_l2")),
                fmt(lay.get("lowp_rel_l2")),
                fmt(lay.get("fixed_rel_l2")),
                fmt(lay.get("ref_absmax")),
                fmt_pct(lay.get("frac_above_max")),
                fmt_pct(lay.get("frac_below_normal"), 1),
                "**FP32**" if lay.get("fallback") else "",
            ]
            for lay in top
        ]
        head = ["Rank", "Node", "Op", "Score", "Local", "Before", "After", "Abs max", "> max", "< normal", ""]
        L += _table(head, rows, "rllrrrrrrrl")
        L += ["", f"Showing {len(top)} of {len(report.get('layers') or [])} layers; the full table is in the HTML report.", ""]
    else:
        L += ["No per-layer analysis recorded.", ""]

    # search trajectory
    traj = report.get("trajectory") or []
    L += ["## Search", ""]
    if traj:
        shown = traj if len(traj) <= MAX_TRAJECTORY_ROWS else traj[:10] + traj[-(MAX_TRAJECTORY_ROWS - 10) :]
        rows = []
        for i, t in enumerate(shown):
            if len(traj) > MAX_TRAJECTORY_ROWS and i == 10:
                rows.append(["…", f"{len(traj) - MAX_TRAJECTORY_ROWS} steps omitted", "", "", "", "", ""])
            rows.append(
                [
                    t.get("step", "?"),
                    _cell(t.get("phase", "")),
                    t.get("size", "?"),
                    fmt(t.get("cost")),
                    "pass" if t.get("passed") else "fail",
                    _code(t["worst_output"]) if t.get("worst_output") else "—",
                    fmt(t.get("max_abs")),
                ]
            )
        L += _table(["Step", "Phase", "Size", "Cost", "Result", "Worst output", "Max abs"], rows, "rlrrllr")
    else:
        L.append("No evaluations recorded.")
    L.append("")

    # artifacts
    arts = report.get("artifacts") or {}
    if arts:
        L += ["## Artifacts", ""]
        L += [f"- {_code(path)}: {ARTIFACT_TITLES.get(key, key)}" for key, path in arts.items() if path]
        L.append("")
    renamed = model.get("renamed_nodes") or []
    if renamed:
        listed = ", ".join(_code(n) for n in renamed[:20]) + (", …" if len(renamed) > 20 else "")
        L += [f"Note: {len(renamed)} node(s) had missing or duplicate names and were renamed: {listed}"]
        L.append("")
    return "\n".join(L).rstrip() + "\n"
