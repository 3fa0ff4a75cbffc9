"""BITCAST, the principal op that reinterprets bits (numpy's `view(dtype)`, torch's `view(dtype)` of the
same width, ONNX's BitCast): every runtime gives numpy's bits; the widths that differ, 16-bit floats and a
bool made of arbitrary bytes are refused at elaboration."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.errors import Error

PAIRS = [("f32", "i32"), ("i32", "f32"), ("f64", "i64"), ("i64", "f64"), ("u32", "i32"), ("f32", "u32"),
         ("u16", "i16"), ("i8", "u8"), ("u64", "f64"), ("bool", "u8"), ("bool", "i8")]
NP = {"f32": "f4", "i32": "i4", "f64": "f8", "i64": "i8", "u32": "u4", "u16": "u2", "i16": "i2", "i8": "i1",
      "u8": "u1", "u64": "u8", "bool": "?"}


def _data(dt: str, rng: np.random.Generator) -> np.ndarray:
    if dt == "bool":
        return rng.random(13) < 0.5
    if dt.startswith("f"):
        x = (rng.standard_normal(13) * 1e3).astype(NP[dt])
        x[:5] = [np.nan, np.inf, -np.inf, -0.0, np.finfo(NP[dt]).tiny / 4]  # a subnormal keeps its bits
        return x
    info = np.iinfo(NP[dt])
    return rng.integers(info.min, info.max, 13, dtype=NP[dt], endpoint=True)


@pytest.mark.parametrize("rt", ["numpy", "llvm", "c"])
def test_bitcast_gives_numpys_bits(rt):
    rng = np.random.default_rng(7)
    body = " ".join(f"(bitcast X{i} {b})" for i, (_, b) in enumerate(PAIRS))
    params = " ".join(f"X{i}{{{a}}}[N{i}]" for i, (a, _) in enumerate(PAIRS))
    outs = " ".join(f"Y{i}{{{b}}}[N{i}]" for i, (_, b) in enumerate(PAIRS))
    m = caten.loads(f"(composite f (({params}) -> ({outs})) (return {body}))", runtime=rt)
    xs = [_data(a, rng) for a, _ in PAIRS]
    xs[0] = xs[0][:0]  # an empty tensor
    ys = m.f(*xs)
    for (a, b), x, y in zip(PAIRS, xs, ys):
        ref = x.astype(np.uint8).view(NP[b]) if a == "bool" else x.view(NP[b])
        assert y.dtype == ref.dtype and y.shape == ref.shape, (a, b)
        assert np.array_equal(y.view(np.uint8), ref.view(np.uint8)), (rt, a, b, y, ref)


def test_bitcast_fuses_with_arithmetic_on_llvm():
    m = caten.loads("(composite f ((X{f32}[N]) -> (Y{i32}[N])) (return (+ (bitcast (* X 2.0) i32) 1)))",
                    runtime="llvm")
    x = np.array([1.5, -3.0, 0.0, 1e-40], np.float32)
    assert np.array_equal(m.f(x), (x * np.float32(2)).view(np.int32) + 1)


@pytest.mark.parametrize("a,b,why", [("f32", "i64", "same width"), ("f16", "i16", "narrower than f32"),
                                     ("bf16", "u16", "narrower than f32"), ("u8", "bool", "to bool")])
def test_bitcast_refuses_what_it_cannot_reinterpret(a, b, why):
    with pytest.raises(Error, match=why):
        caten.loads(f"(composite f ((X{{{a}}}[N]) -> (Y{{{b}}}[N])) (return (bitcast X {b})))", runtime="numpy")


def test_bitcast_passes_no_gradient():
    """bits are not differentiable: the path through an integer reinterpretation contributes 0 (JAX's
    float0), the rest of the gradient is untouched."""
    src = """(composite g ((X{f32}[N]) -> (L{f32}[])) (return (+ (sum (cast (bitcast X i32) f32)) (sum (* X X)))))
(composite f ((X{f32}[N]) -> (Y{f32}[N])) (return (grad g X :wrt X)))"""
    x = np.array([1.0, -2.0, 3.5], np.float32)
    assert np.array_equal(caten.loads(src, runtime="numpy").f(x), 2 * x)


@pytest.mark.parametrize("rt", ["numpy", "llvm"])
def test_bitcast_of_a_scalar(rt):
    """(fuzzer seed 5134) the reference could not view a 0-d array."""
    m = caten.loads("(composite f ((X{i8}[N]) -> (Y{u8}[])) (return (bitcast (min (abs X) :axis 0) u8)))", runtime=rt)
    x = np.array([-128, 5, -7], np.int8)
    assert m.f(x) == np.min(np.abs(x)).view(np.uint8)
