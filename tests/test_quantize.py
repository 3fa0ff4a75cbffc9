"""Linear quantization and integer matmul/convolution (ops/quant.lisp) against numpy.

The oracle is ONNX's definition written in numpy: y = saturate(rint(x / scale) + zero_point)
with the quotient in x's dtype and the sum and clip in int64 (so it cannot overflow), scales and
zero points per tensor, per axis, or repeated over blocks; (q - zero_point) * scale for
dequantize; integer products summed in int64 for matmul-int/conv2d-int. The importers' use of
them (ONNX, torch) is tested in tests/test_quantize_import.py."""

from __future__ import annotations

import numpy as np
import pytest

import caten

RANGE = {np.uint8: (0, 255), np.int8: (-128, 127), np.uint16: (0, 65535), np.int16: (-32768, 32767)}
NAME = {np.uint8: "u8", np.int8: "i8", np.uint16: "u16", np.int16: "i16", np.int32: "i32",
        np.float16: "f16", np.float32: "f32", np.float64: "f64"}


def param(p: np.ndarray, shape: tuple, axis: int, block: int) -> np.ndarray:
    """A scale or zero point broadcast to the data's shape, as ONNX defines it."""
    if p.size == 1:
        return p.reshape(())
    axis %= len(shape)
    if block:
        return np.repeat(p, block, axis=axis).take(range(shape[axis]), axis=axis)
    dims = [1] * len(shape)
    dims[axis] = p.size
    return p.reshape(dims)


def ref_quantize(x, s, z, dtype, axis=1, block=0):
    with np.errstate(over="ignore"):  # an f16 quotient may overflow to inf: it saturates
        q = np.rint(x / param(s, x.shape, axis, block).astype(x.dtype)).astype(np.float64)
    zz = 0 if z is None else param(z, x.shape, axis, block).astype(np.int64)
    lo, hi = RANGE[dtype]
    return np.clip(q + zz, lo, hi).astype(dtype)


def ref_dequantize(q, s, z, axis=1, block=0):
    d = q.astype(np.float64) - (0 if z is None else param(z, q.shape, axis, block).astype(np.float64))
    return (d * param(s, q.shape, axis, block).astype(np.float64)).astype(s.dtype)


def ann(name: str, a: np.ndarray) -> str:
    return f"{name}{{{NAME[a.dtype.type]}}}[{', '.join(map(str, a.shape))}]"


def run(body: str, *args: np.ndarray, out: tuple[str, tuple], runtime: str):
    """One composite computing `body` over inputs A, B, C, D (the args, in order)."""
    ins = " ".join(ann("ABCD"[i], a) for i, a in enumerate(args))
    res = f"Y{{{out[0]}}}[{', '.join(map(str, out[1]))}]"
    mod = caten.loads(f"(composite f (({ins}) -> ({res})) {body})", runtime=runtime)
    return mod.f(*args)


