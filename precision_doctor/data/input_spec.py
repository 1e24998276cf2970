"""InputSpec: where a run's samples come from (the RunSpec's `inputs` section, defined here, in the data layer that
reads it, as `Tolerance` is in measure/tolerance.py; spec.py assembles the sections and holds their JSON form), and
what the files that give them may declare.

The limits bound what a sample file's headers may *declare* and what a run holds in memory, not how much data a
user may have: each is checked from the headers (shape x dtype itemsize) before anything is read, by
data/arrayfiles.py and data/sources.py, and refused in one line naming the file and the array (docs/SECURITY.md
lists them). A run reads its samples one at a time (at most data/samples.CACHE_BYTES of them kept), so a directory
of thousands of 1024x1024x3 float32 images (12 MiB each, tens of GB in all) stays well inside every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_ELEMENTS = 2**28  # elements of one array where the model fixes no size (1 GiB of float32)
MAX_ELEMENTS_SHOWN = "2**28 = 268,435,456"
MAX_SAMPLE_BYTES = 2**31  # one sample, every input together (2 GiB: a 2**28-element float64 input); held in memory whole
MAX_FILE_BYTES = 2**36  # every array of one file (64 GiB, read a sample at a time): what a compressed member may inflate to
MAX_RUN_BYTES = 2**40  # every sample of a run, search and held-out (1 TiB, read a sample at a time)
MAX_FILE_SAMPLES = 2**20  # samples one .npz/.npy may declare
MAX_RUN_SAMPLES = 2**20  # samples of one run (or one service job), search and held-out together: 1,048,576
MAX_LOADER_SAMPLES = 100_000  # a data loader script yielding more (an endless generator?) is stopped and refused


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
