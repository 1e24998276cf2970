"""The verdict in words: one sentence per field of the run's statement (results/verdict.py), the same for every front
end (the CLI's first lines, report.md, report.html, the service's job page and Result, the batch summary).

`label` and `tone` (the badge: green only for a plain PASSED, warn for a qualified pass), `status_sentence`,
`claim_sentence` (the one number that is a probability: the held-out bound), `benefit_sentence`, `basis_sentence`;
`headline` puts them in one line after the label, with the runtime the answer is for and how it fared on the other
(render/target.py) and two measured facts about the tolerance and the model (wording.floor_sentence,
wording.lowp_sentence). `claim_details` is the claim's long form for the reports, and
`figures` the key figures of report.html's header and the job page.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_doctor.outcome import _Value
from precision_doctor.render.numbers import counted, fmt_rate, fmt_short_pct, fmt_time
from precision_doctor.render.wording import floor_sentence, lowp_sentence, notes_clause, tolerance_text
from precision_doctor.results.report import Report
from precision_doctor.results.verdict import (
    LITTLE_FP32_SHARE,
    LITTLE_SPEEDUP_KEPT,
    MIN_VALIDATING,
    STOPPED,
    USEFUL_BOUND,
    Qualifier,
    Statement,
    Status,
    Unvalidated,
)


class Tone(_Value):
    """How a verdict is shown: its badge and bar colour (CSS classes of the reports and the service pages)."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


def tone(st: Statement) -> Tone:
    """Green only for a plain PASSED (validated, on what it was checked on, with benefit); warn for a qualified one."""
    if st.status != Status.PASSED:
        return Tone.FAIL
    return Tone.WARN if st.qualifiers else Tone.PASS


def verdict(report: Report) -> tuple[str, Tone]:
    """The verdict's label and tone."""
    st = report.statement
    return st.label, tone(st)


def _nodes(st: Statement) -> str:
    """"2 of 5 candidate nodes", "1 of 50 candidate nodes", "1 node" (the noun agrees with the last number)."""
    b = st.benefit
    n = b.nodes if b is not None else 0
    if b is not None and b.candidates is not None:
        return f"{n} of {counted(b.candidates, 'candidate node')}"
    return counted(n, "node")


def status_sentence(st: Statement) -> str:
    """What the run found, from `status` (and the answer's size)."""
    p, nodes = st.precision, _nodes(st)
    if st.status == Status.NO_SOLUTION:
        return f"No FP32 fallback set made the model meet the tolerance in {p}."
    if st.status == Status.INCOMPLETE:
        stopped = STOPPED.get(st.stopped, "stopped")
        if st.answered and st.held_out_failed:  # measured: held-out samples fail its set so far
            return (f"The run stopped ({stopped}) before its answer was settled: the set found so far ({nodes} in FP32) "
                    f"meets the tolerance in {p} on the search samples it was checked on, not on held-out ones, and a "
                    "set that passes them too was not found yet.")
        if st.answered:
            return (f"The run stopped ({stopped}) before its answer was settled: the set found so far keeps {nodes} in "
                    "FP32, and what would settle it did not finish.")
        return f"The search stopped ({stopped}) before any FP32 fallback set made the model meet the tolerance in {p}."
    if st.status == Status.FAILED_HELD_OUT:
        return f"The set found ({nodes} in FP32) meets the tolerance in {p} on the search samples, not on held-out ones."
    if st.benefit is not None and st.benefit.all_fp32:
        return f"The model meets the tolerance in {p} only with all {nodes} kept in FP32."
    if st.benefit is not None and st.benefit.nodes == 0:
        return f"The model meets the tolerance entirely in {p}: no node needs FP32."
    return f"The model meets the tolerance in {p} with {nodes} kept in FP32."


_WHY_NOT = {
    Unvalidated.TOO_FEW: "fewer than 4 --inputs: none could be held out",
    Unvalidated.SPLIT_ZERO: "--validation-split 0 held none out",
    Unvalidated.NONE_HELD_OUT: "none was held out",
}


def _on(backend: str | None) -> str:
    return f" on {backend}" if backend else ""


