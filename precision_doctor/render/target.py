"""The runtime an answer holds for, in words (report.json's `target` and `other_runtime`, pipeline/target.py): the
headline's sentences, and report.md's section with the other runtime's answer and what is documented, measured
or only modelled about the target (`graph/targets.py`)."""

from __future__ import annotations

from precision_doctor.graph.targets import RUNTIMES, TENSORRT, how_checked, of_tolerance, runtime
from precision_doctor.render.numbers import counted, fmt_pct
from precision_doctor.render.wording import margin_words, over_margin_share, within_but_over_margin
from precision_doctor.results.report import Report

SHOWN = 8  # nodes of the other runtime's additions named in a sentence


def _code(name: str) -> str:
    text = str(name).replace("|", "\\|").replace("\n", " ").replace("`", "'")
    return f"`{text}`"


def target_sentence(report: Report, plain: bool = False) -> str | None:
    """Which runtime the answer is for and what it rests on (`plain`: no Markdown, as the headline says it in every
    front end); None for a report from before targets."""
    if report.search.target not in RUNTIMES:
        return None
    rt, c = runtime(report.search.target), report.checks.certified_by
    flag = f"--target {report.search.target}"
    text = f"The answer is for {rt.label} ({flag if plain else _code(flag)})"
    if c is not None:
        text += f", {how_checked(c.backend, report.search.target)}"
    if report.search.target == TENSORRT and (c is None or c.backend != "trt"):
        text += ": TensorRT itself was not run, what it does is modelled from its documentation"
    return text + "."


def other_runtime_sentence(report: Report, short: bool = False) -> str | None:
    """How the answer fared on the other runtime, and that runtime's own answer where it needed one (`short`: the
    headline's form, plain text without the nodes)."""
    o = report.checks.other_runtime
    if o is None:
        return None
    label = runtime(o.runtime).label
    if o.passed is None:
        why = o.reason.removeprefix("not checked: ") if o.reason else None  # the prefix: reports written before it went
        return f"Not checked on {label}: {why}." if why else None
    there = f"On {label} ({how_checked(o.backend, o.runtime)}, {counted(o.samples, 'sample')})"
    if o.passed:
        return f"{there} it passes too ({of_tolerance(o.tolerance_used)})."
    share = of_tolerance(o.tolerance_used)
    if within_but_over_margin(report, o.tolerance_used):
        share = (f"{over_margin_share(report, o.tolerance_used)}x the tolerance on the samples it ran, up to the first "
                 f"that failed: within it there, but above {margin_words(report)}")
    text, where = f"{there} it FAILS ({share})", (o.directory or o.runtime) + "/"
    if o.answer is None:
        return f"{text}: {o.reason or 'no answer for it was found'}."
    text += (f": {label} gets its own answer, {counted(len(o.added), 'more node')} in FP32 "
             f"({of_tolerance(o.answer_tolerance_used)} there), in {where if short else _code(where)}")
    if not short and o.added:
        more = f" and {len(o.added) - SHOWN} more" if len(o.added) > SHOWN else ""
        text += f" (adds {', '.join(_code(n) for n in o.added[:SHOWN])}{more})"
    if o.reason:
        text += f"; {o.reason}"
    return text + "."


def target_lines(report: Report) -> list[str]:
    """report.md's section on the target runtime: what the answer is for, the other runtime's check and answer, its
    files, and what the emulator's model of the target rests on."""
    if report.search.target not in RUNTIMES:
        return []
    rt = runtime(report.search.target)
    L = ["## Target runtime", ""]
    L += [f"- {line}" for line in (target_sentence(report), other_runtime_sentence(report)) if line]
    o = report.checks.other_runtime
    if o is not None and o.answer is not None:
        share = f", {fmt_pct(o.fp32_flop_share)} of FLOPs" if o.fp32_flop_share is not None else ""
        L.append(f"- {runtime(o.runtime).label}'s answer: {counted(len(o.answer), 'node')} in FP32{share}; "
                 + ", ".join(f"{_code(path)}" for path in o.files.values()) + ".")
        if o.trt_check is not None:
            t = o.trt_check
            differ = f"{counted(len(t.mismatches), 'layer')} {'differs' if len(t.mismatches) == 1 else 'differ'} from the answer."
            L.append(f"- {_code((o.directory or o.runtime) + '/fixed.onnx')} on {t.library} {t.version}'s parser: "
                     + ("every layer as the answer says." if t.ran and t.passed else differ if t.ran else
                        f"not checked: {t.reason}."))
    L += ["", f"What the emulator's `{rt.profile}` rules rest on for {rt.label}:", ""]
    L += [f"- {f.basis}: {f.what}" + (f" ({f.source})" if f.source else "") + "." for f in rt.facts]
    if rt.proxy:
        L.append(f"- measured on a CUDA GPU here: {rt.proxy}.")
    return L + [""]
