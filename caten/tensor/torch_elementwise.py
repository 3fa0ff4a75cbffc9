"""torch's elementwise math beyond the core ops (rounding, copysign, atan2, hyperbolic functions,
shifts...), each a composite of ops/*.lisp; this module adds torch's dtype rules: which dtypes an
op takes, which it promotes to the default float (f32), and its keyword arguments."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.promote import _promote
from caten.tensor.tensor import FLOATS, Tensor, apply
from caten.tensor.torchnames import torch_name

_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38, "f64": 1.7976931348623157e308,
        "f8e4m3": 448.0, "f8e5m2": 57344.0, "f8e4m3fnuz": 240.0, "f8e5m2fnuz": 57344.0}


def _floaty(t: Tensor) -> Tensor:
    """An integer or bool tensor at torch's default float dtype, as torch's float-only math promotes."""
    return t if t.dtype in FLOATS else t.cast("f32")


def pair(a: Any, b: Any, what: str) -> tuple[Tensor, Tensor]:
    """Two tensors at torch's common dtype (a Python number joins as a 0-d tensor, as torch's scalars)."""
    if not isinstance(a, Tensor):
        if not isinstance(b, Tensor):
            raise Error(f"{what}: needs at least one tensor")
        x, y = _promote(b, a)
        return _as_tensor(y, x), x
    x, y = _promote(a, b)
    return x, _as_tensor(y, x)


def _as_tensor(v: Any, like: Tensor) -> Tensor:
    return v if isinstance(v, Tensor) else Tensor(v, dtype=like.dtype, runtime=like.runtime)


def _no_float(t: Tensor, what: str) -> None:
    if t.dtype in FLOATS:
        raise Error(f"{what} is defined for integer and bool tensors, not {t.dtype}", hint="cast to an integer dtype")


def _floats_only(t: Tensor, what: str) -> None:
    if t.dtype not in FLOATS:
        raise Error(f"{what} is defined for float tensors, not {t.dtype} (as torch's)", hint="cast to a float dtype")


# unary float math: integers and bools promote to f32 ------------------------------------------
def _unary(name: str, lisp: str, doc: str) -> None:
    def op(self: Tensor) -> Tensor:
        return apply(lisp, [_floaty(self)], {})
    op.__name__ = name
    torch_name(name, doc, "elementwise")(op)


for _n, _l, _d in [("expm1", "expm1", "`(expm1 x)`: e**x - 1, exact near 0"),
                   ("log10", "log10", "`(log10 x)`"), ("exp2", "exp2", "`(exp2 x)`"),
                   ("sinh", "sinh", "`(sinh x)`"), ("cosh", "cosh", "`(cosh x)`"),
                   ("asinh", "asinh", "`(asinh x)`"), ("arcsinh", "asinh", "`(asinh x)`"),
                   ("acosh", "acosh", "`(acosh x)`"), ("arccosh", "acosh", "`(acosh x)`"),
                   ("atanh", "atanh", "`(atanh x)`"), ("arctanh", "atanh", "`(atanh x)`"),
                   ("erfc", "erfc", "`(erfc x)`: 1 - erf(x) without cancellation"),
                   ("erfinv", "erfinv", "`(erfinv x)`"), ("sinc", "sinc", "`(sinc x)`: sin(pi x)/(pi x), 1 at 0"),
                   ("deg2rad", "deg2rad", "`(deg2rad x)`"), ("rad2deg", "rad2deg", "`(rad2deg x)`"),
                   ("arcsin", "asin", "`(asin x)`"), ("arccos", "acos", "`(acos x)`"),
                   ("arctan", "atan", "`(atan x)`"), ("angle", "angle", "`(angle x)`: pi below 0, else 0 (nan: nan)")]:
    _unary(_n, _l, _d)


@torch_name("logit", "`(logit x :eps eps)`: log(x/(1-x)), x clamped to [eps, 1-eps] when eps is given",
            "elementwise", example="t.logit(eps=1e-6)")
def logit(self: Tensor, eps: Any = None) -> Tensor:
    return apply("logit", [_floaty(self)], {} if eps is None else {"eps": float(eps)})


# rounding -------------------------------------------------------------------------------------------
def _rounding(name: str, lisp: str, doc: str) -> None:
    def op(self: Tensor) -> Tensor:
        if self.dtype == "bool":
            raise Error(f"{name} is not defined for bool tensors (as torch's)", hint="cast to an integer or float")
        return apply(lisp, [self], {})
    op.__name__ = name
    torch_name(name, doc, "elementwise")(op)


for _n, _l, _d in [("floor", "floor", "`(floor x)`; integers as they are"), ("ceil", "ceil", "`(ceil x)`"),
                   ("trunc", "trunc", "`(trunc x)`: toward zero"), ("fix", "trunc", "`(trunc x)`")]:
    _rounding(_n, _l, _d)


@torch_name("round", "`(round x)`, ties to even; `decimals=d` rounds x 10**d (x / 10**-d for d < 0) as torch",
            "elementwise", example="t.round(decimals=2)")
def round(self: Tensor, *, decimals: int = 0) -> Tensor:  # noqa: A001
    if self.dtype == "bool":
        raise Error("round is not defined for bool tensors (as torch's)", hint="cast to an integer or float")
    if decimals == 0:
        return apply("round", [self], {})
    _floats_only(self, "round(decimals=...)")
    x = self.cast("f32") if self.dtype in ("f16", "bf16") else self  # torch's opmath for the narrow floats
    p = float(10 ** abs(int(decimals)))
    out = apply("round", [x * p], {}) / p if decimals > 0 else apply("round", [x / p], {}) * p
    return out.cast(self.dtype) if out.dtype != self.dtype else out


@torch_name("frac", "`(frac x)`: x - trunc(x) (float tensors only, as torch's)", "elementwise")
def frac(self: Tensor) -> Tensor:
    _floats_only(self, "frac")
    return apply("frac", [self], {})


@torch_name("signbit", "`(signbit x)`: x < 0 or x = -0.0 (a nan counts as positive)", "elementwise")
def signbit(self: Tensor) -> Tensor:
    return apply("signbit", [self], {})


@torch_name("nan_to_num", "`(nan-to-num x :nanv nan :posv posinf :negv neginf)`, the infinities by default the "
            "dtype's largest finite values; integers as they are", "elementwise",
            example="t.nan_to_num(nan=0.0, posinf=1e4)")
def nan_to_num(self: Tensor, nan: float = 0.0, posinf: Any = None, neginf: Any = None) -> Tensor:
    if self.dtype not in FLOATS:
        return apply("contiguous", [self], {})
    big = _MAX[self.dtype]
    return apply("nan-to-num", [self], {"nanv": float(nan), "posv": big if posinf is None else float(posinf),
                                        "negv": -big if neginf is None else float(neginf)})


@torch_name("positive", "x itself (not for bool tensors, as torch's)", "elementwise")
def positive(self: Tensor) -> Tensor:
    if self.dtype == "bool":
        raise Error("positive (unary +) is not defined for bool tensors (as torch's)")
    return self


@torch_name("negative", "`(neg x)`", "elementwise")
def negative(self: Tensor) -> Tensor:
    if self.dtype == "bool":
        raise Error("negative of a bool tensor (as torch's)", hint="use logical_not (~t)")
    return apply("neg", [self], {})


@torch_name("absolute", "`(abs x)`", "elementwise")
def absolute(self: Tensor) -> Tensor:
    return apply("abs", [self], {})


def _addc(name: str, self: Tensor, t1: Any, t2: Any, value: Any) -> Tensor:
    a, b = pair(self, t1, name)
    a, c = pair(a, t2, name)
    a, b = pair(a, b, name)
    if name == "addcdiv" and a.dtype not in FLOATS:
        raise Error("addcdiv of integer tensors (as torch's)", hint="cast to a float dtype")
    v = float(value) if a.dtype in FLOATS else int(value)
    s = b if value == 1 else b * v
    if name == "addcmul" and a.dtype in FLOATS:
        return apply("fma", [s, c, a], {})  # torch's kernel: fma(value * t1, t2, input)
    return a + (s * c if name == "addcmul" else s / c)


@torch_name("addcmul", "`(fma (* value t1) t2 x)`, one rounding as torch's kernel (integers: "
            "`(+ x (* (* value t1) t2))`)", "elementwise", example="t.addcmul(a, b, value=0.5)")
def addcmul(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    return _addc("addcmul", self, tensor1, tensor2, value)


@torch_name("addcdiv", "`(+ x (/ (* value t1) t2))`, as torch's kernel orders it", "elementwise",
            example="t.addcdiv(a, b, value=0.5)")
def addcdiv(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    return _addc("addcdiv", self, tensor1, tensor2, value)


# binary ---------------------------------------------------------------------------------------------
def _binary(name: str, lisp: str, doc: str, kind: str) -> None:
    """kind: 'promote' (torch's common dtype), 'float' (then integers to f32), 'floats' (float only)."""
    def op(self: Any, other: Any) -> Tensor:
        a, b = pair(self, other, name)
        if kind == "float":
            a, b = _floaty(a), _floaty(b)
        elif kind == "floats":
            _floats_only(a, name)
        return apply(lisp, [a, b], {})
    op.__name__ = name
    torch_name(name, doc, "elementwise")(op)


for _n, _l, _k, _d in [
        ("copysign", "copysign", "float", "`(copysign a b)`: |a| with b's sign bit"),
        ("fmod", "fmod", "promote", "`(fmod a b)`: C's remainder, the dividend's sign"),
        ("atan2", "atan2", "float", "`(atan2 y x)`"), ("arctan2", "atan2", "float", "`(atan2 y x)`"),
        ("hypot", "hypot", "floats", "`(hypot a b)`: sqrt(a^2 + b^2) without overflow"),
        ("logaddexp", "logaddexp", "floats", "`(logaddexp a b)`"),
        ("logaddexp2", "logaddexp2", "floats", "`(logaddexp2 a b)`"),
        ("xlogy", "xlogy", "float", "`(xlogy x y)`: x log y, 0 where x = 0 (y not nan)"),
        ("fmax", "fmax", "promote", "`(fmax a b)`: the larger, a nan ignored"),
        ("fmin", "fmin", "promote", "`(fmin a b)`: the smaller, a nan ignored")]:
    _binary(_n, _l, _d, _k)


@torch_name("heaviside", "`(heaviside x values)`: 0 below 0, values at 0, 1 above (equal dtypes, as torch)",
            "elementwise", example="t.heaviside(caten.tensor(0.5))")
def heaviside(self: Tensor, values: Any) -> Tensor:
    v = _as_tensor(values, self)
    if v.dtype != self.dtype:
        raise Error(f"heaviside: the input is {self.dtype} and the values {v.dtype}; torch requires equal dtypes",
                    hint="cast the values to the input's dtype")
    return apply("heaviside", [self, v], {})


@torch_name("lerp", "`(lerp start end weight)`: start + weight (end - start), torch's form for |weight| >= 0.5",
            "elementwise", example="a.lerp(b, 0.25)")
def lerp(self: Tensor, end: Tensor, weight: Any) -> Tensor:
    _floats_only(self, "lerp")
    w = _as_tensor(weight, self)
    for name, t in (("end", end), ("weight", w)):
        if not isinstance(t, Tensor) or t.dtype != self.dtype:
            raise Error(f"lerp: expected {name} of dtype {self.dtype}, got "
                        f"{t.dtype if isinstance(t, Tensor) else type(t).__name__}", hint="cast it first, as torch")
    return apply("lerp", [self, end, w], {})


@torch_name("float_power", "`(pow (cast a f64) (cast b f64))`", "elementwise", example="t.float_power(2)")
def float_power(self: Any, exponent: Any) -> Tensor:
    a, b = pair(self, exponent, "float_power")
    return apply("pow", [a.cast("f64") if a.dtype != "f64" else a, b.cast("f64") if b.dtype != "f64" else b], {})


@torch_name("ldexp", "`(* x (pow 2 e))` at x's float dtype (integers: f32), f16 and bf16 computed in f32",
            "elementwise", example="t.ldexp(e)")
def ldexp(self: Tensor, other: Any) -> Tensor:
    x = _floaty(self)
    c = "f64" if x.dtype == "f64" else "f32"
    e = other if isinstance(other, Tensor) else Tensor(other, dtype=c, runtime=self.runtime)
    e = e if e.dtype == c else e.cast(c)
    out = (x if x.dtype == c else x.cast(c)) * apply("pow", [Tensor(2.0, dtype=c, runtime=e.runtime), e], {})
    return out if out.dtype == x.dtype else out.cast(x.dtype)


def _integers(self: Any, other: Any, what: str) -> tuple[Tensor, Tensor]:
    a, b = pair(self, other, what)
    if a.dtype in FLOATS or a.dtype == "bool":
        raise Error(f"{what} is defined for integer tensors, not {a.dtype} (as torch's)",
                    hint="cast to an integer dtype")
    return a, b


@torch_name("gcd", "`(gcd a b)`: Euclid's steps, unrolled for the dtype's worst case", "elementwise")
def gcd(self: Any, other: Any) -> Tensor:
    return apply("gcd", list(_integers(self, other, "gcd")), {})


@torch_name("lcm", "`(lcm a b)`: |a / gcd * b|, 0 where gcd is 0", "elementwise")
def lcm(self: Any, other: Any) -> Tensor:
    return apply("lcm", list(_integers(self, other, "lcm")), {})


# bitwise --------------------------------------------------------------------------------------------
def _bitwise(name: str, lisp: str) -> None:
    def op(self: Any, other: Any) -> Tensor:
        a, b = pair(self, other, name)
        _no_float(a, name)
        return apply(lisp, [a, b], {})
    op.__name__ = name
    torch_name(name, f"`({lisp} a b)` on integers and bools", "elementwise")(op)


for _n, _l in [("bitwise_and", "and"), ("bitwise_or", "or"), ("bitwise_xor", "xor")]:
    _bitwise(_n, _l)


@torch_name("bitwise_not", "`(not x)` on integers and bools", "elementwise")
def bitwise_not(self: Tensor) -> Tensor:
    _no_float(self, "bitwise_not")
    return apply("not", [self], {})


@torch_name("bitwise_left_shift", "`(shl a b)`: a * 2**b wrapping; 0 for b < 0 or b >= the bit width, as torch",
            "elementwise", example="t.bitwise_left_shift(2)")
def bitwise_left_shift(self: Any, other: Any) -> Tensor:
    a, b = _integers(self, other, "<<")
    return apply("shl", [a, b], {})


@torch_name("bitwise_right_shift", "`(shr a b)`: arithmetic, floor(a / 2**b); the sign fill for b < 0 or b >= "
            "the bit width - 1, as torch", "elementwise", example="t.bitwise_right_shift(1)")
def bitwise_right_shift(self: Any, other: Any) -> Tensor:
    a, b = _integers(self, other, ">>")
    return apply("shr", [a, b], {})


def _reflected(fn: Any) -> Any:
    def op(self: Tensor, other: Any) -> Any:
        if not isinstance(other, (int, np.integer, np.ndarray)) or isinstance(other, bool):
            return NotImplemented
        return fn(other, self)
    return op


def install() -> None:
    """Python's shift operators on Tensor (the rest of the operators are in methods)."""
    Tensor.__lshift__ = lambda self, other: bitwise_left_shift(self, other)
    Tensor.__rshift__ = lambda self, other: bitwise_right_shift(self, other)
    Tensor.__rlshift__ = _reflected(bitwise_left_shift)
    Tensor.__rrshift__ = _reflected(bitwise_right_shift)


install()


@torch_name("frexp", "`(frexp x)`: the mantissa in [0.5, 1) and the i32 exponent (0 for zeros, inf, nan)",
            "elementwise")
def frexp(self: Tensor) -> tuple[Tensor, Tensor]:
    _floats_only(self, "frexp")
    m, e = apply("frexp", [self], {})
    return m, e


_FORMAT = {"f16": (11, -24, 65504.0), "bf16": (8, -133, 3.3895313892515355e38),
           "f32": (24, -149, 3.4028234663852886e38), "f64": (53, -1074, 1.7976931348623157e308)}


@torch_name("nextafter", "`(nextafter x y :digits :tiny :big)` with the dtype's format: the next float after x "
            "toward y", "elementwise")
def nextafter(self: Any, other: Any) -> Tensor:
    a, b = pair(self, other, "nextafter")
    _floats_only(a, "nextafter")
    digits, tiny, big = _FORMAT[a.dtype]
    return apply("nextafter", [a, b], {"digits": digits, "tiny": tiny, "big": big})
