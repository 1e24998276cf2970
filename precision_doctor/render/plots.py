"""Inline-SVG plots for report.html, drawn with matplotlib's Figure API (headless, no global pyplot state).

Titles live in the page. Non-finite values are drawn where they can be seen: inf and nan as markers along
the top of a log axis, zeros along the bottom. Each plot returns the SVG text plus where its axes sit, so
the page can map a mouse position back to a layer or a search step.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from precision_doctor.render.layers import layers_in_order
from precision_doctor.render.numbers import fmt, num
from precision_doctor.render.wording import precision_name
from precision_doctor.results.report import Layer, Report, TrajectoryRow

BEFORE = "#e6862e"  # all low precision
AFTER = "#2c7fb8"  # with the fallback set
FALLBACK = "#d7191c"
INPUT = "#7b8794"
PASS = "#1a9641"
FAIL = "#d7191c"

NAMED_TICKS_MAX = 60  # above this many layers the x axis shows indices, not names
MARKERS_MAX = 300  # above this many layers the series are lines without per-point markers
LABEL_FALLBACK_MAX = 20


@dataclass
class Plot:
    """One rendered plot: SVG text (no XML prologue, no namespaces, ids prefixed) and its axes geometry."""

    svg: str
    axes_x0: float  # left edge of the axes, as a fraction of the figure width
    axes_w: float  # width of the axes, as a fraction of the figure width
    axes_y0: float  # bottom edge of the axes, as a fraction of the figure height (from the bottom)
    axes_h: float  # height of the axes, as a fraction of the figure height
    xlim: tuple[float, float]


def _figure(width: float = 11.0, height: float = 4.2) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _to_svg(fig: Any, ax: Any, prefix: str) -> Plot:
    """Serialize `fig` to inline-ready SVG and record the axes position (valid after the layout ran)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": prefix}):
        fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    pos = ax.get_position()
    xlim = tuple(float(v) for v in ax.get_xlim())
    fig.clear()
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    # inline SVG in HTML needs no namespaces (and the page must not name any URL); xlink:href works as is
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg, count=0)
    svg = re.sub(r'(<svg[^>]*?)\swidth="[^"]*"\s+height="[^"]*"', r'\1 width="100%"', svg, count=1)
    svg = svg.replace("<svg ", f'<svg role="img" class="plot-svg" id="{prefix}" preserveAspectRatio="xMinYMin meet" ', 1)
    # ids are per figure; make them unique within the page
    ids = set(re.findall(r'\sid="([^"]+)"', svg)) - {prefix}
    if ids:
        pat = re.compile(r'(\sid="|#)(' + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)) + r')(?=["\)])')
        svg = pat.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)
    return Plot(svg=svg.strip(), axes_x0=float(pos.x0), axes_w=float(pos.width), axes_y0=float(pos.y0),
                axes_h=float(pos.height), xlim=(xlim[0], xlim[1]))


def _decade(v: float, _pos: Any = None) -> str:
    """Tick label for a power of ten in plain text: 0.01, 0.1, 1, 10, 100, 1e+03, 1e-04."""
    if v <= 0:
        return ""
    e = round(math.log10(v))
    return f"{10.0**e:g}" if -2 <= e <= 2 else f"1e{e:+03d}"


