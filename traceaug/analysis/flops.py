"""FLOPs and bytes moved per op from the shapes a Kineto trace records (``Input Dims``, ``Input type``,
``Concrete Inputs``): one model per op family, the conventions of docs/efficiency.md (multiply-add = 2)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

# Element size and compute kind of each recorded tensor type.
DTYPES = {
    "double": (8, "fp64"), "float": (4, "fp32"), "c10::Half": (2, "fp16"), "c10::BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"), "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"), "signed char": (1, "int8"), "unsigned char": (1, "int8"),
    "bool": (1, "int8"), "short int": (2, "int16"), "int": (4, "int32"), "unsigned int": (4, "int32"),
    "long int": (8, "int64"), "long": (8, "int64"),
    "c10::complex<float>": (8, "fp32"), "c10::complex<double>": (16, "fp64"),
}
# torch ScalarType codes a Concrete Input may give (``_scaled_mm``'s out_dtype).
SCALAR_TYPES = {"5": "c10::Half", "6": "float", "7": "double", "15": "c10::BFloat16"}
FAMILIES = ("gemm", "conv", "conv_bwd", "attention", "attention_bwd", "softmax", "norm", "reduction",
            "elementwise", "embedding", "copy")


@dataclass(frozen=True)
class Inputs:
    """One op's recorded inputs: per input its dims (a shape; a list of shapes for a TensorList; None
    when no dims were recorded), its type text and its concrete (scalar) text."""

    dims: tuple
    types: tuple[str, ...]
    scalars: tuple[str, ...]

    def tensor(self, i: int) -> tuple[int, ...] | None:
        """Input ``i``'s shape if it is a tensor of a known type (a 0-d tensor: ``()``), else None."""
        if i >= len(self.types) or self.types[i] not in DTYPES:
            return None
        d = self.dims[i] if i < len(self.dims) else None
        return tuple(d) if d is not None and all(isinstance(x, int) for x in d) else ()

    def size(self, i: int) -> int:
        """Input ``i``'s element size in bytes."""
        return DTYPES[self.types[i]][0]

    def scalar(self, i: int) -> str:
        return self.scalars[i] if i < len(self.scalars) else ""


@dataclass(frozen=True)
class Model:
    """What an op does: its family, FLOPs, bytes moved and the peak it runs against (``kind``:
    ``<dtype>_matrix`` for GEMM, convolution and attention, ``<dtype>_vector`` otherwise)."""

    family: str
    flops: int
    bytes: int
    kind: str


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _kind(inputs: Inputs, i: int, unit: str) -> str:
    return f"{DTYPES[inputs.types[i]][1]}_{unit}"


def _flag(text: str) -> bool:
    return text.strip().lower() in ("true", "1")


def _ints(text: str) -> list[int] | None:
    """``'[1, 2]'`` / ``'3'`` -> [1, 2] / [3]; None when not integers."""
    found = re.findall(r"-?\d+", text)
    return [int(x) for x in found] if found and re.fullmatch(r"[\[\]\s,\-\d]*", text) else None


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(s) for s in shapes)
    padded = [(1,) * (n - len(s)) + s for s in shapes]
    return tuple(max(d) if min(d) != 0 else 0 for d in zip(*padded))


# GEMM: C[M, N] = A[M, K] @ B[K, N]: 2·M·N·K, + M·N for an added bias (TraceLens' convention).
def _gemm(inputs: Inputs, a: int, b: int, bias: int | None, batch: bool = False) -> Model | None:
    x, w = inputs.tensor(a), inputs.tensor(b)
    if not x or not w or len(x) != len(w) or len(x) != (3 if batch else 2):
        return None
    nb = x[0] if batch else 1
    m, k, n = x[-2], x[-1], w[-1]
    if w[-2] != k:
        return None
    c = inputs.tensor(bias) if bias is not None else None
    es = inputs.size(a)
    flops = nb * (2 * m * n * k + (m * n if c is not None else 0))
    moved = nb * (m * k * es + k * n * inputs.size(b) + m * n * es) + (numel(c) * inputs.size(bias)
                                                                     if c is not None else 0)
    return Model("gemm", flops, moved, _kind(inputs, a, "matrix"))


