"""The low-precision formats: their ONNX type, numpy rounding and range limits."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from onnx import TensorProto

from precision_doctor.errors import UserError


@dataclass(frozen=True)
class Format:
    """A low-precision storage format."""

    name: str
    onnx_type: int
    np_dtype: np.dtype
    max: float
    smallest_normal: float
    unit_roundoff: float

    def round(self, x: np.ndarray) -> np.ndarray:
        """Round to this format and back (round to nearest even), keeping the dtype of `x`."""
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            return x
        with np.errstate(over="ignore"):
            return x.astype(self.np_dtype).astype(x.dtype)


FP16 = Format("fp16", TensorProto.FLOAT16, np.dtype(np.float16), 65504.0, 2.0**-14, 2.0**-11)
BF16 = Format(
    "bf16",
    TensorProto.BFLOAT16,
    np.dtype(ml_dtypes.bfloat16),
    float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
    float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_normal),
    2.0**-8,
)
FORMATS = {"fp16": FP16, "bf16": BF16}


def get_format(name: str) -> Format:
    try:
        return FORMATS[name.lower()]
    except KeyError:
        raise UserError(f"unknown precision '{name}'; choose one of: {', '.join(FORMATS)}") from None
