"""The C runtime computes EXP2, LOG2, SIN, IDIV, MOD, MAX and `rand` from the decompose pass's
primitives (caten.render.cstyle.prims), as the llvm runtime does (caten.render.llvm.prims): the
numerics exist once, so the two must agree bit for bit on every value, specials included.
The op table's numpy reference checks them independently in tests/test_decompose.py."""

from __future__ import annotations

import functools
import shutil
import subprocess

import numpy as np
import pytest

import caten
from caten import pipeline
from caten import plugin as R
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.plugin import Options
from tests.test_decompose import FLOATS, INTS, _float_inputs, _int_inputs, _pairs

UNARY = (Op.EXP2, Op.LOG2, Op.SIN)
FLOAT_OPS = (Op.EXP2, Op.LOG2, Op.SIN, Op.IDIV, Op.MOD, Op.MAX)
INT_OPS = (Op.IDIV, Op.MOD, Op.MAX)


@functools.cache
def _fn(runtime: str, dt: T.DType, ops: tuple[Op, ...]):
    t = dt.name
    outs = ", ".join(f"Y{i}{{{t}}}[N]" for i in range(len(ops)))
    body = " ".join(f"({op.value} X)" if op in UNARY else f"({op.value} X Z)" for op in ops)
    return caten.loads(f"(composite f ((X{{{t}}}[N]) (Z{{{t}}}[N]) -> ({outs})) (return {body}))",
                       runtime=runtime).f


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _isnan(a: np.ndarray) -> np.ndarray:
    """NaN, read through f32 only for the 16-bit floats (an f64 cast to f32 would overflow)."""
    return np.isnan(a.astype(np.float32) if a.dtype.itemsize == 2 else a)


def _same(runtime_outs, llvm_outs, ops, x, y, any_nan: bool = False) -> None:
    for op, got, want in zip(ops, runtime_outs, llvm_outs):
        got, want = np.asarray(got), np.asarray(want)
        bad = _bits(got) != _bits(want)
        if any_nan or got.dtype.itemsize == 2 and got.dtype.kind == "f" or got.dtype.name == "bfloat16":
            # the renderers' own f32 -> f16/bf16 rounding casts (kept as they are) may quiet a NaN's
            # payload differently, and an OpenCL device's fmod(inf, y) may give a NaN of either sign
            # (IEEE leaves it open): the value is NaN on both
            bad &= ~(_isnan(got) & _isnan(want))
        bad = np.flatnonzero(bad)
        assert bad.size == 0, (f"{op} differs from llvm at {bad.size} points, e.g. x={x[bad[0]]!r} y={y[bad[0]]!r}: "
                               f"c={np.asarray(got)[bad[0]]!r} llvm={np.asarray(want)[bad[0]]!r}")


def _usable(name: str) -> None:
    ok, why = R.get(name).available()
    if not ok:
        pytest.skip(f"runtime {name} unavailable: {why}")


@pytest.mark.parametrize("runtime", ["c", "opencl"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_float_ops_bit_identical_to_llvm(dt: T.DType, runtime: str) -> None:
    _usable(runtime)
    x, y = _pairs(_float_inputs(dt))
    _same(_fn(runtime, dt, FLOAT_OPS)(x, y), _fn("llvm", dt, FLOAT_OPS)(x, y), FLOAT_OPS, x, y,
          any_nan=runtime == "opencl")


@pytest.mark.parametrize("runtime", ["c", "opencl"])
@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_ops_bit_identical_to_llvm(dt: T.DType, runtime: str) -> None:
    _usable(runtime)
    x, y = _pairs(_int_inputs(dt))
    _same(_fn(runtime, dt, INT_OPS)(x, y), _fn("llvm", dt, INT_OPS)(x, y), INT_OPS, x, y)


def test_sin_huge_arguments_bit_identical_to_llvm() -> None:
    """Payne-Hanek's table (`lut`) is read for |x| beyond the Cody-Waite range."""
    rng = np.random.default_rng(7)
    for dt in (T.f32, T.f64):
        big = np.exp2(rng.uniform(14, 120 if dt == T.f32 else 1000, 4000)) * rng.choice([-1, 1], 4000)
        x = big.astype(dt.np)
        fc, fl = _fn("c", dt, (Op.SIN,)), _fn("llvm", dt, (Op.SIN,))
        _same(fc(x, x), fl(x, x), (Op.SIN,), x, x)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "f64"])