def claim_sentence(st: Statement) -> str | None:
    """The one measured claim: k of n held-out samples of the user's data failed, where, and the exact bound; or why
    the answer is not validated. None where there is nothing to claim (no answer)."""
    c = st.claim
    if c is None:
        return None
    if c.measured:
        ties = (f" ({c.ties} of them {'passes' if c.ties == 1 else 'pass'} under another cuDNN algorithm choice: which "
                f"kernels the GPU picks decides {'it' if c.ties == 1 else 'them'})") if c.ties else ""
        return (f"{c.failures} of {counted(c.samples, 'held-out sample')} of your data failed{_on(c.backend)}{ties}: on "
                f"data like yours the answer fails on at most {fmt_rate(c.bound)} of inputs ({c.confidence:.0%} "
                "confidence, exact bound).")
    e = c.earlier
    if c.unvalidated == Unvalidated.FEW_HELD_OUT:
        return (f"Not validated: {c.held_out} of {counted(c.held_out, 'held-out sample')} of your data passed"
                f"{_on(c.backend)}, too few to bound the failure rate on inputs like yours below {USEFUL_BOUND:.0%} "
                f"(they bound it at {fmt_rate(c.bound)}; {MIN_VALIDATING} passing ones would).")
    if c.unvalidated == Unvalidated.GENERATED:
        return f"Not validated: {c.samples} generated samples, not your data."
    if c.unvalidated == Unvalidated.NOT_CHECKED:
        return f"Not validated: the run stopped before its {counted(c.held_out, 'held-out sample')} checked the answer."
    if e is not None and st.status == Status.NO_SOLUTION:
        return (f"The first answer ({counted(e.nodes, 'node')}) failed {e.failures} of {counted(e.samples, 'held-out sample')}"
                f"{_on(e.backend)}; a second search with them found no set that passes every sample.")
    head = f"Not validated: {counted(c.samples, 'sample')}, all used by the search"
    if e is not None and c.unvalidated == Unvalidated.REPAIRED:
        which = "the answer before the repair" if e.by.startswith("a repair") else "the first answer"
        return (f"{head}: {which} ({counted(e.nodes, 'node')}) failed {e.failures} of "
                f"{counted(e.samples, 'held-out sample')}{_on(e.backend)}, and {e.by} used them.")
    return f"{head} ({_WHY_NOT.get(c.unvalidated, 'none was held out')})."


def claim_details(report: Report) -> str | None:
    """The claim's long form, after the headline: the bound's method, and where the held-out samples are too few to
    promise much, how many would (the pipeline's `held_out_bound`); for an answer not validated, what would validate
    it. None where the headline said it all."""
    c = report.statement.claim
    if c is None:
        return None
    if c.measured:
        text = f"The held-out bound is the {c.method} bound at {c.confidence:.0%} confidence."
        b = report.promise.held_out_bound
        if b is not None and not c.failures and not b.useful:
            text += (f" Too few to promise more: {b.samples_for_useful} passing held-out samples would bound it at "
                     f"{fmt_rate(b.useful_rate)} (give {b.inputs_for_useful} or more --inputs, of which the default split "
                     f"holds out a fifth, or {b.samples_for_useful} --validate-inputs samples).")
        return text
    if c.unvalidated == Unvalidated.REPAIRED:
        return ("The held-out samples shaped this answer, so they no longer measure how it fares on new inputs: check it "
                "on new samples of your data (--validate-inputs) that no search saw.")
    if c.unvalidated == Unvalidated.GENERATED:
        return "Generated samples say nothing about your data: give samples of it (--inputs, or --data-loader-script)."
    if c.unvalidated == Unvalidated.FEW_HELD_OUT:
        return (f"The held-out bound is the {c.method} bound at {c.confidence:.0%} confidence: with {c.held_out} passing "
                f"held-out samples it is {fmt_rate(c.bound)}, which says nothing useful. Give more --inputs of your data "
                f"(a fifth is held out; {MIN_VALIDATING} passing ones bound it below {USEFUL_BOUND:.0%}) or "
                "--validate-inputs.")
    return ("Without held-out samples of your data nothing measures how the answer fares on new inputs: give 4 or more "
            "--inputs (a fifth is held out) or --validate-inputs.")


def benefit_sentence(st: Statement) -> str | None:
    """What the answer keeps of low precision: the FP32 FLOP share, the speed-up kept (measured or estimated), and
    where it is little, why and the trade-off point that keeps more. None without an answer."""
    b, p = st.benefit, st.precision
    if b is None:
        return None
    parts = [f"{fmt_short_pct(b.fp32_flop_share)} of the FLOPs stay in FP32"]
    if b.no_gain:
        parts.append(f"measured on the GPU, all {p} is no faster than FP32")
    elif b.speedup_kept is not None:
        kept = fmt_short_pct(max(b.speedup_kept, 0.0)) if b.speedup_kept >= 0 else "none"
        parts.append(f"the {'measured' if b.measured else 'estimated'} latency keeps {kept} of the {p} speed-up")
    text = "; ".join(parts)
    if b.all_fp32:
        text += f": no {p} benefit"
    elif b.little:
        why = [f"over {LITTLE_FP32_SHARE:.0%} of the FLOPs in FP32" if "flops" in b.little_by else None,
               f"under {LITTLE_SPEEDUP_KEPT:.0%} of the speed-up kept" if "latency" in b.little_by else None]
        text += f": little {p} benefit ({' and '.join(x for x in why if x)})"
    if b.little and b.better is not None:
        t = b.better
        text += (f". At {t.multiple:g}x this tolerance the answer would keep {fmt_short_pct(t.fp32_flop_share)} of the "
                 f"FLOPs in FP32 ({counted(t.nodes, 'node')})")
    return text + "."


