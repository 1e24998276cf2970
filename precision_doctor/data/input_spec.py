"""InputSpec: where a run's samples come from (the RunSpec's `inputs` section, defined here, in the data layer that
reads it, as `Tolerance` is in measure/tolerance.py; spec.py assembles the sections and holds their JSON form)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputSpec:
    """How to obtain the samples: files, or generated ones; and which are held out."""

    files: tuple[str, ...] = ()  # sample files, directories of them, globs (data/sources.py)
    data_loader_script: str | None = None  # FILE[:FUNC], polygraphy's convention (data/loader_script.py)
    max_samples: int | None = None  # at most this many of the samples found (a seeded, spread-out choice)
    samples: int = 4  # generated samples when no files are given
    seed: int = 0
    val_ranges: tuple[str, ...] = ()  # "name:[lo,hi]" or "[lo,hi]" (every input)
    input_shapes: tuple[str, ...] = ()  # "name:[d0,d1,...]" for dynamic dimensions
    allow_nonfinite: bool = False
    validate_files: tuple[str, ...] = ()  # held-out sample files
    validation_split: float | None = None  # held-out share of `files` (0.25) or of generated samples (0.5)
    reference_outputs: str | None = None  # polygraphy --save-outputs JSON: the FP32 reference instead of ORT

    @property
    def from_user(self) -> bool:
        """Whether the samples are the user's data (files, a loader script) rather than generated."""
        return bool(self.files or self.validate_files or self.data_loader_script)

    def describe(self) -> dict:
        """Where the samples came from, as report.json's `inputs` says it."""
        ref = {"reference_outputs": self.reference_outputs} if self.reference_outputs else {}
        if self.max_samples is not None:
            ref["max_samples"] = self.max_samples
        if self.data_loader_script:
            return {"data_loader_script": self.data_loader_script, **ref}
        if self.files:
            return {"files": [str(f) for f in self.files], **ref}
        return {"generated": self.samples, "seed": self.seed, "val_ranges": list(self.val_ranges), **ref}
