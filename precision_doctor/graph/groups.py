"""Fusion groups: the node groups TensorRT and ONNX Runtime run as one kernel, which the search moves to FP32
whole or not at all (`search.cost = "deploy"`).

A group split between FP32 and FP16 cannot fuse: the builder puts a Cast inside it and runs its pieces as
separate kernels, which can cost more than the FP32 arithmetic the split saves. Kinds, as TensorRT's
"Layer Fusion Catalog" lists them and as TensorRT-RTX 1.7's builder fused them here (`bench/price.py
--fusions` reads the kernels of its engines; docs/BENCHMARKS.md), and as ONNX Runtime's optimizer fuses
(`graph/fusions.py`):

- `conv`: Conv or ConvTranspose, then BatchNormalization or a constant scale Mul, a constant bias Add, an activation (one op, or a
  decomposed one: SiLU = x * Sigmoid(x), HardSwish = x * HardSigmoid(x), GELU, Mish) and a residual Add after it
  (TensorRT-RTX's `CorrSiluAdd` kernels), each where the previous output has no other reader.
- `matmul`: MatMul or Gemm, then a constant bias Add and an activation (GELU, FastGelu's tanh form, ...).
- `layernorm` / `rmsnorm`: LayerNormalization, or its decomposed form (ReduceMean, Sub, Pow or Mul,
  ReduceMean, Add eps, Sqrt, Div), then a constant scale Mul and shift Add.
- `softmax`: Softmax (or Exp / ReduceSum / Div, with ReduceMax and Sub when present), with the scale
  (Mul or Div by a constant) and the mask Add before it.
- `attention`: MatMul(Q, K) -> softmax group -> MatMul(., V).
- `activation`: a decomposed activation alone (SiLU, HardSwish, GELU, Mish) after a node that is in no group.

Every member is a candidate; a node is in at most one group; single nodes are no group.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_doctor.graph.formats import FP16
from precision_doctor.graph.fusions import _Graph
from precision_doctor.graph.model import Model

ACTIVATION_OPS = frozenset({
    "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Elu", "Selu", "HardSigmoid", "HardSwish", "Gelu", "FastGelu",
    "Softplus", "Softsign", "Mish", "PRelu", "ThresholdedRelu", "Celu", "QuickGelu", "BiasGelu",
})
# Ops a decomposed activation is made of, and those that make it nonlinear (one of them must be there).
_ACT_PARTS = frozenset({"Mul", "Div", "Add", "Sub", "Pow", "Erf", "Tanh", "Sigmoid", "HardSigmoid", "Softplus", "Exp",
                        "Clip", "Relu", "Min", "Max"})
_ACT_NONLINEAR = frozenset({"Erf", "Tanh", "Sigmoid", "HardSigmoid", "Softplus", "Clip", "Relu", "Min", "Max"})
_NORM_PARTS = frozenset({"ReduceMean", "Sub", "Pow", "Mul", "Add", "Sqrt", "Div", "Reciprocal"})
_SOFTMAX_PARTS = frozenset({"ReduceMax", "Sub", "Exp", "ReduceSum", "Div"})
_RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                         "Bernoulli"})
_MAX_CLOSURE = 12  # nodes in one decomposed activation, normalization or softmax, at most


@dataclass(frozen=True)
class FusionGroup:
    """Nodes that run as one kernel: `kind` (module docstring) and the members in graph order."""

    kind: str
    members: tuple[str, ...]

    @property
    def anchor(self) -> str:
        """The member that names the group: its first node."""
        return self.members[0]


class _Matcher:
    def __init__(self, model: Model):
        self.model = model
        self.g = _Graph(model, FP16)
        self.order = {n.name: n.index for n in model.nodes}
        self.candidates = {n.name for n in model.candidates}
        self.taken: set[str] = set()
        self._folded: dict[str, bool] = {}

    def constant(self, tensor: str) -> bool:
        """A constant, or computed from constants alone (a Reshape of a bias: TensorRT folds it)."""
        if tensor not in self._folded:
            self._folded[tensor] = False  # cycles cannot occur; this only guards the recursion
            p = self.g.producer.get(tensor)
            self._folded[tensor] = self.g.is_constant(tensor) or p is not None and (
                self.op(p) == "Constant" or self.op(p) not in _RANDOM_OPS and bool(self.proto(p).input)
                and all(self.constant(t) for t in self.proto(p).input if t))
        return self._folded[tensor]

    def op(self, name: str) -> str:
        return self.model.node(name).op_type

    def free(self, name: str | None) -> bool:
        return name is not None and name in self.candidates and name not in self.taken

    def proto(self, name: str):
        return self.g.nodes[name][0]

    def out(self, name: str) -> str:
        return self.proto(name).output[0]

    def only_reader(self, tensor: str) -> str | None:
        """The one free node reading `tensor` once, where nothing else reads it and it is no graph output."""
        if not self.g.only_reader(tensor):
            return None
        name = self.g.readers[tensor][0]
        return name if self.free(name) else None

    def others(self, name: str, tensor: str) -> list[str]:
        """The inputs of node `name` other than `tensor`."""
        return [t for t in self.proto(name).input if t and t != tensor]

    def const_operand(self, name: str, tensor: str) -> bool:
        """Node `name` reads `tensor` and otherwise only constants."""
        return all(self.constant(t) for t in self.others(name, tensor))

    def closure(self, x: str, parts: frozenset[str], start: frozenset[str] | None = None) -> list[str] | None:
        """The free nodes of ops `parts` computed from `x` and constants alone, with one tensor leaving them (read
        outside, or a graph output), every reader of `x` among them; None when there is no such set."""
        readers = [r for r in self.g.readers.get(x, []) if r in self.candidates]
        if not readers or any(not self.free(r) or self.op(r) not in parts for r in readers):
            return None
        if start is not None and not start <= set(readers):
            return None
        inside: set[str] = set()
        made = {x}
        frontier = list(readers)
        while frontier:
            name = frontier.pop()
            if name in inside:
                continue
            node = self.proto(name)
            if not all(t in made or self.constant(t) for t in node.input if t):
                continue
            inside.add(name)
            made.update(t for t in node.output if t)
            if len(inside) > _MAX_CLOSURE:
                return None
            for t in node.output:
                for r in self.g.readers.get(t, []):
                    if r not in inside and self.free(r) and self.op(r) in parts:
                        frontier.append(r)
            frontier.extend(r for r in readers if r not in inside)
        if set(readers) - inside:
            return None
        leaving = {t for n in inside for t in self.proto(n).output if t and (
            t in self.g.outputs or any(r not in inside for r in self.g.readers.get(t, [])))}
        if len(leaving) != 1:
            return None
        return sorted(inside, key=self.order.__getitem__)

    def exit_of(self, members: list[str]) -> str:
        inside = set(members)
        for n in reversed(members):
            for t in self.proto(n).output:
                if t and (t in self.g.outputs or any(r not in inside for r in self.g.readers.get(t, []))):
                    return t
        return self.out(members[-1])

    # -- pieces -------------------------------------------------------------------------------------
    def activation(self, x: str) -> list[str]:
        """The activation applied to `x`: one activation op reading only it, or a decomposed one."""
        r = self.only_reader(x)
        if r is not None and self.op(r) in ACTIVATION_OPS and self.const_operand(r, x):
            return [r]
        found = self.closure(x, _ACT_PARTS)
        readers = [r for r in self.g.readers.get(x, []) if r in (found or [])]
        # x * f(x): x is read twice (SiLU, HardSwish, GELU, Mish); a chain that reads it once is no activation
        if found and len(readers) >= 2 and any(self.op(n) in _ACT_NONLINEAR for n in found):
            return found
        return []

    def bias(self, x: str) -> list[str]:
        r = self.only_reader(x)
        return [r] if r is not None and self.op(r) == "Add" and self.const_operand(r, x) else []

    def chain(self, first: list[str], *steps) -> list[str]:
        """`first` then each step's nodes, each step applied to the output the chain has so far."""
        members = list(first)
        for step in steps:
            got = step(self.exit_of(members))
            members += got
        return members

    # -- groups -------------------------------------------------------------------------------------
    def conv(self, name: str) -> list[str]:
        def bn(x: str) -> list[str]:
            r = self.only_reader(x)
            return [r] if r is not None and self.op(r) == "BatchNormalization" and self.proto(r).input[0] == x else []

        members = self.chain([name], bn, self.affine("Mul"), self.bias)
        act = self.activation(self.exit_of(members))
        if act:  # a residual Add after the activation fuses too
            members += act
            r = self.only_reader(self.exit_of(members))
            if r is not None and self.op(r) == "Add" and not self.const_operand(r, self.exit_of(members)):
                members.append(r)
        return members

    def matmul(self, name: str) -> list[str]:
        return self.chain([name], self.bias, self.activation)

    def norm(self, name: str) -> tuple[str, list[str]] | None:
        """A decomposed normalization whose first ReduceMean is `name`."""
        x = self.proto(name).input[0]
        found = self.closure(x, _NORM_PARTS)
        if not found or name not in found or "Sqrt" not in {self.op(n) for n in found}:
            return None
        means = sum(self.op(n) == "ReduceMean" for n in found)
        if means not in (1, 2):
            return None
        members = self.chain(found, self.affine("Mul"), self.affine("Add"))
        return ("layernorm" if means == 2 else "rmsnorm"), members

    def affine(self, op: str):
        def step(x: str) -> list[str]:
            r = self.only_reader(x)
            return [r] if r is not None and self.op(r) == op and self.const_operand(r, x) else []
        return step

    def softmax(self, name: str) -> list[str] | None:
        """A Softmax (`name`) or a decomposed one starting at the Exp or ReduceMax `name`, with its scale and mask."""
        entry = self.proto(name).input[0]
        if self.op(name) in ("Softmax", "LogSoftmax"):
            body = [name]
        else:
            body = self.closure(entry, _SOFTMAX_PARTS) or []
            if name not in body or not {"Exp", "ReduceSum", "Div"} <= {self.op(n) for n in body}:
                return None
        before: list[str] = []
        for _ in range(2):  # the mask Add and the scale, walking back
            p = self.g.producer.get(entry)
            if not self.free(p) or not self._read_only_by(entry, body + before):
                break
            x = self.proto(p).input[0]
            if self.op(p) in ("Mul", "Div") and self.const_operand(p, x):
                before.insert(0, p)
                entry = x
            elif self.op(p) == "Add" and not before and not self.const_operand(p, x):  # a mask, not a bias
                before.insert(0, p)
                entry = next((t for t in self.proto(p).input if t and not self.constant(t)), x)
            else:
                break
        return before + body

    def _read_only_by(self, tensor: str, members: list[str]) -> bool:
        return tensor not in self.g.outputs and all(r in members for r in self.g.readers.get(tensor, []))

    def attention(self, soft: list[str]) -> list[str]:
        """The MatMuls around a softmax group, each of two computed tensors: Q @ K before it, P @ V after it."""
        def of_activations(n: str | None) -> bool:
            return n is not None and self.free(n) and self.op(n) == "MatMul" and \
                not any(self.constant(t) for t in self.proto(n).input)

        entry = next((t for t in self.proto(soft[0]).input if t and not self.constant(t)), None)
        before = self.g.producer.get(entry) if entry else None
        after = self.only_reader(self.exit_of(soft))
        if of_activations(before) and self._read_only_by(entry, soft) and of_activations(after):
            return [before, *soft, after]
        return soft


