"""What the answer costs, in words: the sentence the headline and the CLI carry, the trade-off sentence, and the
"What the answer costs" section of report.md and report.html, from report.json's `pricing` only."""

from __future__ import annotations

from html import escape

from precision_doctor.costs import Tradeoff
from precision_doctor.render.numbers import counted, fmt_decimal_bytes, fmt_short_pct
from precision_doctor.results.report import Pricing, Report


def _pricing(report: Report) -> Pricing | None:
    return report.pricing if report.pricing is not None and report.pricing.answer is not None else None


def cost_sentence(report: Report, with_share: bool = True) -> str | None:
    """"41% of the FLOPs stay in FP32, with 12 Casts (6 more than all FP16); estimated to keep 73% of the FP16
    speed-up; measured on the GPU at batch 16: ... (0.81 of the speed-up kept)." Without `with_share` (after a
    sentence that gave it) it starts at the Casts. None without an answer's pricing."""
    p = _pricing(report)
    if p is None:
        return None
    a = p.answer
    prec = str(report.search.precision or "low precision").upper()
    more = (f"{a.casts_added} more than all {prec}" if a.casts_added > 0 else
            f"{-a.casts_added} fewer than all {prec}" if a.casts_added < 0 else f"as many as all {prec}")
    casts = f"{counted(a.casts, 'Cast')} ({more})"
    parts = [f"{fmt_short_pct(a.fp32_flop_share)} of the FLOPs stay in FP32, with {casts}" if with_share
             else f"{casts.replace(' (', ' in fixed.onnx (', 1)}"]
    if a.estimated_speedup_kept is not None:
        kept_share = fmt_short_pct(max(a.estimated_speedup_kept, 0.0)) if a.estimated_speedup_kept >= 0 else "none"
        parts.append(f"estimated to keep {kept_share} of the {prec} speed-up (batch {a.batch}, {a.profile})")
    lat = p.latency
    if lat is not None:
        kept = lat.latency_kept
        parts.append(f"measured on the GPU at batch {lat.batch}: FP32 {lat.fp32_ms:.3g} ms, all {prec} {lat.lowp_ms:.3g} ms, "
                     f"fixed.onnx {lat.fixed_ms:.3g} ms"
                     + (f" ({kept:.2f} of the speed-up kept)" if kept is not None else f" ({prec} does not pay here)"))
    return "; ".join(parts) + "."


def tradeoff_sentence(t: Tradeoff | None, multiplier: float = 2.0) -> str | None:
    """"At 2x this tolerance the answer would keep 3% of the FLOPs in FP32 (4 nodes) instead of 41% (30)"."""
    if t is None:
        return None
    here, there = t.at(1.0), t.at(multiplier)
    if here is None or there is None or here.fp32_flop_share is None:
        return None
    what = f"At {multiplier:g}x this tolerance"
    if not there.found:
        return f"{what} no set was found within {there.evaluations} evaluations."
    bound = "at most " if not there.complete else ""
    if there.fallback == here.fallback and there.complete:
        return f"{what} the answer would be the same ({fmt_short_pct(here.fp32_flop_share)} of the FLOPs in FP32)."
    if there.fallback == here.fallback:
        return (f"{what} the answer would keep at most the same {fmt_short_pct(here.fp32_flop_share)} of the FLOPs in FP32 "
                f"(its prune ran out of its {there.evaluations} evaluations).")
    there_pct, here_pct = _distinct_pcts(there.fp32_flop_share, here.fp32_flop_share)
    return (f"{what} the answer would keep {bound}{there_pct} of the FLOPs in FP32 "
            f"({there.fallback_size} nodes) instead of {here_pct} ({here.fallback_size}).")


def _distinct_pcts(a: float | None, b: float | None) -> tuple[str, str]:
    """Two shares as short percentages, with more digits where the short ones would read the same ("12.04%" and
    "12.05%", not "12%" and "12%")."""
    pa, pb = fmt_short_pct(a), fmt_short_pct(b)
    digits = 3
    while pa == pb and a != b and a is not None and b is not None and digits <= 6:
        pa, pb = f"{100 * a:.{digits}g}%", f"{100 * b:.{digits}g}%"
        digits += 1
    return pa, pb


def _group_lines(p: Pricing) -> list[str]:
    out = []
    for g in p.groups:
        if g.released:
            out.append(f"{g.kind}: {', '.join(g.kept)} (split: {', '.join(g.released)} in low precision, proven not to "
                       "matter)")
        else:
            out.append(f"{g.kind}: {', '.join(g.kept)}")
    return out