def _log_axis(ax: Any) -> None:
    """Log y axis with plain-text decade labels (mathtext labels cost most of the drawing time, and
    Unicode superscripts depend on the viewer's fonts)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=12))
    ax.yaxis.set_major_formatter(FuncFormatter(_decade))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _short(name: str, n: int = 28) -> str:
    return name if len(name) <= n else "…" + name[-(n - 1) :]


def _log_series(values: Sequence[Any]) -> tuple[list[float], list[int], list[int], list[int]]:
    """(y for a log axis with nan gaps, indices of +inf, indices of nan/-inf/negative, indices of zeros)."""
    y: list[float] = []
    inf_i: list[int] = []
    nan_i: list[int] = []
    zero_i: list[int] = []
    for i, v in enumerate(values):
        x = num(v)
        if math.isinf(x) and x > 0:
            inf_i.append(i)
            y.append(math.nan)
        elif math.isnan(x) or x < 0:
            nan_i.append(i)
            y.append(math.nan)
        elif x == 0:
            zero_i.append(i)
            y.append(math.nan)
        else:
            y.append(x)
    return y, inf_i, nan_i, zero_i


def _finite_range(*series: Sequence[float]) -> tuple[float, float] | None:
    vals = [v for s in series for v in s if math.isfinite(v) and v > 0]
    return (min(vals), max(vals)) if vals else None


def _mark_edges(ax: Any, xs: Sequence[int], y_frac: float, marker: str, color: str, size: float = 40) -> None:
    """Markers at axes-fraction height `y_frac` (top for non-finite, bottom for zeros)."""
    if xs:
        ax.scatter(list(xs), [y_frac] * len(xs), transform=ax.get_xaxis_transform(), marker=marker, s=size,
                   color=color, zorder=6, clip_on=False, linewidths=1.2)


def _x_axis_layers(ax: Any, layers: list[Layer], xs: list[int], fb_idx: list[int]) -> None:
    n = len(layers)
    ax.set_xlim(min(xs) - 0.6 if xs else -0.6, max(xs) + 0.6 if xs else 0.6)
    if n <= NAMED_TICKS_MAX:
        ax.set_xticks(xs)
        labels = ax.set_xticklabels([_short(str(lay.name)) for lay in layers], rotation=90, fontsize=7)
        fb = set(fb_idx)
        for i, lab in enumerate(labels):
            if i in fb:
                lab.set_color(FALLBACK)
                lab.set_fontweight("bold")
        ax.set_xlabel("layer (topological order)")
    else:
        ax.set_xlabel("layer index (topological order)")


def _fallback_bands(ax: Any, layers: list[Layer], xs: list[int], fb_idx: list[int], label_names: bool) -> None:
    for k, i in enumerate(fb_idx):
        label = "FP32 fallback node" if k == 0 else None
        if len(layers) <= 200:
            ax.axvspan(xs[i] - 0.45, xs[i] + 0.45, color=FALLBACK, alpha=0.12, lw=0, zorder=0, label=label)
        else:  # a band narrower than a pixel would vanish
            ax.axvline(xs[i], color=FALLBACK, alpha=0.35, lw=1.2, zorder=0, label=label)
    if label_names and len(fb_idx) <= LABEL_FALLBACK_MAX:
        for i in fb_idx:
            ax.text(xs[i], 0.03, _short(str(layers[i].name), 34), transform=ax.get_xaxis_transform(),
                    rotation=90, fontsize=7, color=FALLBACK, ha="center", va="bottom", zorder=7,
                    bbox={"facecolor": "white", "alpha": 0.75, "lw": 0, "pad": 1})


def _legend_above(fig: Any, ax: Any, extra: list[Any]) -> None:
    """Legend in a row above the axes, so it never hides data or the markers along the top."""
    handles, _ = ax.get_legend_handles_labels()
    handles = handles + extra
    fig.legend(handles=handles, loc="outside upper left", fontsize=8, ncol=min(4, len(handles)), frameon=False)


def _layer_xs(layers: list[Layer]) -> list[int]:
    return list(range(len(layers)))


def _layer_axes(layers: list[Layer]) -> tuple:
    """What a per-layer plot starts from: x positions, layer count, fallback indices, figure, axes, markers on."""
    n = len(layers)
    fig = _figure(11, 4.8 if n <= NAMED_TICKS_MAX else 4.2)
    fb_idx = [i for i, lay in enumerate(layers) if lay.fallback]
    return _layer_xs(layers), n, fb_idx, fig, fig.add_subplot(), n <= MARKERS_MAX


def plot_layer_errors(report: Report) -> Plot | None:
    """Per-layer relative L2 error before (all low precision) and after the fix, log scale, fallback nodes marked."""
    layers = layers_in_order(report)
    if not layers:
        return None
    prec = precision_name(report)
    xs, n, fb_idx, fig, ax, mk = _layer_axes(layers)
    before, b_inf, b_nan, b_zero = _log_series([lay.lowp_rel_l2 for lay in layers])
    after, a_inf, a_nan, a_zero = _log_series([lay.fixed_rel_l2 for lay in layers])
    ax.plot(xs, before, color=BEFORE, lw=1.6, marker="o" if mk else None, ms=3.5, label=f"before: all {prec}", zorder=3)
    ax.plot(xs, after, color=AFTER, lw=1.6, marker="s" if mk else None, ms=3.2, label="after: with the FP32 fallback set",
            zorder=4)
    fb_y = [before[i] for i in fb_idx if math.isfinite(before[i])]
    if fb_idx:
        ax.scatter([xs[i] for i in fb_idx if math.isfinite(before[i])], fb_y, marker="D", s=55, color=FALLBACK,
                   edgecolor="black", linewidths=0.8, zorder=5)
    _fallback_bands(ax, layers, xs, fb_idx, label_names=n > NAMED_TICKS_MAX)
    _log_axis(ax)
    rng = _finite_range(before, after)
    lo, hi = rng if rng else (1e-4, 1.0)
    lo, hi = lo / 4, hi * (30 if (b_inf or b_nan or a_inf or a_nan) else 4)
    if hi / lo < 100:
        lo, hi = math.sqrt(lo * hi) / 10, math.sqrt(lo * hi) * 10
    ax.set_ylim(lo, hi)
    _mark_edges(ax, [xs[i] for i in b_inf], 0.95, "^", BEFORE, 55)
    _mark_edges(ax, [xs[i] for i in a_inf], 0.95, "^", AFTER, 55)
    _mark_edges(ax, [xs[i] for i in b_nan], 0.88, "x", BEFORE, 45)
    _mark_edges(ax, [xs[i] for i in a_nan], 0.88, "x", AFTER, 45)
    _mark_edges(ax, [xs[i] for i in b_zero], 0.04, "v", BEFORE, 30)
    _mark_edges(ax, [xs[i] for i in a_zero], 0.04, "v", AFTER, 30)
    extra = []
    from matplotlib.lines import Line2D

    if b_inf or a_inf:
        extra.append(Line2D([], [], ls="", marker="^", color="black", label="inf (drawn at the top)"))
    if b_nan or a_nan:
        extra.append(Line2D([], [], ls="", marker="x", color="black", label="nan (drawn near the top)"))
    if b_zero or a_zero:
        extra.append(Line2D([], [], ls="", marker="v", color="black", label="exactly 0 (drawn at the bottom)"))
    _legend_above(fig, ax, extra)
    ax.set_ylabel("relative L2 error vs FP32")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    _x_axis_layers(ax, layers, xs, fb_idx)
    return _to_svg(fig, ax, "plot-errors")


def plot_value_ranges(report: Report) -> Plot | None:
    """Per-layer absolute maxima of reference outputs and inputs against the format's max and smallest normal."""
    layers = layers_in_order(report)
    if not layers:
        return None
    prec = precision_name(report)
    limits = report.analysis.format_limits
    fmax, fmin = num(limits.max), num(limits.smallest_normal)
    xs, n, fb_idx, fig, ax, mk = _layer_axes(layers)
    out, o_inf, o_nan, o_zero = _log_series([lay.ref_absmax for lay in layers])
    inp, i_inf, i_nan, i_zero = _log_series([lay.input_ref_absmax for lay in layers])
    ax.plot(xs, inp, color=INPUT, lw=1.0, ls="--", marker="." if mk else None, ms=4, label="input |max| (reference)", zorder=3)
    ax.plot(xs, out, color=AFTER, lw=1.6, marker="o" if mk else None, ms=3.5, label="output |max| (reference)", zorder=4)
    if fb_idx:
        pts = [(xs[i], out[i]) for i in fb_idx if math.isfinite(out[i])]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="D", s=55, color=FALLBACK, edgecolor="black",
                   linewidths=0.8, zorder=5)
    _fallback_bands(ax, layers, xs, fb_idx, label_names=n > NAMED_TICKS_MAX)
    _log_axis(ax)
    rng = _finite_range(out, inp)
    lo, hi = rng if rng else (1e-3, 1e3)
    lo, hi = lo / 10, hi * 10
    # show a limit when it stretches the axis by at most max(6 decades, half the data's span); else say where it is
    slack = max(6.0, 0.5 * math.log10(hi / lo))
    notes = []
    if math.isfinite(fmax) and fmax > 0:
        if math.log10(fmax / hi) <= slack:
            hi = max(hi, fmax * 20)
            ax.axhline(fmax, color=FALLBACK, ls="--", lw=1.3, label=f"{prec} max {fmt(fmax)}", zorder=2)
            ax.axhspan(fmax, hi * 10, color=FALLBACK, alpha=0.05, lw=0, zorder=0)
        else:
            notes.append(f"{prec} max {fmt(fmax)}: far above")
    if math.isfinite(fmin) and fmin > 0:
        if math.log10(lo / fmin) <= slack:
            lo = min(lo, fmin / 20)
            ax.axhline(fmin, color=BEFORE, ls="--", lw=1.3, label=f"{prec} smallest normal {fmt(fmin)}", zorder=2)
            ax.axhspan(lo / 10, fmin, color=BEFORE, alpha=0.07, lw=0, zorder=0)
        else:
            notes.append(f"smallest normal {fmt(fmin)}: far below")
    ax.set_ylim(lo, hi)
    _mark_edges(ax, [xs[i] for i in o_inf + o_nan], 0.95, "^", AFTER, 55)
    _mark_edges(ax, [xs[i] for i in i_inf + i_nan], 0.95, "^", INPUT, 40)
    _mark_edges(ax, [xs[i] for i in o_zero], 0.04, "v", AFTER, 30)
    _mark_edges(ax, [xs[i] for i in i_zero], 0.04, "v", INPUT, 25)
    from matplotlib.lines import Line2D

    extra = []
    if o_inf or o_nan or i_inf or i_nan:
        extra.append(Line2D([], [], ls="", marker="^", color="black", label="non-finite (drawn at the top)"))
    if o_zero or i_zero:
        extra.append(Line2D([], [], ls="", marker="v", color="black", label="exactly 0 (drawn at the bottom)"))
    extra += [Line2D([], [], ls="", label=note) for note in notes]  # text-only legend entries
    _legend_above(fig, ax, extra)
    ax.set_ylabel("absolute max (FP32 reference)")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    _x_axis_layers(ax, layers, xs, fb_idx)
    return _to_svg(fig, ax, "plot-ranges")


