"""Sentences about TensorRT and knobs that report.md, report.html and the CLI share: the `trt_check` of
fixed.onnx, the fixed engine, the knob search, named.onnx and the nodes fixed.onnx keeps FP32 too."""

from __future__ import annotations

from precision_doctor.outcome import RunStatus
from precision_doctor.results.report import Report
from precision_doctor.words import counted

SHOWN_MISMATCHES = 3
# Why named.onnx exists and why every command reads it.
NAMED_ONNX_WHY = (
    "TensorRT calls an unnamed node `node_of_<first output>` and ModelOpt AutoCast names nodes its own way, so names "
    "written for the original file would match nothing there (trtexec keeps unmatched layers in FP16 without a word)"
)


def trt_check_sentence(report: Report) -> str | None:
    """What a real TensorRT parser made of fixed.onnx; None when no check was recorded (no passing set)."""
    c = report.tensorrt.check
    if c is None:
        return None
    if not c.ran:
        return f"TensorRT check of fixed.onnx: not run: {c.reason}."
    lib = f"{c.library} {c.version}"
    become = "becomes" if len(c.unmapped) == 1 else "become"
    unmapped = (f"; {counted(len(c.unmapped), 'candidate')} {become} no layer of their own (folded into constants or "
                "shape-only)") if c.unmapped else ""
    if c.passed:
        return (f"TensorRT check of fixed.onnx ({lib}'s parser, strongly typed): {c.layers} layers; every one of the "
                f"{counted(c.checked_layers, 'checked layer')} ({counted(c.checked_nodes, 'node')}) computes in the precision "
                "the answer gives "
                f"it{unmapped}.")
    shown = "; ".join(m.describe() for m in c.mismatches[:SHOWN_MISMATCHES])
    more = f"; and {len(c.mismatches) - SHOWN_MISMATCHES} more" if len(c.mismatches) > SHOWN_MISMATCHES else ""
    return (f"WARNING: TensorRT check of fixed.onnx ({lib}'s parser): {len(c.mismatches)} of {c.checked_layers} checked "
            f"layers do not compute in the precision the answer gives them, so the engine would not run what this "
            f"report says: {shown}{more}.")


def engine_sentence(report: Report) -> str | None:
    """The fixed engine: built (where, for what, how long) or why not; None when not asked for."""
    e = report.tensorrt.engine
    if e is None:
        return None
    if not e.built:
        return f"Fixed engine: not built: {e.reason}."
    targets = " ".join(e.targets)
    where = f"for compute capability {targets}" if e.targets != ["this GPU"] else "for this GPU"
    size = f"{(e.size_bytes or 0) / 2**20:.2f} MiB"
    tactics = f", tactic sources {', '.join(e.tactic_sources)}" if e.tactic_sources is not None else ""
    cache = ""
    if e.cache:
        cache = (f"; its runtime cache goes to {e.cache} when the engine runs" if e.library == "TensorRT-RTX"
                 else f"; timing cache {e.cache}")
    return (f"Fixed engine: {e.plan} built with {e.library} {e.version} {where} in {e.seconds:.2f} s ({size}, "
            f"TF32 {'on' if e.tf32 else 'off'}{tactics}){cache}.")


def knobs_sentence(report: Report) -> str | None:
    """What the knob search found; None when it was not asked for."""
    k = report.checks.knobs
    if k is None:
        return None
    if not k.configurations:
        return f"Knobs: {k.note}."
    head = (f"Knobs on {k.backend} ({counted(len(k.configurations), 'configuration')}, "
            f"{counted(k.evaluations, 'evaluation')} over {counted(k.samples, 'sample')}")
    head += ")" if k.status == RunStatus.COMPLETE else f", stopped early: {k.status})"
    if k.best is None:
        text = f"{head}: no trial passed, not even the answer under the default configuration; the answer is kept"
    elif k.changed_answer:
        text = (f"{head}: with {k.best} the answer needs {counted(len(k.answer), 'FP32 node')} instead of "
                f"{len(k.searched_answer)}; the fixed model and the commands carry that configuration")
    else:
        text = f"{head}: no configuration lets fewer FP32 nodes pass; the answer stays, under the default configuration"
    if k.tolerance_used is not None:
        text += f" (it uses {100 * k.tolerance_used:.1f}% of the tolerance there)"
    if k.note:
        text += f". Note: {k.note}"
    return text + "."


def named_onnx_sentence(report: Report) -> str | None:
    """Why the commands read named.onnx; None when the model's own file carries the report's names."""
    if "named_onnx" not in report.answer.artifacts:
        return None
    renamed = len(report.model.renamed_nodes) if report.model is not None else 0
    return (f"Every command reads {report.answer.artifacts['named_onnx']}, the model with the node names this report uses "
            f"({counted(renamed, 'node')} had no name, a duplicate one or one unsafe in scripts): {NAMED_ONNX_WHY}.")


def forced_intro(report: Report) -> str:
    n = len(report.answer.forced_fp32_nodes)
    return (f"fixed.onnx keeps {counted(n, 'node')} in FP32 beyond the answer, for the reasons below; the TensorRT 10 "
            "and AutoCast commands list them with the answer, so every tool builds what fixed.onnx holds.")


