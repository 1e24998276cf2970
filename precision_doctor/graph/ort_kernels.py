"""Op types ONNX Runtime's CUDA provider has no bfloat16 kernel for: a BF16 graph keeps them FP32 (issue 35).

A session over a graph with a BF16 node of such an op fails at creation (`NOT_IMPLEMENTED : Could not find an
implementation for Pow(15) node with name '...'`): ONNX Runtime inserts Casts around a node its provider cannot
run only for FP16 (its insert-cast transformer), not for BF16. `graph.mixed.blocked_ops("bf16")` adds these op
types to the ones kept FP32 in every format (`mixed.FP32_OPS`), each with `reason(op)`.

Source: ONNX Runtime's docs/OperatorKernels.md ("Operators implemented by CUDAExecutionProvider"), at commit
8f063305aacd23aadf77cda4c52e0592a02a7161 of microsoft/onnxruntime: a main-branch snapshot from the 1.17 cycle
(it lists the 1.17 additions to the CUDA provider: SkipGroupNorm, GroupQueryAttention, MatMulNBits,
RotaryEmbedding; no ai.onnx kernel newer than opset 19; no CUDA HardSwish yet). We run onnxruntime-gpu 1.31.1,
which registers more BF16 kernels than that table: the table errs towards FP32 (an op that has a BF16 kernel now
stays FP32 anyway), never towards a failing session. The other direction (an op this table says has BF16 but the
running ONNX Runtime has not) is caught where the sessions are made (`backends.ort.session_keeping_fp32`).

How the table was read: an op type counts as missing BF16 when its newest registered CUDA kernel (the highest
opset version listed) has no tensor(bfloat16) in the type constraint of its floating data; only op types the tool
would put in low precision (a FLOAT output; ai.onnx or com.microsoft; not control flow) are listed. Op types with
no CUDA kernel at all (HardSwish, Mish, GroupNormalization... in that snapshot) run on the CPU provider, which has
no BF16 kernels either: they are left to the session-time net, not listed here. Not checked on a GPU.
"""

from __future__ import annotations

ORT_COMMIT = "8f063305aacd23aadf77cda4c52e0592a02a7161"
ORT_VERSION = "1.17 (main branch)"  # the table's snapshot; we run onnxruntime-gpu 1.31.1

# ai.onnx op types (their newest CUDA kernel's opset in the table in comments where it helps to look them up)
_ONNX = frozenset(
    {
        "Abs", "Affine", "AveragePool", "BatchNormalization", "Ceil", "Clip", "Conv", "ConvTranspose", "Cos",
        "Crop", "CumSum", "DepthToSpace", "DequantizeLinear", "Einsum", "Elu", "Erf", "Exp", "EyeLike", "Floor",
        "GRU", "GlobalAveragePool", "GlobalMaxPool", "HardSigmoid", "ImageScaler", "InstanceNormalization", "LRN",
        "LSTM", "LeakyRelu", "Log", "LogSoftmax", "MaxPool", "Neg", "OneHot", "PRelu", "Pad",  # Pad: 13
        "ParametricSoftplus", "Pow", "RNN", "RandomNormal", "RandomNormalLike", "RandomUniform",  # Pow: 15
        "RandomUniformLike", "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
        "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSumSquare", "Resize", "RoiAlign",  # Resize: 13
        "Round", "ScaledTanh", "Selu", "Shrink", "SimplifiedLayerNormalization", "Sin", "Softplus", "Softsign",
        "SpaceToDepth", "Sqrt", "ThresholdedRelu", "Tile", "TopK", "Upsample", "Where",
    }
)  # fmt: skip
# com.microsoft op types (all opset 1)
_MICROSOFT = frozenset(
    {
        "Attention", "BeamSearch", "BiasAdd", "BiasSoftmax", "BiasSplitGelu", "ComplexMul", "ComplexMulConj",
        "ConvTransposeWithDynamicPads", "DecoderAttention", "DecoderMaskedMultiHeadAttention",
        "DecoderMaskedSelfAttention", "DequantizeWithOrder", "EmbedLayerNormalization", "FusedConv",
        "GatedRelativePositionBias", "Gelu", "GreedySearch", "GridSample", "GroupNorm", "GroupQueryAttention",
        "Inverse", "Irfft", "LongformerAttention", "MatMulBnb4", "MatMulNBits", "MultiHeadAttention",
        "NGramRepeatBlock", "NhwcConv", "PackedAttention", "PackedMultiHeadAttention", "QAttention", "QuickGelu",
        "RelativePositionBias", "RemovePadding", "RestorePadding", "Rfft", "RotaryEmbedding", "Sampling",
        "SkipGroupNorm", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
    }
)  # fmt: skip
NO_BF16_CUDA = _ONNX | _MICROSOFT


def reason(op: str) -> str:
    """Why a node of op type `op` stays FP32 in a BF16 graph (the report's forced-FP32 reason)."""
    return f"{op}: no BF16 kernel in ONNX Runtime CUDA (its operator table, version {ORT_VERSION})"


def runtime_reason(op: str, fused: str | None = None) -> str:
    """Why a node of `op` stays FP32 where the running ONNX Runtime refused a BF16 session for it (the table said
    it had a BF16 kernel, or the op has no CUDA kernel at all); `fused`: the op ONNX Runtime's optimizer made of it
    that has no BF16 kernel (a MatMul fused with its Add into a Gemm)."""
    what = f"{op} fused into {fused}" if fused else op
    return f"{op}: no BF16 kernel in this ONNX Runtime for {what} (a session refused it; kept FP32, made again)"