def _cost_rows(report: Report, p: Pricing) -> list[tuple[str, str, str, str]]:
    a = p.answer
    prec = str(report.search.precision or "low precision").upper()
    rows = [("FP32 share of the FLOPs", "100%", "0%" if a.total_flops else "-", fmt_short_pct(a.fp32_flop_share)),
            ("Casts", "0", str(a.casts - a.casts_added), str(a.casts)),
            ("bytes moved per inference", *(fmt_decimal_bytes(b) for b in (a.bytes_fp32, a.bytes_lowp, a.bytes_fixed))),
            (f"estimated time above all {prec} (us)", "-", "0", f"{a.deploy_us:.3g}")]
    if p.latency is not None:
        lat = p.latency
        rows.append((f"measured latency at batch {lat.batch} (ms, median)", f"{lat.fp32_ms:.3g}", f"{lat.lowp_ms:.3g}",
                     f"{lat.fixed_ms:.3g}"))
    return rows


def markdown_lines(report: Report) -> list[str]:
    """The "What the answer costs" section of report.md (empty without an answer's pricing)."""
    p = _pricing(report)
    if p is None:
        return []
    prec = str(report.search.precision or "low precision").upper()
    a = p.answer
    out = ["", "## What the answer costs", "",
           f"The search minimized `{p.objective}`: {p.objective_means}. FLOPs and bytes at the shapes that ran "
           f"({a.shapes_from}), batch {a.batch}.", "",
           f"| | FP32 | all {prec} | fixed.onnx |", "|---|---|---|---|"]
    out += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in _cost_rows(report, p)]
    out += ["", cost_sentence(report) or ""]
    if p.latency is None and p.latency_note:
        out += ["", f"Latency {p.latency_note}."]
    if p.first_answer is not None:
        f = p.first_answer
        out += ["", f"The first search's answer, replaced by a second search, kept {fmt_short_pct(f.fp32_flop_share)} of "
                    f"the FLOPs in FP32 with {f.casts} Casts."]
    groups = _group_lines(p)
    if groups:
        out += ["", f"Fusion groups kept in FP32 ({len(groups)}; TensorRT and ONNX Runtime run each as one kernel):", ""]
        out += [f"- {g}" for g in groups]
    if p.gaps_closed:
        out += ["", f"{prec} gaps closed ({len(p.gaps_closed)}; their Casts cost more than their FP32 arithmetic, "
                    f"{p.refine_evaluations} evaluations): " + "; ".join(", ".join(g) for g in p.gaps_closed)]
    t = p.tradeoff
    if t is not None and t.points:
        out += ["", "### The trade-off against the tolerance", "", "| tolerance | nodes in FP32 | FP32 share of FLOPs | |",
                "|---|---|---|---|"]
        for pt in t.points:
            note = "this run" if pt.multiplier == 1 else "" if pt.complete else "at most (budget spent)"
            out.append(f"| {pt.multiplier:g}x | {pt.fallback_size if pt.found else 'none found'} | "
                       f"{fmt_short_pct(pt.fp32_flop_share) if pt.found else '-'} | {note} |")
        sentence = tradeoff_sentence(t)
        out += ["", (sentence or "") + f" ({t.evaluations} evaluations beyond the search.)"]
    return out


def html_section(report: Report, plot_svg: str | None) -> str:
    """The same section for report.html; `plot_svg`: the trade-off plot (render/plots.plot_tradeoff), or None."""
    p = _pricing(report)
    if p is None:
        return ""
    e = lambda v: escape(str(v), quote=True)  # noqa: E731
    prec = str(report.search.precision or "low precision").upper()
    a = p.answer
    rows = "".join(f"<tr><th>{e(r[0])}</th><td>{e(r[1])}</td><td>{e(r[2])}</td><td>{e(r[3])}</td></tr>"
                   for r in _cost_rows(report, p))
    out = ['<section id="cost"><h2>What the answer costs</h2>',
           f"<p>The search minimized <code>{e(p.objective)}</code>: {e(p.objective_means)}. FLOPs and bytes at the shapes "
           f"that ran ({e(a.shapes_from)}), batch {a.batch}.</p>",
           f"<table><tr><th></th><th>FP32</th><th>all {e(prec)}</th><th>fixed.onnx</th></tr>{rows}</table>",
           f"<p>{e(cost_sentence(report) or '')}</p>"]
    if p.latency is None and p.latency_note:
        out.append(f'<p class="muted">Latency {e(p.latency_note)}.</p>')
    groups = _group_lines(p)
    if groups:
        items = "".join(f"<li>{e(g)}</li>" for g in groups)
        out.append(f"<details><summary>Fusion groups kept in FP32 ({len(groups)})</summary><ul>{items}</ul></details>")
    if p.gaps_closed:
        items = "".join(f"<li>{e(', '.join(g))}</li>" for g in p.gaps_closed)
        out.append(f"<details><summary>{prec} gaps closed ({len(p.gaps_closed)})</summary><ul>{items}</ul></details>")
    if p.tradeoff is not None and p.tradeoff.points:
        sentence = tradeoff_sentence(p.tradeoff)
        out.append("<h3>The trade-off against the tolerance</h3>")
        if plot_svg:
            out.append(f'<figure class="plot">{plot_svg}<figcaption>{e(sentence or "")}</figcaption></figure>')
        else:
            out.append(f"<p>{e(sentence or '')}</p>")
    out.append("</section>")
    return "".join(out)
