"""The cost model of what runs: FLOPs from the shapes that ran (a dynamic model without --input-shapes reports
the FLOP share it reports with them), the Casts an FP32 island adds, the deploy objective, the report's pricing."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from pricing_helpers import conv_model

from precision_doctor import api, planted
from precision_doctor.graph.cost import cost_model
from precision_doctor.graph.mixed import border_casts, build_mixed
from precision_doctor.graph.model import estimate_flops, from_proto
from precision_doctor.results.report import Report
from precision_doctor.spec import InputSpec, RunSpec, SearchSpec


def test_negative_declared_dims_give_no_negative_flops():
    proto = conv_model([-1, 3, -1, -1])
    model = from_proto(proto)
    assert all(n.flops >= 0 for n in model.nodes)  # PaddlePaddle's -1 once multiplied into negative FLOPs
    shapes = {"x": (-1, 3, -1, -1), "w1": (8, 3, 3, 3), "c1": (-1, 8, 4, 4)}
    assert estimate_flops(proto.graph.node[0], shapes, proto) == 0


@pytest.mark.parametrize("dims", [["N", 3, "H", "W"], [-1, 3, -1, -1]])
def test_dynamic_model_costs_what_ran(dims):
    """FLOPs and the FP32 share come from the shapes that ran: the same with the dims declared or given."""
    shapes = {"x": (2, 3, 16, 16)}
    dynamic = cost_model(from_proto(conv_model(dims)), "fp16", shapes)
    static = cost_model(from_proto(conv_model([2, 3, 16, 16])), "fp16", shapes)
    assert dynamic.flops == static.flops
    assert dynamic.flops["conv1"] == 2 * (2 * 8 * 16 * 16) * (3 * 3 * 3)
    answer = frozenset({"conv1", "bn1"})
    assert dynamic.fp32_flop_share(answer) == pytest.approx(static.fp32_flop_share(answer))
    assert 0 < dynamic.fp32_flop_share(answer) < 1


def _diagnose(tmp_path, name, input_shapes=()):
    proto = conv_model(["N", 3, "H", "W"])
    model_path = tmp_path / "conv.onnx"
    onnx.save(proto, model_path)
    rng = np.random.default_rng(1)
    files = []
    for i in range(2):
        f = tmp_path / f"s{i}.npz"
        np.savez(f, x=rng.standard_normal((1, 3, 12, 12)).astype(np.float32))
        files.append(str(f))
    spec = RunSpec(str(model_path), inputs=InputSpec(files=tuple(files), input_shapes=tuple(input_shapes)),
                   search=SearchSpec(augment=0, margin=0.0))
    spec = spec.with_settings({"tolerance.atol": 1e-2, "tolerance.rtol": 1e-2})
    return api.diagnose(spec, tmp_path / name)


def test_dynamic_model_reports_the_same_share_without_input_shapes(tmp_path):
    """The report's FP32 FLOP share without --input-shapes equals the one with them (it once said 0.00%)."""
    free = _diagnose(tmp_path, "free")
    given = _diagnose(tmp_path, "given", ["x:[1,3,12,12]"])
    assert free.passed and given.passed
    assert free.answer.fallback_nodes == given.answer.fallback_nodes and free.answer.fallback_nodes
    assert free.answer.fp32_flop_share == pytest.approx(given.answer.fp32_flop_share) and free.answer.fp32_flop_share > 0
    assert free.model.total_flops == given.model.total_flops > 0
    assert free.pricing.answer.shapes_from == "capture"
    data = json.loads((tmp_path / "free" / "report.json").read_text())
    assert data["pricing"]["answer"]["fp32_flop_share"] == pytest.approx(free.answer.fp32_flop_share)
    assert Report.from_json(data).pricing == free.pricing  # read back the same


def _cast_nodes(proto: onnx.ModelProto) -> int:
    return sum(n.op_type == "Cast" and n.name.endswith("__cast") for n in proto.graph.node)


def test_casts_counted_from_the_plan_match_fixed_onnx():
    model = from_proto(planted.CASES["three_defects"]().model)
    names = [n.name for n in model.candidates]
    for fallback in (set(), {"exp"}, {"exp", "sum", "normalize"}, set(names[::2]), set(names)):
        assert len(border_casts(model, fallback)) == _cast_nodes(build_mixed(model, fallback))
        assert len(border_casts(model, fallback, keep_io_types=False)) == _cast_nodes(
            build_mixed(model, fallback, keep_io_types=False))


def test_an_island_adds_casts_at_its_borders_only():
    """A chain of low-precision nodes with an FP32 island of two in the middle: two Casts more than all-FP16
    (into the island, out of it); the island's inner edge needs none."""
    model = from_proto(planted.CASES["deep_stack_one_bad"]().model)
    cm = cost_model(model, "fp16", {"x": (2, 32)})
    island = frozenset({"l3_mm", "l3_tanh"})
    cost = cm.answer_cost(island)
    assert cost.casts_added == 2 and cost.casts == len(cm.casts(frozenset())) + 2
    assert cost.cast_bytes == cm.answer_cost(frozenset()).cast_bytes + 2 * (2 * 32) * (4 + 2)
    assert cm.deploy_us(island) > 0 and cm.deploy_us(frozenset()) == 0
    assert cost.bytes_lowp < cost.bytes_fixed < cost.bytes_fp32 + cost.cast_bytes


def test_deploy_objective_prices_flops_and_casts():
    """Keeping a big MatMul in FP32 costs more than keeping a scalar Mul; the deployed batch scales the work."""
    model = from_proto(planted.CASES["deep_stack_one_bad"]().model)
    one = cost_model(model, "fp16", {"x": (2, 32)})
    many = cost_model(model, "fp16", {"x": (2, 32)}, batch=64)
    assert one.deploy_us({"l3_mm"}) > one.deploy_us({"l3_tanh"}) > 0
    assert (one.batch, many.batch) == (2, 64)
    assert many.flops["l3_mm"] == 32 * one.flops["l3_mm"]
    assert many.fp32_flop_share({"l3_mm"}) == pytest.approx(one.fp32_flop_share({"l3_mm"}))
