"""The integer GEMM over 16-bit pairs (caten.schedule.pairs, caten.lower.gemm_pairs): i32 sums
of narrow-integer products packed two k a word and multiplied pairwise (vpmaddwd on x86).

The oracle is numpy's int64 product wrapped to int32 (ONNX's MatMulInteger/ConvInteger sum in
int32). Shapes cover odd K (a half pair ends the block), K past one block, edge tiles, empty dims,
batches, zero points per tensor and per column, i16 extremes (the one pair sum that overflows,
2 * (-32768)^2, must wrap as the plain sum does) and operands too wide for pairs (u16), which
keep the plain path."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import caten
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.schedule.pairs import fits16, int_range

NAME = {np.uint8: "u8", np.int8: "i8", np.uint16: "u16", np.int16: "i16"}
LO_HI = {np.uint8: (0, 256), np.int8: (-128, 128), np.uint16: (0, 65536), np.int16: (-32768, 32768)}
PROG = """(composite mm ((A{%s}[B M K] W{%s}[K N] az{%s}[] wz{%s}[N]) -> (C{i32}[B M N]))
  (matmul-int A W :a-zero-point az :b-zero-point wz))"""


def _want(a, w, az, wz):
    return ((a.astype(np.int64) - np.int64(az)) @ (w.astype(np.int64) - wz.astype(np.int64))).astype(np.int32)


def _draw(rng, dt, shape):
    lo, hi = LO_HI[dt]
    return rng.integers(lo, hi, shape).astype(dt)


SHAPES = [(1, 64, 33, 40), (2, 7, 1, 5), (1, 130, 257, 70), (1, 1, 64, 1), (3, 13, 700, 19), (1, 0, 3, 4),
          (1, 5, 0, 3), (1, 6, 2, 16)]


@pytest.mark.parametrize("runtime,types", [("llvm", (np.uint8, np.int8)), ("llvm", (np.int8, np.int8)),
                                           ("llvm", (np.uint8, np.uint8)), ("c", (np.uint8, np.int8))])
def test_pair_gemm_matches_numpy(runtime, types):
    ta, tw = types
    rng = np.random.default_rng(hash(types) % 1000)
    src = PROG % (NAME[ta], NAME[tw], NAME[ta], NAME[tw])
    for b, m, k, n in SHAPES:
        mod = caten.loads(src, defines={"B": b, "M": m, "K": k, "N": n}, runtime=runtime)
        a, w = _draw(rng, ta, (b, m, k)), _draw(rng, tw, (k, n))
        az, wz = _draw(rng, ta, ()), _draw(rng, tw, (n,))
        np.testing.assert_array_equal(mod.mm(a, w, np.array(az), wz), _want(a, w, az, wz), err_msg=str((b, m, k, n)))


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_pair_gemm_under_bounds_checks(runtime):
    """The checked mode expands the tiles into plain loops (TileMM.expand's pair product)."""
    rng = np.random.default_rng(3)
    src = PROG % ("u8", "i8", "u8", "i8")
    mod = caten.loads(src, defines={"B": 2, "M": 37, "K": 71, "N": 45}, runtime=runtime, check_bounds=True)
    a, w = _draw(rng, np.uint8, (2, 37, 71)), _draw(rng, np.int8, (71, 45))
    az, wz = np.uint8(7), _draw(rng, np.int8, (45,))
    np.testing.assert_array_equal(mod.mm(a, w, np.array(az), wz), _want(a, w, az, wz))


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_i16_extremes_wrap_as_int32(runtime):
    """Every product 2^30 and sums far past 2^31: the i32 result wraps exactly as numpy's int32."""
    src = """(composite mm ((A{i16}[M K] W{i16}[K N]) -> (C{i32}[M N])) (matmul-int A W))"""
    mod = caten.loads(src, defines={"M": 9, "K": 35, "N": 17}, runtime=runtime)
    rng = np.random.default_rng(4)
    a = np.full((9, 35), -32768, np.int16)
    w = np.full((35, 17), -32768, np.int16)
    a[1::2] = _draw(rng, np.int16, (4, 35))
    w[:, ::3] = _draw(rng, np.int16, (35, 6))
    want = (a.astype(np.int64) @ w.astype(np.int64)).astype(np.int32)
    np.testing.assert_array_equal(mod.mm(a, w), want)


def test_wide_operands_keep_the_plain_path():
    """u16 - u16 spans 17 bits: no pairs (the plain i32 loop), still exact."""
    src = """(composite mm ((A{u16}[M K] W{u16}[K N]) -> (C{i32}[M N])) (matmul-int A W))"""
    mod = caten.loads(src, defines={"M": 5, "K": 9, "N": 7}, runtime="llvm")
    rng = np.random.default_rng(5)
    a, w = _draw(rng, np.uint16, (5, 9)), _draw(rng, np.uint16, (9, 7))
    np.testing.assert_array_equal(mod.mm(a, w), (a.astype(np.int64) @ w.astype(np.int64)).astype(np.int32))


def test_range_analysis():
    """Bounds through casts, zero-point subtraction, views and products; unknown for wide data."""
    u8 = Node.make(Op.BUFFER, T.u8, (4,), (), (0, "in", "a"))
    i32 = Node.make(Op.CAST, T.i32, (4,), (u8,))
    assert int_range(i32) == (0, 255)
    z = Node.make(Op.NEG, T.i32, (4,), (i32,))
    d = Node.make(Op.ADD, T.i32, (4,), (i32, z))
    assert int_range(d) == (-255, 255) and fits16(d)
    sq = Node.make(Op.MUL, T.i32, (4,), (d, d))
    assert int_range(sq) == (-65025, 65025) and not fits16(sq)
    w32 = Node.make(Op.BUFFER, T.i32, (4,), (), (1, "in", "b"))
    assert int_range(w32) is None and not fits16(w32)


@pytest.mark.parametrize("cpu,want", [("znver3", "vpmaddwd"), ("skylake-avx512", "vpmaddwd"),
                                      ("icelake-server", "vpdpwssd"), ("x86-64", "pmaddwd")])
def test_the_micro_kernel_uses_the_isa_s_pair_instruction(tmp_path, cpu, want):
    """Compiled for each x86 level (whatever the host): AVX2's and AVX-512's vpmaddwd, VNNI's
    fused vpdpwssd, SSE2's pmaddwd."""
    src = tmp_path / "mm.lisp"
    src.write_text(PROG % ("u8", "i8", "u8", "i8"))
    out = tmp_path / "mm.s"
    subprocess.run([sys.executable, "-m", "caten", "compile", str(src), "-D", "B=1", "-D", "M=64", "-D", "K=64",
                    "-D", "N=64", "--cpu", cpu, "--emit", "asm", "-o", str(out)], check=True, timeout=120)
    asm = out.read_text()
    assert f"\t{want}\t" in asm, cpu
    if cpu != "x86-64":
        reg = "%zmm" if "avx512" in cpu or cpu.startswith("icelake") else "%ymm"
        assert any(reg in line for line in asm.splitlines() if want in line), cpu


def _conv_ref(x, w, stride, pad, dil, groups):
    """int64 convolution with dilation (NCHW, OIHW): the dilated kernel spread with zeros."""
    o, cg, kh, kw = w.shape
    wd = np.zeros((o, cg, (kh - 1) * dil + 1, (kw - 1) * dil + 1), np.int64)
    wd[:, :, ::dil, ::dil] = w
    x = np.pad(x.astype(np.int64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    n, c, h, wdt = x.shape
    oh, ow = (h - wd.shape[2]) // stride + 1, (wdt - wd.shape[3]) // stride + 1
    og = o // groups
    y = np.zeros((n, o, oh, ow), np.int64)
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                r, q = i * stride, j * stride
                patch = x[:, g * cg:(g + 1) * cg, r:r + wd.shape[2], q:q + wd.shape[3]]
                y[:, oc, i, j] = (patch * wd[oc]).sum(axis=(1, 2, 3))
    return y


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_conv2d_int_im2col_path(runtime):
    """8-bit data runs as an i16 im2col matrix times the weights over 16-bit pairs: dilation,
    stride, groups, a zero point per tensor and per output channel, an empty batch; 16-bit data
    keeps the convolution of the centered i32 values."""
    rng = np.random.default_rng(8)
    for (n, c, h, wd), (o, kh, kw), stride, pad, dil, groups in [((2, 4, 9, 8), (6, 3, 3), 1, 2, 2, 2),
                                                                  ((1, 3, 7, 7), (5, 1, 1), 2, 0, 1, 1),
                                                                  ((0, 2, 5, 5), (3, 3, 3), 1, 1, 1, 1)]:
        x = rng.integers(0, 256, (n, c, h, wd)).astype(np.uint8)
        w = rng.integers(-128, 128, (o, c // groups, kh, kw)).astype(np.int8)
        xz, wz = np.uint8(rng.integers(0, 256)), rng.integers(-128, 128, o).astype(np.int8)
        oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
        ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
        src = (f"(composite f ((A{{u8}}[{n}, {c}, {h}, {wd}]) (B{{i8}}[{o}, {c // groups}, {kh}, {kw}]) (C{{u8}}[]) "
               f"(D{{i8}}[{o}]) -> (Y{{i32}}[{n}, {o}, {oh}, {ow}])) (conv2d-int A B :x-zero-point C "
               f":w-zero-point D :stride {stride} :padding {pad} :dilation {dil} :groups {groups}))")
        got = caten.loads(src, runtime=runtime).f(x, w, np.array(xz), wz)
        want = _conv_ref(x.astype(np.int64) - int(xz), w.astype(np.int64) - wz.reshape(-1, 1, 1, 1).astype(np.int64),
                         stride, pad, dil, groups)
        np.testing.assert_array_equal(got, want.astype(np.int32), err_msg=str((n, c, h, wd, o, groups)))
    x = rng.integers(0, 65536, (1, 2, 5, 5)).astype(np.uint16)
    w = rng.integers(0, 65536, (3, 2, 3, 3)).astype(np.uint16)
    src = ("(composite f ((A{u16}[1, 2, 5, 5]) (B{u16}[3, 2, 3, 3]) -> (Y{i32}[1, 3, 5, 5])) "
           "(conv2d-int A B :padding 1))")
    got = caten.loads(src, runtime=runtime).f(x, w)
    np.testing.assert_array_equal(got, _conv_ref(x, w.astype(np.int64), 1, 1, 1, 1).astype(np.int32))


def test_pair_gemm_and_conv_on_opencl():
    """OpenCL renders the tiles as plain loops (TileMM.expand): the pair product's top half is an
    arithmetic shift. (It was a CAST from f64, which reached the C-style renderer after the
    decompose pass and failed every matmul-int and conv2d-int there.)"""
    from caten import plugin as R

    ok, why = R.get("opencl").available()
    if not ok:
        pytest.skip(f"opencl unavailable: {why}")
    rng = np.random.default_rng(11)
    for ta, tw in [(np.uint8, np.int8), (np.int8, np.int8), (np.int16, np.int16)]:
        src = PROG % (NAME[ta], NAME[tw], NAME[ta], NAME[tw])
        mod = caten.loads(src, defines={"B": 2, "M": 9, "K": 37, "N": 21}, runtime="opencl")
        a, w = _draw(rng, ta, (2, 9, 37)), _draw(rng, tw, (37, 21))
        az, wz = _draw(rng, ta, ()), _draw(rng, tw, (21,))
        np.testing.assert_array_equal(mod.mm(a, w, np.array(az), wz), _want(a, w, az, wz), err_msg=str((ta, tw)))
    x = rng.integers(0, 256, (1, 4, 7, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, (5, 4, 3, 3)).astype(np.int8)
    src = ("(composite f ((A{u8}[1, 4, 7, 6]) (B{i8}[5, 4, 3, 3]) -> (Y{i32}[1, 5, 7, 6]))"
           " (conv2d-int A B :padding 1))")
    got = caten.loads(src, runtime="opencl").f(x, w)
    want = _conv_ref(x.astype(np.int64), w.astype(np.int64), 1, 1, 1, 1)
    np.testing.assert_array_equal(got, want)
