"""Small models with planted FP16 defects, for tests, benchmarks and the demo.

Each case knows which nodes must run in FP32 (the certified minimum under its tolerance) and how
to make input samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # ONNX Runtime 1.2x reads IR <= 10 at least
OPSET = 18


@dataclass
class PlantedCase:
    """A model with a known defect."""

    name: str
    model: onnx.ModelProto
    expected: set[str]  # the minimal FP32 fallback set under `atol`/`rtol`
    first_divergence: str | None  # first diverging tensor of the all-FP16 run
    make_input: Callable[[np.random.Generator], dict[str, np.ndarray]]
    atol: float = 1e-2
    rtol: float = 1e-2
    planted: set[str] = field(default_factory=set)  # nodes that introduce the error

    def samples(self, n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        return [self.make_input(rng) for _ in range(n)]


class _G:
    """A tiny graph builder: nodes get the names they are given."""

    def __init__(self, seed: int = 0):
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self._n = 0

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def const_i64(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.int64), name))
        return name

    def op(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def dense(self, x: str, k: int, m: int, name: str, scale: float | None = None) -> str:
        w = self.rng.standard_normal((k, m)).astype(np.float32) * np.float32(scale or 1.0 / np.sqrt(k))
        return self.op("MatMul", [x, self.const(f"{name}_w", w)], name)

    def model(self, inputs: dict[str, list[int]], outputs: list[str], name: str) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            self.inits,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
        m.producer_name = "precision-doctor-planted"
        return onnx.shape_inference.infer_shapes(m)


def _normal(shape, scale=1.0, offset=0.0):
    return lambda rng: {"x": (rng.standard_normal(shape) * scale + offset).astype(np.float32)}


def overflow_island() -> PlantedCase:
    """MatMul whose outputs exceed 65504, a bias Add, then a Div that rescales into range."""
    g = _G(1)
    h = g.op("Relu", [g.dense("x", 32, 32, "pre")], "pre_relu")
    big = g.op("MatMul", [h, g.const("big_w", g.rng.uniform(2000, 4000, (32, 16)))], "big_matmul")
    b = g.op("Add", [big, g.const("big_b", np.full(16, 10.0))], "bias_add")
    s = g.op("Div", [b, g.const("scale", np.float32(1000.0))], "rescale")
    y = g.op("Tanh", [g.dense(s, 16, 8, "head", 0.05)], "head_tanh")
    planted = {"big_matmul", "bias_add", "rescale"}
    m = g.model({"x": [2, 32]}, [y], "overflow_island")
    return PlantedCase("overflow_island", m, planted, "big_matmul_out", _normal((2, 32), 3.0, 2.0), planted=planted)


def softmax_no_max() -> PlantedCase:
    """Softmax written as Exp / ReduceSum(Exp) without subtracting the max: Exp overflows."""
    g = _G(2)
    logits = g.op("Mul", [g.dense("x", 16, 32, "proj"), g.const("temp", np.float32(6.0))], "logit_scale")
    e = g.op("Exp", [logits], "exp")
    s = g.op("ReduceSum", [e, g.const_i64("axes", [-1])], "sum", keepdims=1)
    p = g.op("Div", [e, s], "normalize")
    y = g.dense(p, 32, 4, "cls", 1.0)
    m = g.model({"x": [4, 16]}, [y], "softmax_no_max")
    planted = {"exp", "sum", "normalize"}
    return PlantedCase("softmax_no_max", m, planted, "exp_out", _normal((4, 16), 1.0), planted={"exp"})


def large_reducesum() -> PlantedCase:
    """A mean computed as ReduceSum / N over many large values: the sum exceeds 65504."""
    g = _G(3)
    a = g.op("Relu", [g.dense("x", 4096, 64, "enc")], "enc_relu")
    s = g.op("ReduceSum", ["x", g.const_i64("axes", [-1])], "big_sum", keepdims=1)
    mean = g.op("Div", [s, g.const("count", np.float32(4096.0))], "mean_div")
    y = g.op("Add", [a, mean], "combine")
    m = g.model({"x": [2, 4096]}, [y], "large_reducesum")
    planted = {"big_sum", "mean_div"}
    mk = lambda rng: {"x": rng.uniform(20, 40, (2, 4096)).astype(np.float32)}  # noqa: E731
    return PlantedCase("large_reducesum", m, planted, "big_sum_out", mk, planted={"big_sum"})


def cancellation() -> PlantedCase:
    """x + 4096 - 4096: FP16 spacing at 4096 is 4, so the small x is destroyed."""
    g = _G(4)
    h = g.op("Tanh", [g.dense("x", 16, 16, "pre")], "pre_tanh")
    up = g.op("Add", [h, g.const("offset", np.float32(4096.0))], "add_offset")
    down = g.op("Sub", [up, g.const("offset2", np.float32(4096.0))], "sub_offset")
    y = g.dense(down, 16, 8, "post")
    m = g.model({"x": [2, 16]}, [y], "cancellation")
    planted = {"add_offset", "sub_offset"}
    return PlantedCase("cancellation", m, planted, "sub_offset_out", _normal((2, 16)), planted=planted)


def near_constant_norm() -> PlantedCase:
    """Normalization of features that sit near 1000 with tiny spread: x - mean(x) cancels."""
    g = _G(5)
    mean = g.op("ReduceMean", ["x", g.const_i64("axes", [-1])], "mean", keepdims=1)
    d = g.op("Sub", ["x", mean], "center")
    v = g.op("ReduceMean", [g.op("Mul", [d, d], "square"), g.const_i64("axes2", [-1])], "var", keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [v, g.const("eps", np.float32(1e-6))], "add_eps")], "std")
    y = g.op("Div", [d, std], "normalize")
    m = g.model({"x": [2, 256]}, [y], "near_constant_norm")
    planted = {"mean", "center"}
    return PlantedCase(
        "near_constant_norm", m, planted, "center_out", _normal((2, 256), 0.05, 1000.0), planted=planted
    )


def deep_stack_one_bad(depth: int = 24, bad: int = 15) -> PlantedCase:
    """A deep stack of benign dense+tanh layers; one layer scales by 1e5 and back down by 1e-5."""
    g = _G(6)
    h = "x"
    for i in range(depth):
        h = g.op("Tanh", [g.dense(h, 32, 32, f"l{i}_mm")], f"l{i}_tanh")
        if i == bad:
            up = g.op("Mul", [h, g.const("up", np.float32(1e5))], f"l{i}_scale_up")
            h = g.op("Mul", [up, g.const("down", np.float32(1e-5))], f"l{i}_scale_down")
    m = g.model({"x": [2, 32]}, [h], "deep_stack_one_bad")
    # The minimum is the up-scaling Mul alone: its constant 1e5 does not fit FP16, the values do.
    planted = {f"l{bad}_scale_up"}
    return PlantedCase("deep_stack_one_bad", m, planted, f"l{bad}_scale_up_out", _normal((2, 32)), planted=planted)


def three_defects() -> PlantedCase:
    """An overflow, a softmax without max and a cancellation in one model."""
    g = _G(7)
    up = g.op("Mul", ["x", g.const("up", np.float32(3e4))], "scale_up")
    sq = g.op("Add", [up, up], "double")  # up to ~1.8e5: overflows
    down = g.op("Div", [sq, g.const("down", np.float32(6e4))], "scale_down")
    logits = g.op("Mul", [g.dense(down, 16, 16, "proj", 1.0), g.const("temp", np.float32(8.0))], "logit_scale")
    e = g.op("Exp", [logits], "exp")
    p = g.op("Div", [e, g.op("ReduceSum", [e, g.const_i64("axes", [-1])], "sum", keepdims=1)], "normalize")
    c1 = g.op("Add", [p, g.const("off", np.float32(2048.0))], "add_offset")
    c2 = g.op("Sub", [c1, g.const("off2", np.float32(2048.0))], "sub_offset")
    y = g.dense(c2, 16, 4, "head", 1.0)
    m = g.model({"x": [2, 16]}, [y], "three_defects")
    planted = {"double", "scale_down", "exp", "sum", "normalize", "add_offset", "sub_offset"}
    mk = lambda rng: {"x": rng.uniform(1.0, 2.0, (2, 16)).astype(np.float32)}  # noqa: E731
    return PlantedCase("three_defects", m, planted, "double_out", mk, planted={"double", "exp", "sub_offset"})


def clean() -> PlantedCase:
    """A benign MLP: all-FP16 meets the tolerance."""
    g = _G(8)
    h = "x"
    for i in range(4):
        h = g.op("Relu", [g.dense(h, 32, 32, f"l{i}_mm")], f"l{i}_relu")
    m = g.model({"x": [2, 32]}, [h], "clean")
    return PlantedCase("clean", m, set(), None, _normal((2, 32)))


def dynamic_image() -> PlantedCase:
    """A text-line classifier with a dynamic batch (-1), height and width (`h`, `w`), as Paddle exports them:
    an overflow after its first convolution (scaled up, doubled, scaled down), then pooling, a head and a
    softmax whose output the model declares [-1, 2]. Not in CASES: its samples are 1x3x48x192 crops."""
    g = _G(9)
    w = g.rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * np.float32(0.5)
    conv = g.op("Relu", [g.op("Conv", ["x", g.const("conv_w", w)], "conv", pads=[1, 1, 1, 1])], "relu")
    up = g.op("Mul", [conv, g.const("up", np.float32(2e4))], "scale_up")
    sq = g.op("Add", [up, up], "double")  # beyond 65504 where the ReLU gives more than 1.64
    down = g.op("Div", [sq, g.const("down", np.float32(4e4))], "scale_down")
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [down], "pool")], "flat")
    y = g.op("Softmax", [g.dense(pooled, 8, 2, "head", 1.0)], "softmax", axis=-1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "h", "w"])
    out = helper.make_tensor_value_info(y, TensorProto.FLOAT, [-1, 2])
    graph = helper.make_graph(g.nodes, "dynamic_image", [x], [out], g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    m.producer_name = "precision-doctor-planted"
    planted = {"double", "scale_down"}
    mk = lambda rng: {"x": rng.uniform(0.0, 1.0, (1, 3, 48, 192)).astype(np.float32)}  # noqa: E731
    return PlantedCase("dynamic_image", m, planted, "double_out", mk, planted={"double"})


def _layernorm(g: _G, x: str, d: int, name: str, scale: np.ndarray, opset: int) -> str:
    """A LayerNorm over the last axis as exports below opset 17 write it: ReduceMean, Sub, Pow, ReduceMean, Add(eps),
    Sqrt, Div, Mul(scale), Add(bias) (the pattern ONNX Runtime fuses into LayerNormalization)."""
    def mean(t: str, n: str) -> str:
        if opset >= 18:
            return g.op("ReduceMean", [t, g.const_i64(f"{n}_axes", [-1])], n, keepdims=1)
        return g.op("ReduceMean", [t], n, axes=[-1], keepdims=1)

    diff = g.op("Sub", [x, mean(x, f"{name}_mean")], f"{name}_sub")
    var = mean(g.op("Pow", [diff, g.const(f"{name}_two", np.float32(2.0))], f"{name}_pow"), f"{name}_var")
    std = g.op("Sqrt", [g.op("Add", [var, g.const(f"{name}_eps", np.float32(1e-5))], f"{name}_add_eps")], f"{name}_sqrt")
    norm = g.op("Div", [diff, std], f"{name}_div")
    scaled = g.op("Mul", [norm, g.const(f"{name}_gamma", scale)], f"{name}_mul")
    return g.op("Add", [scaled, g.const(f"{name}_beta", 0.02 * g.rng.standard_normal(d))], f"{name}_add")


LAYERNORM_NODES = ("mean", "sub", "pow", "var", "add_eps", "sqrt", "div", "mul", "add")


def layernorm_block(opset: int = 14, seq: int = 16, d: int = 64) -> PlantedCase:
    """A post-LN transformer encoder block as BERT-class models export below opset 17 (issue 35's MPNet): self-
    attention, residual Add, decomposed LayerNorm `ln1`, a feed-forward MatMul-Relu-MatMul, residual Add, decomposed
    LayerNorm `ln2`. The residual stream carries a few outlier channels in the hundreds (as trained encoders do; the
    LayerNorms' scale keeps them there), so `(x - mean)**2` exceeds FP16's 65504 in both LayerNorms' Pow: an FP16
    LayerNorm built from its nodes overflows (TensorRT), a fused one computed in FP32 does not (ONNX Runtime).
    `expected`: the Pow and variance ReduceMean of both LayerNorms (the nodes that overflow and the one that reads the
    overflowing square); the answer for TensorRT must hold them, the one for ONNX Runtime CUDA need not."""
    g = _G(35)
    outliers = [3, 17, 42]
    gamma = np.ones(d, dtype=np.float32)
    gamma[outliers] = 60.0

    def attention(x: str) -> str:
        q, k, v = (g.dense(x, d, d, f"attn_{w}", 0.02) for w in "qkv")
        kt = g.op("Transpose", [k], "attn_kt", perm=[0, 2, 1])
        scores = g.op("Div", [g.op("MatMul", [q, kt], "attn_scores"), g.const("attn_scale", np.float32(np.sqrt(d)))],
                      "attn_scale_div")
        probs = g.op("Softmax", [scores], "attn_softmax", axis=-1)
        return g.dense(g.op("MatMul", [probs, v], "attn_context"), d, d, "attn_out", 0.05)

    r1 = g.op("Add", ["x", attention("x")], "residual1")
    h = _layernorm(g, r1, d, "ln1", gamma, opset)
    up = g.op("Add", [g.dense(h, d, 2 * d, "ffn_up", 0.02), g.const("ffn_up_b", np.zeros(2 * d))], "ffn_up_bias")
    ffn = g.dense(g.op("Relu", [up], "ffn_relu"), 2 * d, d, "ffn_down", 0.05)
    y = _layernorm(g, g.op("Add", [h, ffn], "residual2"), d, "ln2", gamma, opset)
    g_model = helper.make_model(
        helper.make_graph(g.nodes, "layernorm_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, seq, d])], g.inits),
        opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    g_model.producer_name = "precision-doctor-planted"

    def make_input(rng: np.random.Generator) -> dict[str, np.ndarray]:
        x = rng.standard_normal((1, seq, d)).astype(np.float32)
        x[..., outliers] = rng.uniform(250.0, 400.0, (1, seq, len(outliers))) * rng.choice([-1.0, 1.0], len(outliers))
        return {"x": x.astype(np.float32)}

    expected = {f"{ln}_{n}" for ln in ("ln1", "ln2") for n in ("pow", "var")}
    return PlantedCase("layernorm_block", onnx.shape_inference.infer_shapes(g_model), expected, "ln1_pow_out", make_input,
                       atol=2e-2, rtol=2e-2, planted=expected)


CASES: dict[str, Callable[[], PlantedCase]] = {
    "overflow_island": overflow_island,
    "softmax_no_max": softmax_no_max,
    "large_reducesum": large_reducesum,
    "cancellation": cancellation,
    "near_constant_norm": near_constant_norm,
    "deep_stack_one_bad": deep_stack_one_bad,
    "three_defects": three_defects,
    "clean": clean,
}
