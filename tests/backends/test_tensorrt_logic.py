"""The TensorRT backend's pure logic, without TensorRT: layer -> ONNX node mapping (metadata,
multi-layer nodes, Myelin-like engine layers, local functions), tactic sources, version parsing,
which library loads and what it can do (fake modules stand in for TensorRT 10, 11 and TensorRT-RTX,
fake nvidia-smi listings for GPUs), and the one-line errors a user gets when the library is missing,
too new for weak typing, or cannot run engines on this GPU."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from precision_doctor import environment, planted
from precision_doctor.backends import registry
from precision_doctor.backends import tensorrt as trtb
from precision_doctor.backends.tensorrt import library
from precision_doctor.errors import UserError
from precision_doctor.graph.model import from_proto

ONNX = {"/blk3/Pow", "/blk3/ReduceMean", "/blk3/Div", "/blk3/MatMul", "/blk3/MatMul_1", "/blk3/LayerNorm", "/enc/Fn_0"}


def meta(*names: str) -> str:
    return "\x1f".join(f"[ONNX Layer: {n}]" for n in names)


# --- metadata ----------------------------------------------------------------------------------


def test_metadata_entries():
    assert trtb.metadata_entries(None) == []
    assert trtb.metadata_entries("") == []
    assert trtb.metadata_entries("something else") == []
    assert trtb.metadata_entries("[ONNX Layer: /a/b]") == ["/a/b"]
    assert trtb.metadata_entries(meta("/a", "/b")) == ["/a", "/b"]
    assert trtb.metadata_entries("[ONNX Layer: /a][ONNX Layer: /b]") == ["/a", "/b"]  # side by side
    assert trtb.metadata_entries("[ONNX Layer: x]y]") == ["x]y"]  # only the closing bracket goes


def test_metadata_first():
    # the layer name would say /blk3/MatMul_1 (an ONNX node), the metadata says otherwise
    assert trtb.onnx_node_of_layer("/blk3/MatMul_1", meta("/blk3/MatMul"), ONNX) == "/blk3/MatMul"
    assert trtb.onnx_node_of_layer("anything", "[ONNX Layer: /blk3/Pow]", ONNX) == "/blk3/Pow"


def test_metadata_with_properties_and_local_functions():
    # parser format: [ONNX Layer: <node> | <caller node> (<function>) ...], innermost first
    m = "[ONNX Layer: inner_mul | /enc/Fn_0 (MyFunction)]"
    assert trtb.onnx_node_of_layer("inner_mul", m, ONNX) == "/enc/Fn_0"
    assert trtb.onnx_node_of_layer("inner_mul", m, None) == "inner_mul"
    # a node name that itself contains " | " still matches whole
    assert trtb.onnx_node_of_layer("L", "[ONNX Layer: a | b]", {"a | b", "a"}) == "a | b"


def test_metadata_naming_unknown_node_falls_back_to_name():
    assert trtb.onnx_node_of_layer("/blk3/Div", meta("/renamed/Div"), ONNX) == "/blk3/Div"
    assert trtb.onnx_node_of_layer("/blk3/Div", meta("/renamed/Div"), None) == "/renamed/Div"


def test_names_without_metadata():
    assert trtb.onnx_node_of_layer("/blk3/Pow", None, ONNX) == "/blk3/Pow"
    assert trtb.onnx_node_of_layer("/blk3/MatMul_1", None, ONNX) == "/blk3/MatMul_1"  # exact beats suffix
    assert trtb.onnx_node_of_layer("/blk3/MatMul_17", None, ONNX) == "/blk3/MatMul"  # <node>_<counter>
    assert trtb.onnx_node_of_layer("/blk3/MatMul_1_23", None, ONNX) == "/blk3/MatMul_1"
    assert trtb.onnx_node_of_layer("/blk3/Pow_output", None, ONNX) is None  # not the parser's suffix
    assert trtb.onnx_node_of_layer("(Unnamed Layer* 12) [Shuffle]", None, ONNX) is None
    assert trtb.onnx_node_of_layer("/blk3/Pow", None, set()) is None


def test_myelin_like_engine_layers():
    assert trtb.onnx_node_of_layer("{ForeignNode[/blk3/Pow.../blk3/Div]}", None, ONNX) is None
    assert trtb.onnx_node_of_layer("__myl_MulAddRedu_0", None, ONNX) is None
    m = meta("/blk3/Pow", "/blk3/ReduceMean", "/blk3/Div")
    assert trtb.onnx_nodes_of_layer("__myl_MulAddRedu_0", m, ONNX) == ["/blk3/Pow", "/blk3/ReduceMean", "/blk3/Div"]
    assert trtb.onnx_node_of_layer("__myl_MulAddRedu_0", m, ONNX) == "/blk3/Pow"
    assert trtb.onnx_nodes_of_layer("x", "[ONNX Layer: /blk3/Pow]\x1e[ONNX Layer: /blk3/Div]\x1f", ONNX) == [
        "/blk3/Pow",
        "/blk3/Div",
    ]


def test_layers_for_fallback_multi_layer_nodes():
    layers = [
        ("/blk3/MatMul", meta("/blk3/MatMul")),
        ("/blk3/LayerNorm", meta("/blk3/LayerNorm")),
        ("/blk3/LayerNorm_41", meta("/blk3/LayerNorm")),  # one node, several layers
        ("(Unnamed Layer* 42) [Constant]", None),
        ("/blk3/LayerNorm_43", None),  # an older parser without metadata
        ("/blk3/Pow", meta("/blk3/Pow")),
        ("/blk3/Pow", meta("/blk3/Pow")),  # listed twice: reported once
    ]
    got = trtb.layers_for_fallback(layers, {"/blk3/LayerNorm", "/blk3/Pow"}, ONNX)
    assert got == ["/blk3/LayerNorm", "/blk3/LayerNorm_41", "/blk3/LayerNorm_43", "/blk3/Pow"]
    assert trtb.layers_for_fallback(layers, set(), ONNX) == []
    assert trtb.unmapped_nodes(layers, ["/blk3/Pow", "/blk3/Div"], ONNX) == ["/blk3/Div"]
    fused = [("{ForeignNode[/blk3/Pow.../blk3/Div]}", meta("/blk3/Pow", "/blk3/Div"))]
    assert trtb.layers_for_fallback(fused, {"/blk3/Div"}, ONNX) == ["{ForeignNode[/blk3/Pow.../blk3/Div]}"]


# --- pinning layers on a fake network ---------------------------------------------------------


class _Enum:
    def __init__(self, **members):
        self.__dict__.update(members)


class _Tensor:
    def __init__(self, dtype, execution=True):
        self.dtype, self.is_execution_tensor = dtype, execution


class _Layer:
    def __init__(self, name, metadata, type_, outputs):
        self.name, self.metadata, self.type = name, metadata, type_
        self._outs = outputs
        self.num_outputs = len(outputs)
        self.precision = None
        self.output_types = {}

    def get_output(self, i):
        return self._outs[i]

    def set_output_type(self, i, t):
        self.output_types[i] = t


def _fake_trt():
    return types.SimpleNamespace(
        float32="f32",
        float16="f16",
        int32="i32",
        LayerType=_Enum(CONSTANT="CONSTANT", SHAPE="SHAPE", ELEMENTWISE="EW", REDUCE="RED", GATHER="G"),
    )


def test_pin_fp32_layers_on_fake_network():
    trt = _fake_trt()
    net = [
        _Layer("/blk3/Pow", meta("/blk3/Pow"), "EW", [_Tensor("f32")]),
        _Layer("/blk3/Pow_5", meta("/blk3/Pow"), "EW", [_Tensor("f32"), _Tensor("f16")]),
        _Layer("/blk3/Pow_6", meta("/blk3/Pow"), "CONSTANT", [_Tensor("f32")]),  # constants: never
        _Layer("/blk3/Pow_7", meta("/blk3/Pow"), "G", [_Tensor("i32")]),  # integer output: never
        _Layer("/blk3/Pow_8", meta("/blk3/Pow"), "SHAPE", [_Tensor("i32", execution=False)]),
        _Layer("/blk3/Div", meta("/blk3/Div"), "EW", [_Tensor("f32")]),
    ]
    pinned, unmapped = trtb.pin_fp32_layers(trt, net, {"/blk3/Pow", "/blk3/ReduceMean"}, ONNX)
    assert pinned == ["/blk3/Pow", "/blk3/Pow_5"]
    assert unmapped == ["/blk3/ReduceMean"]
    assert net[0].precision == "f32" and net[0].output_types == {0: "f32"}
    assert net[1].output_types == {0: "f32", 1: "f32"}
    assert all(layer.precision is None for layer in net[2:])


# --- tactic sources ----------------------------------------------------------------------------

TRT10 = {"CUBLAS": 0, "CUBLAS_LT": 1, "CUDNN": 2, "EDGE_MASK_CONVOLUTIONS": 3, "JIT_CONVOLUTIONS": 4}
TRT11 = {"EDGE_MASK_CONVOLUTIONS": 0, "JIT_CONVOLUTIONS": 1}


def test_parse_tactic_sources():
    assert trtb.parse_tactic_sources(None) is None
    assert trtb.parse_tactic_sources(["cublas", "cuBLAS-LT"]).only == ("CUBLAS", "CUBLAS_LT")
    assert trtb.parse_tactic_sources("CUBLAS, cudnn").only == ("CUBLAS", "CUDNN")
    assert trtb.parse_tactic_sources([]).only == ()
    assert trtb.parse_tactic_sources("").only == ()
    spec = trtb.parse_tactic_sources("-CUBLAS,+cudnn,-edge-mask-convolutions")
    assert spec.only is None and spec.enable == ("CUDNN",) and spec.disable == ("CUBLAS", "EDGE_MASK_CONVOLUTIONS")
    with pytest.raises(UserError, match="either names"):
        trtb.parse_tactic_sources(["CUBLAS", "-CUDNN"])
    with pytest.raises(UserError, match="empty name"):
        trtb.parse_tactic_sources(["-"])


def test_resolve_tactic_sources():
    only = trtb.parse_tactic_sources(["CUBLAS"])
    assert trtb.resolve_tactic_sources(only, TRT10, 0b11000, "10.9") == ["CUBLAS"]
    change = trtb.parse_tactic_sources("-JIT_CONVOLUTIONS,+CUDNN")
    assert trtb.resolve_tactic_sources(change, TRT10, 0b11000, "10.9") == ["CUDNN", "EDGE_MASK_CONVOLUTIONS"]
    assert trtb.resolve_tactic_sources(trtb.parse_tactic_sources([]), TRT11, 0b11) == []
    with pytest.raises(UserError, match=r"CUBLAS not available in TensorRT 11\.1.*removed.*EDGE_MASK_CONVOLUTIONS"):
        trtb.resolve_tactic_sources(only, TRT11, 0b11, "11.1")
    with pytest.raises(UserError, match="FOO"):
        trtb.resolve_tactic_sources(trtb.parse_tactic_sources(["foo"]), TRT10, 0)


# --- libraries: which one, what it can do, where its engines run ------------------------------

LIB_MODULES = ("tensorrt", "tensorrt_rtx", "tensorrt_rtx_bindings")
AMPERE = [library.Gpu("NVIDIA RTX A6000", (8, 6))]
HOPPER = [library.Gpu("NVIDIA H100 80GB HBM3", (9, 0))]


def _fake_tensorrt_module(version: str, weak: bool, name: str = "tensorrt", rtx: bool = False) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__version__ = version
    mod.Builder = object
    flags = {"TF32": 6, "STRIP_PLAN": 19}
    if weak:
        flags.update(FP16=0, BF16=17, OBEY_PRECISION_CONSTRAINTS=9)
    mod.BuilderFlag = _Enum(**flags)
    mod.NetworkDefinitionCreationFlag = _Enum(STRONGLY_TYPED=1)
    mod.TacticSource = types.SimpleNamespace(__members__={"EDGE_MASK_CONVOLUTIONS": 0, "JIT_CONVOLUTIONS": 1})
    if rtx:
        members = ["NONE", "CURRENT", "SM75", "SM80", "SM86", "SM89", "SM120", "SM121"]
        mod.ComputeCapability = types.SimpleNamespace(__members__={m: i for i, m in enumerate(members)})
    return mod


@pytest.fixture
def no_library(monkeypatch):
    """No TensorRT library importable, whatever is installed."""
    for name in LIB_MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError
    monkeypatch.delenv(library.ENV_LIBRARY, raising=False)


@pytest.fixture
def gpus(monkeypatch):
    """Set the GPUs nvidia-smi would list."""

    def set_(listed):
        monkeypatch.setattr(library, "query_gpus", lambda: list(listed))

    set_(AMPERE)
    return set_


def test_trt_major_version_parsing():
    assert trtb.trt_major_version("10.13.0.35") == 10
    assert trtb.trt_major_version("11.1.0") == 11
    assert trtb.trt_major_version("8.6.1.post1") == 8
    assert trtb.trt_major_version("garbage") is None


def test_no_library(no_library):
    assert trtb.trt_major_version() is None
    lib, why = library.find_library()
    assert lib is None and [w.split(":")[0] for w in why] == list(LIB_MODULES)
    with pytest.raises(UserError, match=r"^TensorRT or TensorRT-RTX is not installed \(tensorrt: ") as err:
        library.load_library()
    assert "\n" not in str(err.value) and "pip install '.[trt]'" in str(err.value)
    model = from_proto(planted.overflow_island().model)
    with pytest.raises(UserError, match="not installed"):
        trtb.TrtBackend(model)
    assert environment.tensorrt_status().startswith("not installed")
    assert "trt" not in registry.available_backends()


def test_bindings_without_libraries_are_skipped(no_library, monkeypatch, gpus):
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))  # no Builder
    with pytest.raises(UserError, match="no Builder"):
        library.load_library()
    fake = _fake_tensorrt_module("1.7.1", False, "tensorrt_rtx_bindings", True)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx_bindings", fake)
    lib = library.load_library()
    assert (lib.family, lib.module_name, lib.label) == ("tensorrt_rtx", "tensorrt_rtx_bindings", "TensorRT-RTX 1.7.1")


def test_prefer_a_library(no_library, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt_module("10.9.0", weak=True))
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", _fake_tensorrt_module("1.7.1", False, "tensorrt_rtx", True))
    assert library.load_library().family == "tensorrt"  # TensorRT first
    assert library.load_library("tensorrt_rtx").family == "tensorrt_rtx"
    monkeypatch.setenv(library.ENV_LIBRARY, "tensorrt_rtx")
    assert library.load_library().family == "tensorrt_rtx"
    monkeypatch.setenv(library.ENV_LIBRARY, "tensorrt-llm")
    with pytest.raises(UserError, match="PRECISION_DOCTOR_TRT_LIBRARY"):
        library.load_library()


def test_capabilities_of_each_library(no_library, monkeypatch):
    trt10 = library.TrtLibrary(_fake_tensorrt_module("10.9.0", weak=True), "tensorrt", "tensorrt", "10.9.0")
    trt11 = library.TrtLibrary(_fake_tensorrt_module("11.1.0", weak=False), "tensorrt", "tensorrt", "11.1.0")
    rtx = library.TrtLibrary(_fake_tensorrt_module("1.7.1", False, "tensorrt_rtx", True), "tensorrt_rtx", "tensorrt_rtx", "1.7.1")
    assert (trt10.weak_typing, trt11.weak_typing, rtx.weak_typing) == (True, False, False)
    assert (trt10.major, trt11.major, rtx.major) == (10, 11, 1)
    assert trt10.target_compute_capabilities == ()  # TensorRT builds for the GPU present
    assert rtx.target_compute_capabilities == ((7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1))
    assert rtx.default_compute_capabilities == ((8, 0), (8, 6), (8, 9), (12, 0), (12, 1))  # Turing only when named
    # where engines run
    assert not rtx.runtime([]).can_run and "no GPU" in rtx.runtime([]).reason
    hopper = rtx.runtime(HOPPER)
    assert not hopper.can_run
    assert hopper.reason == (
        "TensorRT-RTX 1.7.1 cannot run engines on NVIDIA H100 80GB HBM3, compute capability 9.0 "
        "(it runs on compute capability 7.5 8.0 8.6 8.9 12.0 12.1)"
    )
    assert rtx.runtime(AMPERE).can_run and trt10.runtime(HOPPER).can_run
    assert not trt11.runtime([]).can_run


def test_parse_compute_capability():
    assert [library.parse_cc(t) for t in ("8.6", "12.0", "sm86", "SM120", "75")] == [(8, 6), (12, 0), (8, 6), (12, 0), (7, 5)]
    with pytest.raises(UserError, match="major.minor"):
        library.parse_cc("ampere")


def test_query_gpus_reads_nvidia_smi(monkeypatch):
    monkeypatch.setattr(library.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    out = "NVIDIA H100 80GB HBM3, 9.0\nNVIDIA GeForce RTX 4090, 8.9\n"
    monkeypatch.setattr(library.subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=out, returncode=0))
    assert library.query_gpus() == [library.Gpu("NVIDIA H100 80GB HBM3", (9, 0)), library.Gpu("NVIDIA GeForce RTX 4090", (8, 9))]
    monkeypatch.setattr(library.shutil, "which", lambda name: None)
    assert library.query_gpus() == []


def test_backend_refuses_where_engines_cannot_run(no_library, monkeypatch, gpus):
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", _fake_tensorrt_module("1.7.1", False, "tensorrt_rtx", True))
    model = from_proto(planted.overflow_island().model)
    for listed, words in ((HOPPER, "compute capability 9.0"), ([], "no GPU")):
        gpus(listed)
        with pytest.raises(UserError) as err:
            trtb.TrtBackend(model)
        msg = str(err.value)
        assert msg.startswith("trt backend unavailable: TensorRT-RTX 1.7.1 cannot run engines")
        assert words in msg and "\n" not in msg
        assert "trt" not in registry.available_backends()
        assert "cannot run engines" in environment.tensorrt_status()
    gpus(AMPERE)
    assert trtb.TrtBackend(model).mode == "strong"
    assert registry.available_backends()[0] == "trt"


def test_importing_the_backend_does_not_import_tensorrt():
    code = (
        "import sys; import precision_doctor.backends.tensorrt, precision_doctor.results.emit, "
        "precision_doctor.graph.toolnames, precision_doctor.backends.knobs, precision_doctor.environment; "
        "print(any(m in sys.modules for m in ('tensorrt', 'tensorrt_rtx', 'tensorrt_rtx_bindings')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_api_resolution(no_library, monkeypatch, gpus):
    model = from_proto(planted.overflow_island().model)
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt_module("10.9.0", weak=True))
    assert trtb.TrtBackend(model).mode == "weak"
    assert trtb.TrtBackend(model, api="strong").mode == "strong"
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt_module("11.1.0", weak=False))
    assert trtb.TrtBackend(model).mode == "strong"
    with pytest.raises(UserError, match="weak typing"):
        trtb.TrtBackend(model, api="weak")


def test_backend_argument_errors(no_library, monkeypatch, tmp_path, gpus):
    model = from_proto(planted.overflow_island().model)
    with pytest.raises(UserError, match="precision"):
        trtb.TrtBackend(model, precision="fp8")
    with pytest.raises(UserError, match="api"):
        trtb.TrtBackend(model, api="medium")
    with pytest.raises(UserError, match="either names"):
        trtb.TrtBackend(model, tactic_sources=["CUBLAS", "-CUDNN"])
    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt_module("10.9.0", weak=True))
    backend = trtb.TrtBackend(model, work_dir=tmp_path, timing_cache=tmp_path / "t.cache")
    assert backend.timing_cache == tmp_path / "t.cache"
    with pytest.raises(UserError, match="no node"):
        backend.prepare(frozenset({"not_a_node"}))


def test_weak_mode_parses_a_file_with_the_node_names(no_library, monkeypatch, tmp_path, gpus):
    import onnx

    monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt_module("10.9.0", weak=True))
    proto = planted.overflow_island().model
    path = tmp_path / "named.onnx"
    onnx.save(proto, str(path))
    named = from_proto(onnx.load(str(path)), path=path)
    assert trtb.TrtBackend(named, work_dir=tmp_path / "w1").weak_onnx_path == path
    for node in proto.graph.node:
        node.name = ""
    unnamed = from_proto(proto, path=tmp_path / "unnamed.onnx")
    copy = trtb.TrtBackend(unnamed, work_dir=tmp_path / "w2").weak_onnx_path
    assert copy != unnamed.path
    assert [n.name for n in onnx.load(str(copy)).graph.node] == [n.name for n in unnamed.nodes]