def _linear(inputs: Inputs) -> Model | None:
    """linear(input[..., K], weight[N, K], bias[N]?): M = the product of input's leading dims."""
    x, w, c = inputs.tensor(0), inputs.tensor(1), inputs.tensor(2)
    if not x or not w or len(w) != 2 or x[-1] != w[1]:
        return None
    m, k, n, es = numel(x[:-1]), x[-1], w[0], inputs.size(0)
    flops = 2 * m * n * k + (m * n if c is not None else 0)
    moved = (m * k + n * k + m * n) * es + (numel(c) * inputs.size(2) if c is not None else 0)
    return Model("gemm", flops, moved, _kind(inputs, 0, "matrix"))


def _matmul(inputs: Inputs) -> Model | None:
    """matmul with broadcast batch dims (a 1-d operand is a row / column vector)."""
    x, w = inputs.tensor(0), inputs.tensor(1)
    if not x or not w:
        return None
    x2, w2 = (x if len(x) > 1 else (1, *x)), (w if len(w) > 1 else (*w, 1))
    if x2[-1] != w2[-2]:
        return None
    batch = numel(_broadcast(x2[:-2], w2[:-2]))
    m, k, n = x2[-2], x2[-1], w2[-1]
    moved = numel(x) * inputs.size(0) + numel(w) * inputs.size(1) + batch * m * n * inputs.size(0)
    return Model("gemm", 2 * batch * m * n * k, moved, _kind(inputs, 0, "matrix"))


def _scaled_mm(inputs: Inputs) -> Model | None:
    """_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype): the output in out_dtype (a's
    dtype when not given)."""
    x, w = inputs.tensor(0), inputs.tensor(1)
    if not x or not w or len(x) != 2 or len(w) != 2 or x[1] != w[0]:
        return None
    m, k, n = x[0], x[1], w[1]
    out = SCALAR_TYPES.get(inputs.scalar(6).strip(), inputs.types[0])
    moved = m * k * inputs.size(0) + k * n * inputs.size(1) + m * n * DTYPES[out][0]
    return Model("gemm", 2 * m * n * k, moved, _kind(inputs, 0, "matrix"))


# Convolution: 2 FLOPs per multiply-add: 2·numel(out)·(C_in/groups)·prod(kernel), + numel(out) for a bias.
def _conv_out(x: tuple, w: tuple, stride: list, padding: list, dilation: list) -> tuple | None:
    spatial = len(x) - 2
    s, p, d = (v * spatial if len(v) == 1 else v for v in (stride, padding, dilation))
    if len(s) != spatial or len(p) != spatial or len(d) != spatial:
        return None
    return (x[0], w[0], *((x[2 + i] + 2 * p[i] - d[i] * (w[2 + i] - 1) - 1) // s[i] + 1
                          for i in range(spatial)))


# (stride, padding, dilation, transposed) positions in each convolution op's inputs.
CONV_ARGS = {"aten::convolution": (3, 4, 5, 6), "aten::_convolution": (3, 4, 5, 6),
             "aten::conv1d": (3, 4, 5, None), "aten::conv2d": (3, 4, 5, None),
             "aten::conv3d": (3, 4, 5, None), "aten::cudnn_convolution": (3, 2, 4, None)}