def step_numbers(traj: list[TrajectoryRow]) -> list[float]:
    """The x of each evaluation: its "step", or its position where that is not a number."""
    return [s if math.isfinite(s := num(t.step)) else float(i) for i, t in enumerate(traj)]


def plot_trajectory(report: Report) -> Plot | None:
    """Search trajectory: evaluation step vs fallback size, passing and failing evaluations coloured."""
    traj = report.search.trajectory
    if not traj:
        return None
    steps = step_numbers(traj)
    sizes = [num(t.size) for t in traj]
    ok = [bool(t.passed) for t in traj]
    final = sorted(str(n) for n in report.answer.fallback_nodes)
    fig = _figure(11, 3.6)
    ax = fig.add_subplot()
    # phases as shaded bands, labelled at the top
    start = 0
    shade = False
    for i in range(1, len(traj) + 1):
        if i == len(traj) or traj[i].phase != traj[start].phase:
            x0, x1 = steps[start] - 0.5, steps[i - 1] + 0.5
            if shade:
                ax.axvspan(x0, x1, color="#000000", alpha=0.04, lw=0, zorder=0)
            phase = str(traj[start].phase or "")
            if phase and (x1 - x0) >= max(1.0, (steps[-1] - steps[0] + 1) / 40):
                ax.text((x0 + x1) / 2, 0.97, phase, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8,
                        color="#555")
            shade = not shade
            start = i
    ax.plot(steps, sizes, color="#9aa5b1", lw=1.0, zorder=2)
    many = len(traj) > 400
    ps = [(s, z) for s, z, k in zip(steps, sizes, ok) if k]
    fs = [(s, z) for s, z, k in zip(steps, sizes, ok) if not k]
    ax.scatter([p[0] for p in ps], [p[1] for p in ps], color=PASS, marker="o", s=12 if many else 42, zorder=4, label="passes")
    ax.scatter([p[0] for p in fs], [p[1] for p in fs], color=FAIL, marker="X", s=12 if many else 48, zorder=4, label="fails")
    chosen = [(s, z) for s, z, k, t in zip(steps, sizes, ok, traj) if k and sorted(map(str, t.fallback)) == final]
    if chosen and report.answered:
        ax.scatter([c[0] for c in chosen], [c[1] for c in chosen], marker="*", s=220, facecolor="none", edgecolor="black",
                   linewidths=1.2, zorder=5, label="the reported set")
    top = max([z for z in sizes if math.isfinite(z)] or [1.0])
    if top > 40:
        ax.set_yscale("symlog", linthresh=2)
    ax.set_ylim(-0.5 if top <= 40 else 0, top * (1.35 if top <= 40 else 3))
    if top <= 40:
        from matplotlib.ticker import MaxNLocator

        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(steps[0] - 0.6, steps[-1] + 0.6)
    ax.set_xlabel("evaluation step")
    ax.set_ylabel("fallback size (nodes in FP32)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 0.9), framealpha=0.92)
    return _to_svg(fig, ax, "plot-trajectory")


def plot_tradeoff(report: Report) -> Plot | None:
    """FP32 share of the FLOPs against the tolerance a user could choose (a multiple of this run's): the
    cheapest set the search saw pass at each multiple (a step line: a set holds from its share of the tolerance
    up), the sets pruned again at 0.5x, 2x and 4x (hollow: an upper bound, the prune ran out of budget), and the
    answer (a star at 1x)."""
    t = report.pricing.tradeoff if report.pricing is not None else None
    if t is None or not t.points:
        return None
    pts = [p for p in t.points if p.found and p.fp32_flop_share is not None]
    if not pts:
        return None
    mults = [num(p.multiplier) for p in t.points]
    lo, hi = min(mults + [1.0]) / 1.6, max(mults + [1.0]) * 1.6
    fig = _figure(8, 3.6)
    ax = fig.add_subplot()
    front = sorted((num(f.share), 100 * num(f.fp32_flop_share)) for f in t.frontier
                   if f.fp32_flop_share is not None and math.isfinite(num(f.share)) and num(f.share) >= 0)
    if front:  # the cheapest seen passing set at each multiple: a step down at each share
        lo = max(min(lo, front[0][0] / 1.3), 1 / 16)  # a set that holds at 0x starts at the left edge
        xs, ys, best = [], [], math.inf
        for share, y in front:
            if y < best:
                xs.append(max(share, lo))
                ys.append(y)
                best = y
        ax.step(xs + [hi], ys + [ys[-1]], where="post", color="#9aa5b1", lw=1.4, zorder=2,
                label="cheapest set the search saw pass")
    full = [p for p in pts if p.complete and p.multiplier != 1]
    bound = [p for p in pts if not p.complete and p.multiplier != 1]
    ax.scatter([num(p.multiplier) for p in full], [100 * num(p.fp32_flop_share) for p in full], color=AFTER, s=46,
               zorder=4, label="pruned again at that tolerance")
    if bound:
        ax.scatter([num(p.multiplier) for p in bound], [100 * num(p.fp32_flop_share) for p in bound], facecolor="none",
                   edgecolor=AFTER, s=46, zorder=4, label="pruned again, budget spent (at most)")
    here = t.at(1.0)
    if here is not None and here.found and here.fp32_flop_share is not None:
        ax.scatter([1.0], [100 * num(here.fp32_flop_share)], marker="*", s=240, color=FALLBACK, edgecolor="black",
                   linewidths=0.8, zorder=5, label="the answer (this tolerance)")
    missing = [p for p in t.points if not p.found]
    _mark_edges(ax, [num(p.multiplier) for p in missing], 0.95, "^", FAIL, 50)
    ax.set_xscale("log", base=2)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}x"))
    ax.set_xlim(lo, hi)
    ax.set_ylim(-3, 103)
    ax.set_xlabel("tolerance, as a multiple of this run's (atol and rtol scaled together)")
    ax.set_ylabel("FLOPs kept in FP32 (%)")
    ax.grid(True, alpha=0.3)
    extra = []
    if missing:
        from matplotlib.lines import Line2D

        extra.append(Line2D([], [], ls="", marker="^", color=FAIL, label="no passing set found (drawn at the top)"))
    _legend_above(fig, ax, extra)
    return _to_svg(fig, ax, "plot-tradeoff")
