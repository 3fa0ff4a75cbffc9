"""ONNX lowerings of elementwise ops: arithmetic, comparisons, logic, unary math, casts, clip, where."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from caten.frontends.onnx.node import HANDLERS, N, handler
from caten.frontends.onnx.types import DTYPES, FLOAT8
from caten.frontends.text import lit

_BIN = {"Add": "+", "Sub": "-", "Mul": "*", "Equal": "=", "Less": "<", "Greater": ">", "LessOrEqual": "<=",
        "GreaterOrEqual": ">=", "And": "and", "Or": "or", "Xor": "xor", "BitwiseAnd": "and", "BitwiseOr": "or",
        "BitwiseXor": "xor"}


_UN = {"Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "recip", "Sin": "sin",
       "Cos": "cos", "Tan": "tan", "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu", "Erf": "erf",
       "Sign": "sign", "Softplus": "softplus", "Not": "not", "BitwiseNot": "not", "Identity": "contiguous"}


@handler(*_BIN)
def _binary(n: N) -> str:
    return f"({_BIN[n.op]} {n.x(0)} {n.x(1)})"


@handler(*_UN)
def _unary(n: N) -> str | list:
    if n.op == "Identity":
        from caten.frontends.onnx.sequence import passthrough

        kept = passthrough(n)
        return n.x(0) if kept is None else kept
    if n.op == "Abs" and n.dt().startswith("u"):
        return n.x(0)
    return f"({_UN[n.op]} {n.x(0)})"


@handler("Div")
def _div(n: N) -> str:
    a, b = n.x(0), n.x(1)
    if n.is_float():
        return f"(/ {a} {b})"
    if n.dt().startswith("u"):
        return f"(idiv {a} {b})"
    # C-style division truncates toward zero; idiv floors: step back up where the signs differ
    q = n.let(f"(idiv {a} {b})")
    return f"(where (and (!= (mod {a} {b}) 0) (xor (< {a} 0) (< {b} 0))) (+ {q} 1) {q})"


@handler("Mod")
def _mod(n: N) -> str:
    a, b = n.x(0), n.x(1)
    r = f"(mod {a} {b})"
    if not n.a("fmod", 0):
        return r
    # fmod: the remainder takes the dividend's sign
    r = n.let(r)
    return f"(where (and (!= {r} 0) (xor (< {a} 0) (< {b} 0))) (- {r} {b}) {r})"


@handler("Pow")
def _pow(n: N) -> str:
    b = n.x(1) if n.dt(1) == n.dt(0) else f"(cast {n.x(1)} {n.dt(0)})"
    return f"(pow {n.x(0)} {b})"


@handler("BitShift")
def _shift(n: N) -> str:
    """caten's shl/shr give ONNX's results also for a count < 0 or >= the width (0, or the sign fill)."""
    return f"({'shl' if n.a('direction') == 'LEFT' else 'shr'} {n.x(0)} {n.x(1)})"


@handler("Max", "Min", "Sum", "Mean")
def _variadic(n: N) -> str:
    f = {"Max": "max", "Min": "min", "Sum": "+", "Mean": "+"}[n.op]
    acc = n.x(0)
    for i in range(1, n.nin):
        acc = f"({f} {acc} {n.x(i)})"
    if n.op == "Mean":
        acc = f"(/ {acc} {lit(n.nin, n.dt())})"
    if n.nin == 1:
        acc = f"(contiguous {acc})"
    return acc


@handler("Where")
def _where(n: N) -> str:
    return f"(where {n.x(0)} {n.x(1)} {n.x(2)})"


@handler("Clip")
def _clip(n: N) -> str:
    y = n.x(0)
    lo = n.x(1) if n.has(1) else (None if n.a("min") is None else n.lit(n.a("min")))
    hi = n.x(2) if n.has(2) else (None if n.a("max") is None else n.lit(n.a("max")))
    if lo is not None:
        y = f"(max {y} {lo})"
    if hi is not None:
        y = f"(min {y} {hi})"
    return y if y != n.x(0) else f"(contiguous {y})"


@handler("Cast", "CastLike")
def _cast(n: N) -> str:
    from caten.frontends.onnx.narrow import NARROW, cast_float8, cast_to

    code = n.a("to") if n.op == "Cast" else n.g.code(n.node.input[1])
    src = n.dt()
    if code in FLOAT8:  # caten's own dtypes: `cast` is ONNX's saturate=1
        return cast_float8(n.x(0), src, DTYPES[code], bool(n.a("saturate", 1)))
    if code in NARROW:
        try:
            return cast_to(n.x(0), src, NARROW[code], bool(n.a("saturate", 1)), n.a("round_mode", "up"))
        except ValueError as e:
            raise n.fail(str(e)) from None
    to = DTYPES.get(code) if code is not None else None
    if to is None:
        raise n.fail("the target dtype is not one caten has")
    if src == to:
        return f"(contiguous {n.x(0)})"
    return f"(cast {n.x(0)} {to})"


_WIDTH = {"bool": 8, "i8": 8, "u8": 8, "i16": 16, "u16": 16, "f16": 16, "bf16": 16, "i32": 32, "u32": 32,
          "f32": 32, "i64": 64, "u64": 64, "f64": 64, "f8e4m3": 8, "f8e5m2": 8, "f8e4m3fnuz": 8, "f8e5m2fnuz": 8,
          "i4": 4, "u4": 4}


@handler("BitCast")
def _bitcast(n: N) -> str:
    """Same-width reinterpretation (caten's bitcast); what it cannot reinterpret exactly is refused here."""
    src, to = n.dt(), DTYPES.get(n.a("to"))
    if to is None:
        raise n.fail("the target dtype is not one caten has")
    if _WIDTH[src] != _WIDTH[to]:
        raise n.fail(f"{src} and {to} differ in width")
    if src == to:
        return f"(contiguous {n.x(0)})"
    if {src, to} & {"f16", "bf16", "f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz"}:
        raise n.fail("16- and 8-bit floats are not reinterpreted (caten may hold them widened)")
    if to == "bool":
        raise n.fail("a byte other than 0 or 1 is not a bool, so nothing is reinterpreted as bool")
    return f"(bitcast {n.x(0)} {to})"


def _float_un(expr: Callable[[str, N], str]) -> Callable[[N], str]:
    def h(n: N) -> str:
        if not n.is_float():
            raise n.fail(f"needs a float operand, got {n.dt()}")
        return expr(n.x(0), n)
    return h


_FLOAT_FORMS: dict[str, Callable[[str, N], str]] = {
    "Floor": lambda x, n: f"(idiv {x} {n.lit(1)})",
    "Ceil": lambda x, n: f"(neg (idiv (neg {x}) {n.lit(1)}))",
    "Sinh": lambda x, n: f"(* 0.5 (- (exp {x}) (exp (neg {x}))))",
    "Cosh": lambda x, n: f"(* 0.5 (+ (exp {x}) (exp (neg {x}))))",
    "Asinh": lambda x, n: f"(* (sign {x}) (log (+ (abs {x}) (sqrt (+ (* {x} {x}) 1)))))",
    "Acosh": lambda x, n: f"(log (+ {x} (sqrt (- (* {x} {x}) 1))))",
    "Atanh": lambda x, n: f"(* 0.5 (log (/ (+ 1 {x}) (- 1 {x}))))",
    "Softsign": lambda x, n: f"(/ {x} (+ 1 (abs {x})))",
    "Mish": lambda x, n: f"(* {x} (tanh (softplus {x})))",
    "Gelu": lambda x, n: (f"(gelu {x})" if n.a("approximate", "none") == "none" else
                          f"(* 0.5 {x} (+ 1 (tanh (* 0.7978845608028654 (+ {x} (* 0.044715 {x} {x} {x}))))))"),
    "HardSwish": lambda x, n: f"(* {x} (max 0 (min 1 (+ (* {x} {1 / 6}) 0.5))))",
    "Elu": lambda x, n: f"(where (< 0 {x}) {x} (* {n.lit(n.a('alpha', 1.0))} (- (exp {x}) 1)))",
    "Celu": lambda x, n: (f"(+ (max 0 {x}) (min 0 (* {n.lit(n.a('alpha', 1.0))} "
                          f"(- (exp (/ {x} {n.lit(n.a('alpha', 1.0))})) 1))))"),
    "Selu": lambda x, n: (f"(* {n.lit(n.a('gamma', 1.0507009873554805))} (where (< 0 {x}) {x} "
                          f"(* {n.lit(n.a('alpha', 1.6732632423543772))} (- (exp {x}) 1))))"),
    "LeakyRelu": lambda x, n: f"(where (< 0 {x}) {x} (* {n.lit(n.a('alpha', 0.01))} {x}))",
    "ThresholdedRelu": lambda x, n: f"(where (< {n.lit(n.a('alpha', 1.0))} {x}) {x} 0)",
    "HardSigmoid": lambda x, n: (f"(max 0 (min 1 (+ (* {n.lit(n.a('alpha', 0.2))} {x}) "
                                 f"{n.lit(n.a('beta', 0.5))})))"),
    "Swish": lambda x, n: f"(* {x} (sigmoid (* {n.lit(n.a('alpha', 1.0))} {x})))",
    "Shrink": lambda x, n: (f"(where (< {x} (neg {n.lit(n.a('lambd', 0.5))})) (+ {x} {n.lit(n.a('bias', 0.0))}) "
                            f"(where (< {n.lit(n.a('lambd', 0.5))} {x}) (- {x} {n.lit(n.a('bias', 0.0))}) 0))"),
    "Round": lambda x, n: (f"(let ((r (idiv (+ {x} 0.5) 1))) "
                           f"(where (and (= (- r {x}) 0.5) (= (mod r 2) 1)) (- r 1) r))"),
}


for _name, _f in _FLOAT_FORMS.items():
    HANDLERS[_name] = _float_un(_f)


@handler("IsNaN")
def _isnan(n: N) -> str:
    return f"(!= {n.x(0)} {n.x(0)})"


@handler("IsInf")
def _isinf(n: N) -> str:
    x = n.x(0)
    pos, neg = n.a("detect_positive", 1), n.a("detect_negative", 1)
    terms = ([f"(= {x} inf)"] if pos else []) + ([f"(= {x} -inf)"] if neg else [])
    if not terms:
        return f"(!= {x} {x} )".replace(f"(!= {x} {x} )", f"(and (= {x} {x}) (!= {x} {x}))")
    return terms[0] if len(terms) == 1 else f"(or {terms[0]} {terms[1]})"


@handler("PRelu")
def _prelu(n: N) -> str:
    x, s = n.x(0), n.x(1)
    return f"(where (< {x} 0) (* {x} {s}) {x})"


@handler("Dropout")
def _dropout(n: N) -> list[str]:
    ratio = float(np.asarray(n.c(1, "ratio")).reshape(-1)[0]) if n.has(1) else n.a("ratio", 0.5)
    if n.has(2) and bool(np.asarray(n.c(2, "training_mode")).reshape(-1)[0]) and ratio != 0:
        raise n.fail("training-mode dropout is random; only inference (identity) is supported")
    x = n.x(0)
    return [f"(contiguous {x})", f"(full (shape {x}) true :dtype bool)"]


@handler("Atan", "Asin", "Acos")
def _atan(n: N) -> str:
    if not n.is_float():
        raise n.fail("needs a float operand")
    return f"({n.op.lower()} {n.x(0)})"
