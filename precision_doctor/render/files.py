"""What each file of a run directory is, in words: report.json's `artifacts` (`ARTIFACT_TITLES`), the other files
a run writes (`OTHER_FILES`), and `files(report)`: every file the report knows, the report and fixed.onnx first."""

from __future__ import annotations

from pathlib import Path

from precision_doctor.results.report import Report

ARTIFACT_TITLES = {
    "fixed_onnx": "the fixed model: your model in low precision with the FP32 nodes kept in FP32 (Casts only at "
                  "the borders of FP32 regions); build it with TensorRT 11, or strongly typed on 10",
    "activations": "every layer's activations in FP32, in low precision and after the fix (HDF5), for your own "
                   "analysis",
    "activations_summary": "the per-layer analysis (error statistics of every tensor), the graph outputs in FP32, in "
                           "low precision and after the fix, and the activations of the top layers of the ranking "
                           "(HDF5; --keep-activations names others, all keeps every layer's)",
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


FIRST = ("report_html", "fixed_onnx")  # the files a reader wants first
OTHER_FILES = {"report.json": "this report's data: the verdict, the FP32 nodes and every figure, as JSON",
               "run_settings.json": "the run's settings (what --resume continues with)",
               "references.h5": "the FP32 reference outputs of the samples, computed once (HDF5)",
               "loader_samples.h5": "the samples your --data-loader-script yielded, kept so that --resume reads the same",
               "search_rounds.jsonl": "the counterexample-guided search's rounds: each answer, the samples it was checked "
                                      "on and those it failed (what --resume continues from)",
               "repair.jsonl": "the repair's evaluations, with the held-out samples that failed the first answer (what "
                               "--resume continues from)",
               "other-tensorrt.jsonl": "the answer's check for TensorRT, the runtime it is not for (what --resume continues "
                                       "from)",
               "other-ort-cuda.jsonl": "the answer's check for ONNX Runtime CUDA, the runtime it is not for (what --resume "
                                       "continues from)",
               "other-tensorrt-gated.jsonl": "that answer grown for TensorRT on the GPU's gated graph, before the real "
                                             "graph checks it (what --resume continues from)",
               "other-ort-cuda-gated.jsonl": "that answer grown for ONNX Runtime CUDA on the GPU's gated graph, before "
                                             "the real graph checks it (what --resume continues from)",
               "other-tensorrt-gated-rounds.jsonl": "the rounds of that growing for TensorRT: each answer, the samples "
                                                    "it was checked on and those it failed (what --resume continues "
                                                    "from)",
               "other-ort-cuda-gated-rounds.jsonl": "the rounds of that growing for ONNX Runtime CUDA: each answer, the "
                                                   "samples it was checked on and those it failed (what --resume "
                                                   "continues from)",
               "confirm.jsonl": "the confirmation's evaluations on the confirm backend (what --resume continues from)",
               "confirm-every.jsonl": "the confirmation's evaluations with every search sample from the start (on a GPU, where "
                                     "a timed trial chose it; what --resume continues from)",
               "tensorrt/": "where the answer fails on TensorRT: TensorRT's own answer (its fixed.onnx, scripts, lists)",
               "ort-cuda/": "where the answer fails on ONNX Runtime CUDA: its own answer (fixed.onnx and lists)",
               "timing.cache": "TensorRT's timing cache of the engine build (--engine)",
               "runtime.cache": "TensorRT-RTX's runtime cache of the engine build (--engine)",
               "named.onnx.data": "the external data of named.onnx (a model larger than 2 GB)",
               "fixed.onnx.data": "the weights of fixed.onnx (a model larger than 2 GB): keep it beside fixed.onnx",
               "precision-doctor-error.log": "written only after an internal error: its traceback, to report it"}


def files(report: Report) -> dict[str, str]:
    """The run directory's files the report knows, file name -> what it is: the report and fixed.onnx first."""
    keys = sorted(report.answer.artifacts, key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST)))
    named = {str(report.answer.artifacts[k]): artifact_title(k) for k in keys if report.answer.artifacts[k]}
    folders = {f"{name.rstrip('/')}/": about for name, about in named.items() if "." not in Path(name).name}
    return {**named, **folders, **OTHER_FILES}