def _conv(name: str, inputs: Inputs) -> Model | None:
    x, w = inputs.tensor(0), inputs.tensor(1)
    si, pi, di, ti = CONV_ARGS[name]
    args = [_ints(inputs.scalar(i)) for i in (si, pi, di)]
    if not x or not w or len(x) != len(w) or len(x) < 3 or None in args or (
            ti is not None and _flag(inputs.scalar(ti))):
        return None  # transposed convolutions: no model
    out = _conv_out(x, w, *args)
    if out is None:
        return None
    c = inputs.tensor(2) if name != "aten::cudnn_convolution" else None
    bias = numel(out) if c else 0
    flops = 2 * numel(out) * numel(w[1:]) + bias
    moved = (numel(x) + numel(w) + numel(out) + (out[1] if c else 0)) * inputs.size(0)
    return Model("conv", flops, moved, _kind(inputs, 0, "matrix"))


def _conv_bwd(inputs: Inputs) -> Model | None:
    """convolution_backward(grad_out, input, weight, bias_sizes, ..., output_mask): the input gradient
    and the weight gradient each cost the forward's multiply-adds; the bias gradient numel(grad_out)."""
    g, x, w = inputs.tensor(0), inputs.tensor(1), inputs.tensor(2)
    mask = [_flag(t) for t in inputs.scalar(10).strip("[]").split(",")] if inputs.scalar(10) else []
    if not g or not x or not w or len(mask) != 3 or _flag(inputs.scalar(7)):
        return None
    per = 2 * numel(g) * numel(w[1:])
    flops = per * (mask[0] + mask[1]) + numel(g) * mask[2]
    elems = (numel(g) + numel(w) + numel(x)) * (mask[0] + mask[1]) + (numel(g) + g[1]) * mask[2]
    return Model("conv_bwd", flops, elems * inputs.size(0), _kind(inputs, 0, "matrix"))


# Attention: S = QKᵀ and O = PV, 2 FLOPs per multiply-add: 2·B·H·Sq·Skv·(Dqk + Dv); causal (Sq = Skv)
# halves it. Backward: dV, dP, dQ, dK (torch.utils.flop_counter: no recompute): twice the forward.
# name -> (index of q, layout, index of is_causal, "mask": a custom_mask_type, not a flag; backward).
ATTENTION = {
    "aten::scaled_dot_product_attention": (0, "bhsd", 5, False),
    "aten::_scaled_dot_product_flash_attention": (0, "bhsd", 4, False),
    "aten::_scaled_dot_product_efficient_attention": (0, "bhsd", 6, False),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhsd", 6, False),
    "aten::_flash_attention_forward": (0, "bshd", 8, False),
    "aten::_efficient_attention_forward": (0, "bshd", -9, False),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhsd", 11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "bhsd", 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "bhsd", 14, True),
    "aten::_flash_attention_backward": (1, "bshd", 11, True),
    "aten::_efficient_attention_backward": (1, "bshd", -14, True),
}


def _attention(name: str, inputs: Inputs) -> Model | None:
    qi, layout, ci, backward = ATTENTION[name]
    q, k, v = (inputs.tensor(qi + j) for j in range(3))
    if not q or not k or not v or not len(q) == len(k) == len(v) == 4:
        return None
    if layout == "bshd":
        q, k, v = ((s[0], s[2], s[1], s[3]) for s in (q, k, v))
    (b, h, sq, dqk), (hkv, skv, dv) = q, (k[1], k[2], v[3])
    text = inputs.scalar(abs(ci))
    if not text.strip():
        return None  # not recorded (no Concrete Inputs): causal or not is unknown
    causal = (text.strip() not in ("", "0")) if ci < 0 else _flag(text)
    if causal and sq != skv:
        return None  # a causal mask over unequal lengths: no model
    flops = 2 * b * h * sq * skv * (dqk + dv) * (2 if backward else 1) // (2 if causal else 1)
    elems = b * (sq * h * dqk + skv * hkv * (dqk + dv) + sq * h * dv)  # Q, K, V read, O written
    if backward:  # Q, K, V, dO read, dQ, dK, dV written
        elems += b * (sq * h * dqk + skv * hkv * (dqk + dv))
    family = "attention_bwd" if backward else "attention"
    return Model(family, flops, elems * inputs.size(qi), _kind(inputs, qi, "matrix"))


