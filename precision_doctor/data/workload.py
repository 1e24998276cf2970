"""A model and its samples, ready to run: what `compare`, `diagnose` and `batch` start from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from precision_doctor.data.arrayfiles import Bounds
from precision_doctor.data.input_spec import InputSpec
from precision_doctor.data.inputs import (
    InputValues,
    conform_to,
    first_of_each,
    generate_samples,
    input_bounds,
    load_samples,
    model_inputs,
    validate_samples,
)
from precision_doctor.data.loader_script import run_loader
from precision_doctor.data.references import Outputs, check_count, load_reference_outputs
from precision_doctor.data.samples import SampleSet, ShapeGroup, capture_choice, spread_choice
from precision_doctor.data.spill import Spill
from precision_doctor.errors import UserError
from precision_doctor.graph.model import Model, load_model
from precision_doctor.runfiles import RunDir

LOADER_SAMPLES = "loader_samples.h5"  # a data loader script's samples, kept in the run directory


@dataclass(frozen=True)
class Chosen:
    """`--max-samples`: how many samples were found, and the labels of those chosen (in their order)."""

    found: int
    labels: tuple[str, ...]


@dataclass
class Workload:
    """The loaded model, its search samples (a SampleSet: loaded on demand), and how they were obtained (`inputs`, the
    settings as given; `values`, what their strings mean). `references` are the FP32 outputs of
    `inputs.reference_outputs` (None: ONNX Runtime computes them), one per sample; once held-out samples are split
    off (`pipeline.heldout`), `held` holds those and `held_references` pairs with them. `chosen`: what
    `--max-samples` kept; `spill`: a data loader script's samples on disk (kept in the run directory by `keep_in`);
    `capture`: which search samples the capture runs on; `bounds`: what the run's sample files may declare, with the
    budget its files have used (the held-out files count into it too); `digests`: each search sample's contents'
    digest; `repeated`: samples of the user's that repeat an earlier one (each with the one it repeats), dropped."""

    model: Model
    samples: SampleSet
    inputs: InputSpec = field(default_factory=InputSpec)
    values: InputValues = field(default_factory=InputValues)
    references: list[Outputs] | None = None
    held_references: list[Outputs] | None = None
    held: SampleSet | None = None
    chosen: Chosen | None = None
    spill: Spill | None = None
    capture: list[int] | None = None  # the search samples the capture runs on (capture_choice), in capture order
    bounds: Bounds | None = None
    digests: list[str] = field(default_factory=list)  # each sample's contents' digest (data.inputs.sample_digest)
    repeated: list[tuple[str, str]] = field(default_factory=list)  # (a sample, the earlier one it repeats): dropped
    held_repeated: int = 0  # --validate-inputs samples that repeated an earlier one: dropped

    def __post_init__(self) -> None:
        if not isinstance(self.samples, SampleSet):
            self.samples = SampleSet.of(self.samples)

    def describe(self) -> dict:
        """Where the samples came from, as report.json's `inputs` and the activation store say it."""
        out = self.inputs.describe()
        if self.chosen is not None:
            out.update(found=self.chosen.found, chosen=list(self.chosen.labels))
        if self.repeated:
            out.update(repeated=[list(pair) for pair in self.repeated])
        if self.held_repeated:
            out.update(held_repeated=self.held_repeated)
        return out

    def choose_capture(self, k: int, scores: Sequence[float] | None = None) -> list[int]:
        """Choose the search samples the capture runs on (`capture.max_samples` = k; `scores`: each search
        sample's all-low-precision share of the tolerance, when known: data.samples.capture_choice)."""
        self.capture = capture_choice(scores, self.samples.groups(), k)
        return self.capture

    def captured(self) -> SampleSet:
        """The samples the capture runs on (all search samples until `capture` is chosen)."""
        return self.samples if self.capture is None else self.samples.subset(self.capture)

    def shape_groups(self) -> list[tuple[ShapeGroup, int, int, int]]:
        """Each shape group with its numbers of search, held-out and captured samples, the largest first."""
        held = self.held.groups() if self.held is not None else {}
        search = self.samples.groups()
        captured = self.captured().groups() if self.capture is not None else {}
        groups = list(search) + [g for g in held if g not in search]
        rows = [(g, len(search.get(g, ())), len(held.get(g, ())), len(captured.get(g, ()))) for g in groups]
        return sorted(rows, key=lambda r: -(r[1] + r[2]))

    def keep_in(self, run_dir: RunDir) -> None:
        """Move a data loader script's samples into the run directory (`LOADER_SAMPLES`, in its manifest), where
        a resumed run reads them instead of running the script again."""
        if self.spill is not None:
            run_dir.written(run_dir.root / LOADER_SAMPLES)
            self.spill.move_to(run_dir.root / LOADER_SAMPLES, run_dir)