def outcome_lines(report: Report) -> list[tuple[str, bool]]:
    """The lines the CLI prints after a diagnosis, one each for the TensorRT check, the engine and the knobs:
    (text, is_warning)."""
    out = []
    c, e = report.tensorrt.check, report.tensorrt.engine
    if c is not None and not c.ran:
        out.append((f"TensorRT check: not run: {c.reason}", False))
    elif c is not None:
        head = f"TensorRT check of fixed.onnx ({c.library} {c.version} parser): {c.layers} layers"
        if c.passed:
            out.append((f"{head}, {c.checked_layers} checked over {counted(c.checked_nodes, 'node')}, 0 mismatches", False))
        else:
            shown = "; ".join(m.describe() for m in c.mismatches[:SHOWN_MISMATCHES])
            out.append((f"WARNING: {head}, {len(c.mismatches)} of {c.checked_layers} checked layers disagree with the "
                        f"answer (the engine would not run what the report says): {shown}", True))
    if e is not None:
        out.append((f"engine: {e.plan} ({e.library} {e.version}, {' '.join(e.targets)}, {e.seconds:.2f} s)" if e.built
                     else f"engine: not built: {e.reason}", False))
    if text := knobs_sentence(report):
        out.append((text.replace("`", ""), False))
    return out


# -- sections --------------------------------------------------------------------------------------------


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_sections(report: Report) -> list[str]:
    """report.md's lines for the forced FP32 nodes, the TensorRT check's mismatches and the knob trials."""
    L: list[str] = []
    forced = report.answer.forced_fp32_nodes
    if forced:
        L += [f"## Nodes fixed.onnx keeps in FP32 beyond the answer ({len(forced)})", "", forced_intro(report), "",
              "| Node | Why |", "| --- | --- |"]
        L += [f"| `{_md(n)}` | {_md(why)} |" for n, why in forced.items()]
        L.append("")
    c = report.tensorrt.check
    if c is not None and c.ran and (c.mismatches or c.unmapped):
        L += ["## TensorRT check of fixed.onnx", ""]
        if c.mismatches:
            L += ["| Node | Role | Layer | Layer type | Expected | Found |", "| --- | --- | --- | --- | --- | --- |"]
            L += [f"| `{_md(m.node)}` | {m.role} | `{_md(m.layer)}` | {m.layer_type} | {m.expected} | {'/'.join(m.found)} |"
                  for m in c.mismatches]
            L.append("")
        if c.unmapped:
            L += ["Candidates no layer comes from (folded into constants, or shape-only): "
                  + ", ".join(f"`{_md(n)}`" for n in c.unmapped), ""]
    k = report.checks.knobs
    if k is not None and k.trials:
        L += [f"## Knobs on {k.backend}", "", "| Configuration | FP32 nodes | Trial | Result | Tolerance used |",
              "| --- | ---: | --- | --- | ---: |"]
        for t in k.trials:
            if t.passed is None:
                continue
            used = f"{100 * t.tolerance_used:.1f} %" if t.tolerance_used is not None else "—"
            L.append(f"| `{_md(t.knobs)}` | {t.fallback_size} | {_md(t.why)} | {'pass' if t.passed else 'fail'} | {used} |")
        skipped = sum(t.passed is None for t in k.trials)
        if skipped:
            L += ["", f"{counted(skipped, 'further trial')} not evaluated: none could need fewer FP32 nodes than a passing "
                  "one."]
        L.append("")
    return L


def html_sections(report: Report) -> str:
    """report.html's sections for the same (see `markdown_sections`)."""
    from html import escape

    def e(v: object) -> str:
        return escape(str(v))

    out = []
    forced = report.answer.forced_fp32_nodes
    if forced:
        rows = "".join(f'<tr><td class="name">{e(n)}</td><td>{e(why)}</td></tr>' for n, why in forced.items())
        out.append(f'<section id="forced"><h2>Nodes fixed.onnx keeps in FP32 beyond the answer ({len(forced)})</h2>'
                   f"<p>{e(forced_intro(report))}</p><table><thead><tr><th>Node</th><th>Why</th></tr></thead>"
                   f"<tbody>{rows}</tbody></table></section>")
    c = report.tensorrt.check
    if c is not None and c.ran and (c.mismatches or c.unmapped):
        body = ""
        if c.mismatches:
            rows = "".join(
                f'<tr><td class="name">{e(m.node)}</td><td>{e(m.role)}</td><td class="name">{e(m.layer)}</td>'
                f"<td>{e(m.layer_type)}</td><td>{e(m.expected)}</td><td class=\"bad\">{e('/'.join(m.found))}</td></tr>"
                for m in c.mismatches)
            body += ("<table><thead><tr><th>Node</th><th>Role</th><th>Layer</th><th>Layer type</th><th>Expected</th>"
                     f"<th>Found</th></tr></thead><tbody>{rows}</tbody></table>")
        if c.unmapped:
            body += ("<p>Candidates no layer comes from (folded into constants, or shape-only): "
                     + ", ".join(f"<code>{e(n)}</code>" for n in c.unmapped) + "</p>")
        out.append(f'<section id="trt-check"><h2>TensorRT check of fixed.onnx</h2>{body}</section>')
    k = report.checks.knobs
    if k is not None and k.trials:
        rows = "".join(
            f'<tr><td class="name">{e(t.knobs)}</td><td class="n">{t.fallback_size}</td><td>{e(t.why)}</td>'
            f"<td class=\"{'ok' if t.passed else 'bad'}\">{'pass' if t.passed else 'fail'}</td>"
            f'<td class="n">{"—" if t.tolerance_used is None else f"{100 * t.tolerance_used:.1f} %"}</td></tr>'
            for t in k.trials if t.passed is not None)
        skipped = sum(t.passed is None for t in k.trials)
        note = (f"<p class=\"muted\">{counted(skipped, 'further trial')} not evaluated: none could need fewer FP32 nodes "
                "than a passing one.</p>") if skipped else ""
        out.append(f'<section id="knobs"><h2>Knobs on {e(k.backend)}</h2><table><thead><tr><th>Configuration</th>'
                   '<th class="n">FP32 nodes</th><th>Trial</th><th>Result</th><th class="n">Tolerance used</th></tr>'
                   f"</thead><tbody>{rows}</tbody></table>{note}</section>")
    return "".join(out)