def basis_sentence(st: Statement) -> str:
    """What the answer rests on: the backend with the last word, and what of the answer it does not model on a GPU."""
    b, p = st.basis, st.precision
    if b.gpu:
        spread = (f" (its own spread under cuDNN's algorithm choices: {fmt_short_pct(b.spread)} of the tolerance)"
                  if b.spread is not None else "")
        return f"Last checked on {b.backend}, real {p} on a GPU{spread}."
    who = f"the emulator ({b.rules or 'standard'} rules)" if b.backend == "emulate" else b.backend
    if b.unmeasured:
        what = notes_clause(b.notes, p) or f"{', '.join(b.unmeasured)} never measured on a GPU"
        return (f"Last checked on {who}, not on a GPU: {what}; confirm on the GPU (--confirm-backend ort-cuda, or "
                "precision-doctor probe-ops there).")
    return f"Last checked on {who}, not on a GPU" + (f" ({b.not_on_gpu})." if b.not_on_gpu else ".")


def headline_text(report: Report) -> str:
    """The headline after its label (the CLI styles the label itself): what the run found, the one measured claim,
    the benefit, what it rests on where that qualifies it; then the tolerance against the format's rounding and the
    whole model in low precision, where known."""
    from precision_doctor.render.target import other_runtime_sentence, target_sentence

    st = report.statement
    basis = basis_sentence(st) if Qualifier.ON_THE_EMULATOR in st.qualifiers else None
    runtime = (target_sentence(report, plain=True), other_runtime_sentence(report, short=True)) if st.answered else ()
    return " ".join(x for x in (status_sentence(st), claim_sentence(st), benefit_sentence(st), basis,
                                floor_sentence(report), lowp_sentence(report), *runtime) if x)


def headline(report: Report) -> str:
    """The verdict in one line: its label, then `headline_text`."""
    return f"{report.statement.label}: {headline_text(report)}"


def claim_brief(st: Statement) -> str:
    """The claim as a key figure: "0/8 failed · ≤ 31% of inputs (95%)", "not validated (too few samples)"."""
    c = st.claim
    if c is None:
        return "no answer"
    if c.measured:
        return f"{c.failures}/{c.samples} failed{_on(c.backend)} · ≤ {fmt_rate(c.bound)} of inputs ({c.confidence:.0%})"
    return f"not validated ({str(c.unvalidated).replace('_', ' ')})"


@dataclass(frozen=True)
class Figure:
    """One key figure: its value and what it is."""

    value: str
    label: str


def figures(report: Report) -> list[Figure]:
    """The key figures, as report.html's header and the job page show them."""
    st = report.statement
    cands = report.model.candidates if report.model is not None else None
    share = st.benefit.fp32_flop_share if st.benefit is not None else report.answer.fp32_flop_share
    memo = report.search.memo_hits
    t = report.search.timing
    # without an answer there is no set to count ("0 / 11", "0%" would read as all in low precision)
    kept = f"{int(report.answer.fallback_size)}" + (f" / {cands}" if cands is not None else "") if st.answered else "no answer"
    return [
        Figure(kept, "nodes kept in FP32 (of candidates)"),
        Figure(fmt_short_pct(share) if st.answered else "–", "FP32 share of FLOPs"),
        Figure(f"{report.search.evaluations}", "evaluations" + (f" (+{memo} memo hits)" if memo else "")),
        *((Figure(fmt_time(t.search_s), "search time"), Figure(fmt_time(report.search.elapsed_s), "run time"))
          if t is not None else (Figure(fmt_time(report.search.elapsed_s), "run time"),)),
        Figure(claim_brief(st), "held-out samples of your data"),
        Figure(f"{st.precision} · {report.search.backend}", "precision · backend"),
        Figure(f"{report.search.strategy} · {report.search.cost}", "strategy · cost"),
        Figure(tolerance_text(report.search.tolerance, sep=" · "), "tolerance"),
    ]