def load_workload(model_path: str, opts: InputSpec, values: InputValues, run_dir: Path | None = None,
                  check_model: Callable[[Model], None] | None = None) -> Workload:
    """Load and validate the model at `model_path` and the samples `opts` (a RunSpec's `inputs`, with `values`: what
    its strings mean) say; raises UserError with a one-line reason. `run_dir`: the run directory of a run being
    resumed, whose kept loader samples are read instead of running the script. `check_model` sees the model before
    any sample is read."""
    model = load_model(model_path, input_shapes=values.input_shapes or None)
    if check_model is not None:
        check_model(model)
    if not any(n.is_candidate for n in model.nodes):
        raise UserError(f"{model_path}: the model has no floating-point tensors to run in low precision")
    spill = None
    bounds = input_bounds(model)  # the run's: its search and held-out files count into one budget
    if opts.data_loader_script:
        samples, spill = _loader_samples(opts.data_loader_script, model, bounds, run_dir)
    elif opts.files:
        samples = load_samples(opts.files, bounds, model=model)
    else:
        samples = SampleSet.of(generate_samples(model, opts.samples, opts.seed, values.val_ranges))
    refs = load_reference_outputs(opts.reference_outputs, model) if opts.reference_outputs else None
    chosen = None
    if opts.max_samples is not None and len(samples) > opts.max_samples and (opts.files or opts.data_loader_script):
        found = len(samples)
        if refs is not None and len(refs) < found:  # they pair with the files' samples, then the held-out ones
            check_count(opts.reference_outputs, refs, found, "{inputs.files}")
        keep = spread_choice(samples.groups(), opts.max_samples, opts.seed)
        chosen = Chosen(found, tuple(samples.label(i) for i in keep))
        samples = samples.subset(keep)
        if refs is not None:
            refs = [refs[i] for i in keep] + refs[found:]
    digests = validate_samples(model, samples, opts.allow_nonfinite)
    repeated: list[tuple[str, str]] = []
    if opts.files or opts.data_loader_script:  # a sample given twice counts once: a copy held out would validate nothing
        keep, repeats = first_of_each(digests)
        repeated = [(samples.label(i), samples.label(j)) for i, j in repeats]
        if repeated:
            n = len(samples)
            if refs is not None and len(refs) < n:  # too few to pair with the files: said before any is dropped
                check_count(opts.reference_outputs, refs, n, "{inputs.files}")
            samples, digests = samples.subset(keep), [digests[i] for i in keep]
            if refs is not None:
                refs = [refs[i] for i in keep] + refs[n:]
    return Workload(model, samples, opts, values, refs, chosen=chosen, spill=spill, bounds=bounds, digests=digests,
                    repeated=repeated)


def _loader_samples(value: str, model: Model, bounds: Bounds, run_dir: Path | None) -> tuple[SampleSet, Spill]:
    """A data loader script's samples: those a resumed run kept, or the script run once and spilled."""
    kept = run_dir / LOADER_SAMPLES if run_dir is not None else None
    if kept is not None and kept.is_file():
        spill, entries = Spill.reopen(kept, bounds)
    else:
        spill = Spill(bounds=bounds)
        entries = run_loader(value, bounds, spill)
    return SampleSet(entries, conform_to(model_inputs(model))), spill