def test_rand_bit_identical_to_llvm(dt: str) -> None:
    src = f"(composite r ((X{{{dt}}}[N]) -> (Y{{{dt}}}[N])) (+ X (rand [N] :seed 12345 :dtype {dt})))"
    x = np.zeros(4097, _np(dt))
    got, want = np.asarray(caten.loads(src, runtime="c").r(x)), np.asarray(caten.loads(src, runtime="llvm").r(x))
    assert _bits(got).tolist() == _bits(want).tolist()
    v = got.astype(np.float64)
    top = 1.0 if got.dtype.itemsize == 2 else np.nextafter(1.0, 0.0)  # a 16-bit float may round up to 1
    assert v.min() >= 0.0 and v.max() <= top and np.unique(v).size > 100  # in [0, 1), not a constant


def _np(dt: str) -> np.dtype:
    return next(d for d in FLOATS if d.name == dt).np


def test_c_source_has_no_numerics_helpers() -> None:
    """The decomposed ops leave no helper of their own in the C source (each op's numerics exist
    once, in the pass); the Payne-Hanek table is one static const array."""
    mod = caten.loads("(composite f ((X{f32}[N]) (Z{i32}[N]) -> (Y{f32}[N]) (W{i32}[N])) "
                      "(return (sin (exp2 (log2 X))) (idiv Z Z)))", runtime="c", use_cache=False)
    text = next(iter(pipeline.emit(R.get("c"), mod.f.program({})[0], "source", Options()).values()))
    assert "static const u32 caten_lut_" in text or "static const u64 caten_lut_" in text
    assert "fmaf(" in text and "floorf(" in text or "rintf(" in text
    for name in ("caten_exp2", "caten_log2", "caten_sin", "caten_threefry", "caten_idiv", "caten_fdiv"):
        assert name not in text


ALL_OPS = ("(composite f ((X{f32}[N]) (Z{f64}[N]) (I{i8}[N]) (J{u16}[N]) (K{i64}[N]) -> (Y{f32}[N]) (W{f64}[N]) "
           "(V{i8}[N]) (U{u16}[N]) (S{i64}[N]) (R{f32}[N])) (return (sin (exp2 (log2 X))) (sin (max Z (mod Z Z))) "
           "(idiv I (mod I I)) (mod J (idiv J J)) (mod K (idiv K K)) (rand [N] :seed 9)))")


def test_cuda_primitives_assemble(tmp_path) -> None:
    """Every primitive in CUDA C (the Payne-Hanek table as a __constant__ array, __float_as_uint
    bit casts, 8- to 64-bit shifts and divisions) compiles to PTX that ptxas accepts."""
    from caten.runtimes import cuda_rt

    from tests.test_backends import _need, caten_cli

    ptxas = _need("ptxas")
    if cuda_rt.nvrtc_version() is None and shutil.which("nvcc") is None:
        pytest.skip("neither NVRTC (pip install nvidia-cuda-nvrtc) nor nvcc is available")
    (tmp_path / "all.lisp").write_text(ALL_OPS)
    caten_cli(tmp_path, "-r", "cuda", "-S", tmp_path / "all.lisp", "-o", "k.cu")
    src = (tmp_path / "k.cu").read_text()
    assert "__constant__ const u64 caten_lut_" in src and "__double_as_longlong" in src and "fmaf(" in src
    caten_cli(tmp_path, "-r", "cuda", "--emit", "asm", tmp_path / "all.lisp", "-o", "k.ptx")
    p = subprocess.run([ptxas, "-arch=sm_80", "k.ptx", "-o", "k.cubin"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_opencl_all_primitives_like_llvm() -> None:
    """The same program on OpenCL (as_uint bit casts, a __constant table) equals LLVM's results."""
    _usable("opencl")
    rng = np.random.default_rng(3)
    n = 3000
    x = (rng.standard_normal(n) * np.exp2(rng.uniform(-30, 60, n))).astype(np.float32)
    z = (rng.standard_normal(n) * np.exp2(rng.uniform(-30, 900, n)))
    i = rng.integers(-128, 128, n).astype(np.int8)
    j = rng.integers(0, 1 << 16, n).astype(np.uint16)
    k = rng.integers(-(1 << 62), 1 << 62, n).astype(np.int64)
    args = (x, z, i, j, k)
    got = caten.loads(ALL_OPS, runtime="opencl").f(*args)
    want = caten.loads(ALL_OPS, runtime="llvm").f(*args)
    _same(got, want, ("sin32", "sin64", "i8", "u16", "i64", "rand"), x, z, any_nan=True)