def fusion_groups(model: Model) -> list[FusionGroup]:
    """The fusion groups of `model` (module docstring), in graph order of their first member."""
    m = _Matcher(model)
    found: list[FusionGroup] = []

    def take(kind: str, members: list[str]) -> None:
        members = sorted(dict.fromkeys(members), key=m.order.__getitem__)
        if len(members) >= 2 and all(m.free(n) for n in members):
            m.taken.update(members)
            found.append(FusionGroup(kind, tuple(members)))

    nodes = [n.name for n in model.nodes if n.name in m.candidates]
    for name in nodes:  # softmax and attention first: they claim MatMuls
        if m.free(name) and m.op(name) in ("Softmax", "LogSoftmax", "Exp", "ReduceMax"):
            soft = m.softmax(name)
            if soft:
                whole = m.attention(soft)
                take("attention" if len(whole) > len(soft) else "softmax", whole)
    for name in nodes:
        if not m.free(name):
            continue
        if m.op(name) == "LayerNormalization":
            take("layernorm", m.chain([name], m.affine("Mul"), m.affine("Add")))
        elif m.op(name) == "ReduceMean":
            norm = m.norm(name)
            if norm:
                take(*norm)
    for name in nodes:
        if m.free(name) and m.op(name) in ("MatMul", "Gemm", "FusedMatMul"):
            take("matmul", m.matmul(name))
        elif m.free(name) and m.op(name) in ("Conv", "ConvTranspose"):
            take("conv", m.conv(name))
    for name in nodes:  # decomposed activations after nodes in no group
        if not m.free(name) or m.op(name) not in _ACT_PARTS:
            continue
        for x in m.proto(name).input:
            if x and not m.constant(x):
                act = m.activation(x)
                if len(act) >= 2:
                    take("activation", act)
                break
    return sorted(found, key=lambda grp: m.order[grp.members[0]])


def group_of(groups: list[FusionGroup]) -> dict[str, FusionGroup]:
    """Node name -> its group."""
    return {n: g for g in groups for n in g.members}