def data(rng, shape, dtype=np.float32, scale=300.0):
    """Values over the whole range, with exact ties (k + 1/2) * 0.5 and saturating extremes."""
    x = (rng.normal(0, scale, shape)).astype(dtype)
    flat = x.reshape(-1)
    if flat.size >= 8:
        big = 6e4 if dtype == np.float16 else 1e6
        flat[:6] = np.array([0.25, 0.75, -0.25, -1.25, big, -big], dtype)  # ties at scale 0.5, both ends
    return x


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("out", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor_every_dtype(runtime, out):
    rng = np.random.default_rng(1)
    lo, hi = RANGE[out]
    x = data(rng, (3, 5, 7), scale=0.2 * hi + 5)
    s = np.array(0.5, np.float32)
    z = np.array(min(hi, 3) if lo == 0 else -2, out)
    got = run("(quantize A B :zero-point C)", x, s, z, out=(NAME[out], x.shape), runtime=runtime)
    np.testing.assert_array_equal(got, ref_quantize(x, s, z, out))
    assert got.reshape(-1)[4] == hi and got.reshape(-1)[5] == lo  # saturated at both ends
    # ties go to even: 0.5 -> 0, 1.5 -> 2, -0.5 -> 0, -2.5 -> -2 (plus the zero point)
    np.testing.assert_array_equal(got.reshape(-1)[:4].astype(np.int64) - int(z), [0, 2, 0, -2])


@pytest.mark.parametrize("xdt", [np.float16, np.float64])
def test_quantize_other_float_inputs(xdt):
    rng = np.random.default_rng(2)
    x = data(rng, (4, 9), xdt, scale=2000.0)
    s = np.array(0.75, xdt)
    for out in (np.int16, np.uint8):
        got = run(f"(quantize A B :dtype {NAME[out]})", x, s, out=(NAME[out], x.shape), runtime="numpy")
        np.testing.assert_array_equal(got, ref_quantize(x, s, None, out))


def test_quantize_f16_sixteen_bit_zero_point_is_exact():
    """The zero point is added in integers: in f16, 1001 + 30000 would round to 31008."""
    x = np.array([500.5, 1001.0, -3.0], np.float16)
    s, z = np.array(1.0, np.float16), np.array(30000, np.int16)
    got = run("(quantize A B :zero-point C)", x, s, z, out=("i16", (3,)), runtime="numpy")
    np.testing.assert_array_equal(got, [30500, 31001, 29997])


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_quantize_per_axis(runtime):
    rng = np.random.default_rng(3)
    x = data(rng, (3, 5, 7), scale=100.0)
    for axis in (0, 1, -1):
        n = x.shape[axis]
        s = rng.uniform(0.3, 2.0, n).astype(np.float32)
        z = rng.integers(-20, 20, n).astype(np.int8)
        got = run(f"(quantize A B :zero-point C :axis {axis})", x, s, z, out=("i8", x.shape), runtime=runtime)
        np.testing.assert_array_equal(got, ref_quantize(x, s, z, np.int8, axis))
        q = got
        back = run(f"(dequantize A B :zero-point C :axis {axis})", q, s, z, out=("f32", x.shape), runtime=runtime)
        np.testing.assert_array_equal(back, ref_dequantize(q, s, z, axis))


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_quantize_blocked(runtime):
    rng = np.random.default_rng(4)
    x = data(rng, (4, 7, 3), scale=100.0)
    for axis, block in ((1, 3), (0, 2), (-1, 1), (1, 7)):
        shape = list(x.shape)
        shape[axis] = -(-shape[axis] // block)  # ceil: 7 in blocks of 3 leaves a last block of 1
        s = rng.uniform(0.3, 2.0, shape).astype(np.float32)
        z = rng.integers(0, 40, shape).astype(np.uint8)
        keys = f":axis {axis} :block-size {block}"
        got = run(f"(quantize A B :zero-point C {keys})", x, s, z, out=("u8", x.shape), runtime=runtime)
        np.testing.assert_array_equal(got, ref_quantize(x, s, z, np.uint8, axis, block))
        back = run(f"(dequantize A B :zero-point C {keys})", got, s, z, out=("f32", x.shape), runtime=runtime)
        np.testing.assert_array_equal(back, ref_dequantize(got, s, z, axis, block))


def test_quantize_empty_dim_and_narrow_range():
    x = np.zeros((0, 5), np.float32)
    s = np.ones(5, np.float32)
    z = np.zeros(5, np.uint8)
    assert run("(quantize A B :zero-point C :axis 1)", x, s, z, out=("u8", (0, 5)), runtime="numpy").shape == (0, 5)
    # int4 carried in i8: :qmin/:qmax saturate to [-8, 7]
    x = np.array([-100.0, -8.4, -2.5, 3.5, 6.6, 7.5, 100.0], np.float32)
    got = run("(quantize A B :dtype i8 :qmin -8 :qmax 7)", x, np.array(1.0, np.float32),
              out=("i8", (7,)), runtime="numpy")
    np.testing.assert_array_equal(got, np.clip(np.rint(x), -8, 7))


@pytest.mark.parametrize("qdt", [np.uint8, np.int8, np.uint16, np.int16, np.int32])
@pytest.mark.parametrize("sdt", [np.float32, np.float16, np.float64])
def test_dequantize_every_dtype(qdt, sdt):
    rng = np.random.default_rng(5)
    info = np.iinfo(qdt)
    q = rng.integers(info.min, int(info.max) + 1, (5, 3), dtype=np.int64).astype(qdt)
    s = rng.uniform(0.01, 3.0, 3).astype(sdt)
    z = rng.integers(info.min, int(info.max) + 1, 3, dtype=np.int64).astype(qdt)
    got = run("(dequantize A B :zero-point C :axis 1)", q, s, z, out=(NAME[sdt], q.shape), runtime="numpy")
    # the reference: (q - z) in f32 (f64 for int32), the product in f32 (f64 for an f64 scale)
    wide = sdt == np.float64 or qdt == np.int32
    if qdt == np.int32:
        d = q.astype(np.float32).astype(np.float64) - z
    else:
        d = q.astype(np.float32) - z.astype(np.float32)
    want = (d.astype(np.float64) * s.astype(np.float64)) if wide else d * s.astype(np.float32)
    with np.errstate(over="ignore"):  # an f16 scale times 65535 may overflow, in the reference too
        np.testing.assert_array_equal(got, want.astype(sdt))
    if qdt != np.int32 and sdt != np.float16:  # then exact before one rounding to the scale's dtype
        np.testing.assert_array_equal(got, ref_dequantize(q, s, z, 1))


def test_quantize_diagnostics():
    """Refused with a caten diagnostic: an output dtype other than the 8/16-bit integers, a scale
    of the wrong size, a blocked scale over a symbolic size."""
    x = np.ones(3, np.float32)
    with pytest.raises(caten.Error, match="u8, i8, u16, i16, i4 or u4"):
        run("(quantize A B :zero-point C)", x, np.array(1.0, np.float32), np.array(0, np.int32),
            out=("i32", (3,)), runtime="numpy")
    with pytest.raises(caten.Error, match="per-axis scale or zero point of 4 entries"):
        run("(quantize A B :axis 0)", x, np.ones(4, np.float32), out=("u8", (3,)), runtime="numpy")
    with pytest.raises(caten.Error, match="blocked quantization needs static sizes"):
        caten.loads("(composite f ((X{f32}[N, C] S{f32}[N, B]) -> (Y{u8}[N, C])) "
                    "(quantize X S :axis 1 :block-size 3))", runtime="numpy")


def np_conv_int(x, w, stride, pad, groups):
    """int64 direct convolution (NCHW, OIHW), the oracle of conv2d-int."""
    x = np.pad(x.astype(np.int64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    y = np.zeros((n, o, oh, ow), np.int64)
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                y[:, oc, i, j] = (patch * w[oc].astype(np.int64)).sum(axis=(1, 2, 3))
    return y


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_matmul_int_is_exact_in_i32(runtime):
    """u8 x u8 sums beyond 2**24 (a float accumulator would round them), batched i8 with zero
    points, and empty dims, against numpy's int64 product."""
    rng = np.random.default_rng(6)
    a = rng.integers(200, 256, (3, 1031)).astype(np.uint8)
    b = rng.integers(200, 256, (1031, 5)).astype(np.uint8)
    got = run("(matmul-int A B)", a, b, out=("i32", (3, 5)), runtime=runtime)
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert want.max() > 2 ** 24 + 1
    np.testing.assert_array_equal(got, want)
    a = rng.integers(-128, 128, (2, 3, 7)).astype(np.int8)
    b = rng.integers(-128, 128, (7, 4)).astype(np.int8)
    az, bz = np.array(-5, np.int8), rng.integers(-128, 128, 4).astype(np.int8)
    got = run("(matmul-int A B :a-zero-point C :b-zero-point D)", a, b, az, bz, out=("i32", (2, 3, 4)), runtime=runtime)
    np.testing.assert_array_equal(got, (a.astype(np.int64) - az) @ (b.astype(np.int64) - bz))
    e = run("(matmul-int A B)", np.zeros((3, 0), np.uint8), np.zeros((0, 2), np.int8), out=("i32", (3, 2)),
            runtime=runtime)
    np.testing.assert_array_equal(e, np.zeros((3, 2), np.int32))


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_conv2d_int(runtime):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (2, 3, 7, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, (4, 3, 3, 2)).astype(np.int8)
    xz, wz = np.array(131, np.uint8), rng.integers(-128, 128, 4).astype(np.int8)
    got = run("(conv2d-int A B :x-zero-point C :w-zero-point D :stride 2 :padding 1)", x, w, xz, wz,
              out=("i32", (2, 4, 4, 4)), runtime=runtime)
    want = np_conv_int(x.astype(np.int64) - 131, w.astype(np.int64) - wz.reshape(4, 1, 1, 1), 2, 1, 1)
    np.testing.assert_array_equal(got, want)
    x = rng.integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
    got = run("(conv2d-int A B :groups 2)", x, w, out=("i32", (1, 6, 3, 3)), runtime=runtime)
    np.testing.assert_array_equal(got, np_conv_int(x, w, 1, 0, 2))


def test_tensor_methods():
    """Every library composite is a caten.Tensor method and a caten.functional function."""
    import caten.functional as F

    x = np.array([0.25, 0.75, -3.0, 1000.0, -1000.0], np.float32)
    t = caten.Tensor(x, runtime="numpy")
    s, z = np.array(0.5, np.float32), np.array(-3, np.int8)
    q = t.quantize(caten.Tensor(s, runtime="numpy"), zero_point=caten.Tensor(z, runtime="numpy"))
    assert q.dtype == "i8"
    np.testing.assert_array_equal(q.numpy(), ref_quantize(x, s, z, np.int8))
    back = q.dequantize(caten.Tensor(s, runtime="numpy"), zero_point=caten.Tensor(z, runtime="numpy"))
    np.testing.assert_array_equal(back.numpy(), ref_dequantize(q.numpy(), s, z))
    a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    b = np.arange(6, dtype=np.int8).reshape(3, 2)
    got = F.matmul_int(caten.Tensor(a, runtime="numpy"), caten.Tensor(b, runtime="numpy"),
                       b_zero_point=caten.Tensor(np.array(2, np.int8), runtime="numpy"))
    np.testing.assert_array_equal(got.numpy(), a.astype(np.int64) @ (b.astype(np.int64) - 2))