# Elementwise: 1 FLOP per output element; bytes: every tensor input read, the output written.
UNARY = {"abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
         "cos", "tan", "tanh", "sigmoid", "silu", "gelu", "relu", "relu6", "elu", "leaky_relu",
         "hardswish", "hardsigmoid", "mish", "softplus", "reciprocal", "sign", "sgn", "floor", "ceil",
         "round", "trunc", "erf", "clamp", "clamp_min", "clamp_max", "pow", "square", "logical_not",
         "bitwise_not", "nan_to_num", "threshold", "dropout", "native_dropout", "tril", "triu"}
BINARY = {"add", "sub", "mul", "div", "rsub", "maximum", "minimum", "where", "eq", "ne", "lt", "le", "gt",
          "ge", "logical_and", "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "fmod",
          "remainder", "masked_fill", "lerp", "addcmul", "addcdiv", "hypot", "atan2", "gelu_backward",
          "silu_backward", "threshold_backward", "sigmoid_backward", "tanh_backward", "mul_", "copysign"}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not"}


def _elementwise(base: str, inputs: Inputs) -> Model | None:
    tensors = [i for i in range(len(inputs.types)) if inputs.tensor(i) is not None]
    if not tensors:
        return None
    if base not in BINARY:
        tensors = tensors[:1]  # a unary op's other tensors (an out=) are not read
    out = _broadcast(*(inputs.tensor(i) for i in tensors))
    first = tensors[1] if base == "where" and len(tensors) > 1 else tensors[0]  # where(cond, x, y): x's
    out_size = 1 if base in COMPARISONS else inputs.size(first)
    moved = sum(numel(inputs.tensor(i)) * inputs.size(i) for i in tensors) + numel(out) * out_size
    return Model("elementwise", numel(out), moved, _kind(inputs, first, "vector"))


# Reductions: 1 FLOP per input element; bytes: the input read, the output written.
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm", "all",
              "any", "argmax", "argmin", "var", "std", "var_mean", "std_mean", "logsumexp", "cumsum"}


def _reduction(base: str, inputs: Inputs) -> Model | None:
    x = inputs.tensor(0)
    if x is None:
        return None
    dims = _ints(inputs.scalar(1)) if len(inputs.types) > 1 and inputs.types[1] != "" else None
    if dims is None and inputs.types[1:2] in (("Scalar",), ("ScalarList",)) and base != "cumsum":
        return None  # a dim argument whose value was not recorded
    if base == "cumsum":
        out = x
    elif dims is None or not x:
        out = ()  # every dim reduced
    else:
        keep = {d % len(x) for d in dims}
        out = tuple(1 if i in keep else s for i, s in enumerate(x))
    moved = numel(x) * inputs.size(0) + numel(out) * inputs.size(0)
    return Model("reduction", numel(x), moved, _kind(inputs, 0, "vector"))


# Softmax: 3 FLOPs per element (exp, sum, divide; TraceLens); input read, output written.
# Backward: read dY and Y, write dX, 3 FLOPs per element.
SOFTMAX = {"aten::_softmax": 2, "aten::softmax": 2, "aten::_log_softmax": 2, "aten::log_softmax": 2,
           "aten::_softmax_backward_data": 3, "aten::_log_softmax_backward_data": 3}


def _softmax(name: str, inputs: Inputs) -> Model | None:
    x = inputs.tensor(0)
    if not x:
        return None
    return Model("softmax", 3 * numel(x), SOFTMAX[name] * numel(x) * inputs.size(0),
                 _kind(inputs, 0, "vector"))


# Normalisation: layer, group and batch norm 5 FLOPs per element (mean, subtract, square-accumulate,
# divide, scale-and-shift), RMS norm 4; input read, output written, weight and bias read.
NORMS = {"aten::native_layer_norm": (5, (2, 3)), "aten::layer_norm": (5, (2, 3)),
         "aten::native_group_norm": (5, (1, 2)), "aten::group_norm": (5, (2, 3)),
         "aten::native_batch_norm": (5, (1, 2)), "aten::cudnn_batch_norm": (5, (1, 2)),
         "aten::batch_norm": (5, (1, 2)), "aten::_fused_rms_norm": (4, (2,)), "aten::rms_norm": (4, (2,))}


def _norm(name: str, inputs: Inputs) -> Model | None:
    x = inputs.tensor(0)
    if not x:
        return None
    per, params = NORMS[name]
    weights = sum(numel(inputs.tensor(i)) * inputs.size(i) for i in params if inputs.tensor(i))
    return Model("norm", per * numel(x), 2 * numel(x) * inputs.size(0) + weights,
                 _kind(inputs, 0, "vector"))


# Embedding / gather by index: no FLOPs; the indices read, each selected row read and written.
def _embedding(name: str, inputs: Inputs) -> Model | None:
    table, index = (0, 1) if name == "aten::embedding" else (0, 2)
    w, idx = inputs.tensor(table), inputs.tensor(index)
    if not w or idx is None:
        return None
    picked = [0] if name == "aten::embedding" else _ints(inputs.scalar(1))
    if not picked:
        return None  # the dim was not recorded
    dim = picked[0] % len(w)
    row = numel(w) // w[dim] if w[dim] else 0
    moved = numel(idx) * inputs.size(index) + 2 * numel(idx) * row * inputs.size(table)
    return Model("embedding", 0, moved, _kind(inputs, table, "vector"))


# Copies: no FLOPs; the source read, the destination written. fill_ / zero_: the tensor written.
# (cat records a TensorList without element types: no model.)
def _copy(name: str, inputs: Inputs) -> Model | None:
    x = inputs.tensor(0)
    if x is None:
        return None
    if name in ("aten::fill_", "aten::zero_"):
        return Model("copy", 0, numel(x) * inputs.size(0), _kind(inputs, 0, "vector"))
    src = inputs.tensor(1) if name == "aten::copy_" else x
    src_size = inputs.size(1) if name == "aten::copy_" and src is not None else inputs.size(0)
    if src is None:
        return None
    return Model("copy", 0, numel(src) * src_size + numel(x) * inputs.size(0), _kind(inputs, 0, "vector"))


COPIES = {"aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::fill_", "aten::zero_"}


def _named(name: str) -> Callable[[Inputs], Model | None] | None:
    """The model of op ``name``, or None."""
    gemm = {"aten::mm": lambda i: _gemm(i, 0, 1, None), "aten::addmm": lambda i: _gemm(i, 1, 2, 0),
            "aten::bmm": lambda i: _gemm(i, 0, 1, None, True),
            "aten::baddbmm": lambda i: _gemm(i, 1, 2, 0, True),
            "aten::matmul": _matmul, "aten::linear": _linear, "aten::_scaled_mm": _scaled_mm,
            "aten::convolution_backward": _conv_bwd}
    if name in gemm:
        return gemm[name]
    for table, fn in ((CONV_ARGS, _conv), (ATTENTION, _attention), (SOFTMAX, _softmax), (NORMS, _norm),
                      ({"aten::embedding", "aten::index_select"}, _embedding), (COPIES, _copy)):
        if name in table:
            return lambda i, fn=fn: fn(name, i)
    if not name.startswith("aten::"):
        return None
    base = name[6:].rstrip("_")
    if base in UNARY or base in BINARY:
        return lambda i: _elementwise(base, i)
    if base in REDUCTIONS:
        return lambda i: _reduction(base, i)
    return None


def model(name: str, inputs: Inputs) -> Model | None:
    """The op's FLOPs and bytes, or None: no model for this op, or shapes it cannot read."""
    fn = _named(name)
    if fn is None:
        return None
    try:
        return fn(inputs)
    except (IndexError, KeyError, ValueError, ZeroDivisionError):
        return None
