"""`matmul-nbits` (ops/quant.lisp) and the import of onnxruntime's com.microsoft MatMulNBits
(caten/frontends/onnx/nbits.py): 4-bit codes packed two a byte, a scale (and zero point) per block
of K. Two oracles: an f64 numpy dequantize + matmul written here from the op's spec, and
onnxruntime's own CPU kernel on a one-node model. Errors are measured against |A| @ |W|^T (the sum
of the magnitudes of the products: f32 summation in another order may differ by a few f32 steps of
it), on numpy, llvm and c, the compiled ones with bounds checks."""

from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

import caten

EPS32 = float(np.finfo(np.float32).eps)


def unpack(B: np.ndarray, bits: int = 4) -> np.ndarray:
    """The codes of B [N, KB, BS*bits/8] as [N, KB, BS]: 4 bits, the low nibble holds the even k."""
    if bits == 8:
        return B.astype(np.int64)
    q = np.empty(B.shape[:2] + (2 * B.shape[2],), np.int64)
    q[..., 0::2], q[..., 1::2] = B & 15, B >> 4
    return q


def dequantized(B: np.ndarray, S: np.ndarray, K: int, zp: np.ndarray | None, bits: int = 4) -> np.ndarray:
    """W [N, K] in f64: (code - zero point) * scale per block, the last block cut at K."""
    N, KB, _ = B.shape
    if zp is None:
        z = np.full((N, KB), 8.0 if bits == 4 else 128.0)
    elif zp.dtype == np.uint8 and bits == 8:
        z = zp.reshape(N, KB).astype(np.float64)
    elif zp.dtype == np.uint8:  # [N * ceil(KB/2)], the even block in the low nibble
        zz = zp.reshape(N, -1).astype(np.int64)
        z = np.stack([zz & 15, zz >> 4], -1).reshape(N, -1)[:, :KB].astype(np.float64)
    else:
        z = zp.reshape(N, KB).astype(np.float64)
    w = (unpack(B, bits) - z[..., None]) * S.reshape(N, KB, 1).astype(np.float64)
    return w.reshape(N, -1)[:, :K]


def oracle(A, B, S, K, zp=None, bias=None, bits=4) -> tuple[np.ndarray, np.ndarray]:
    """(A @ W^T + bias in f64, |A| @ |W|^T: the scale of a summation's rounding)."""
    W = dequantized(B, S, K, zp, bits)
    a = A.astype(np.float64)
    y = a @ W.T + (0.0 if bias is None else bias.astype(np.float64))
    return y, np.abs(a) @ np.abs(W).T


def nbits_model(shape_a, N: int, K: int, bs: int, B, S, zp=None, bias=None, dtype="f32", attrs=None, bits=4):
    """A one-node ONNX model of com.microsoft MatMulNBits, its weights initializers."""
    from onnx import TensorProto, helper, numpy_helper

    code = TensorProto.FLOAT16 if dtype == "f16" else TensorProto.FLOAT
    ins = ["A", "B", "S", "Z" if zp is not None else "", "", "bias" if bias is not None else ""]
    while ins[-1] == "":
        ins.pop()
    kw = {"K": K, "N": N, "bits": bits, "block_size": bs, **(attrs or {})}
    node = helper.make_node("MatMulNBits", ins, ["Y"], domain="com.microsoft", **kw)
    inits = [numpy_helper.from_array(B, "B"), numpy_helper.from_array(S, "S")]
    inits += [numpy_helper.from_array(zp, "Z")] if zp is not None else []
    inits += [numpy_helper.from_array(bias, "bias")] if bias is not None else []
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", code, list(shape_a))],
                          [helper.make_tensor_value_info("Y", code, list(shape_a[:-1]) + [N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def ort_run(model, A: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"A": A})[0]


def case(lead, N, K, bs, zp_kind, with_bias, dtype="f32", seed=0, bits=4):
    """Random A [*lead, K], packed B, scales, zero points ("u8" packed, "f" floats, None) and bias."""
    rng = np.random.default_rng(seed)
    npdt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]
    KB = -(-K // bs)
    A = rng.standard_normal(tuple(lead) + (K,)).astype(npdt)
    B = rng.integers(0, 256, (N, KB, bs * bits // 8), dtype=np.uint8)
    S = (rng.random(N * KB) * 0.2 + 0.01).astype(npdt)
    zp = None
    if zp_kind == "u8":
        zp = rng.integers(0, 256, N * ((KB + 1) // 2 if bits == 4 else KB), dtype=np.uint8)
    elif zp_kind == "f":
        zp = (rng.random(N * KB) * (2 ** bits - 1)).astype(npdt)
    bias = rng.standard_normal(N).astype(npdt) if with_bias else None
    return A, B, S, zp, bias


def source(A, B, S, zp, bias, bits=4) -> str:
    """A composite calling matmul-nbits on arguments of these shapes and dtypes."""
    dt = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.float64): "f64",
          np.dtype(np.uint8): "u8"}

    def p(name, x):
        return f"{name}{{{dt[x.dtype]}}}[{', '.join(map(str, x.shape))}]"

    params = [p("A", A), p("B", B), p("S", S)] + ([p("Z", zp)] if zp is not None else [])
    params += [p("b", bias)] if bias is not None else []
    out = list(A.shape[:-1]) + [B.shape[0]]
    keys = (" :zero-point Z" if zp is not None else "") + (" :bias b" if bias is not None else "")
    keys += f" :bits {bits}" if bits != 4 else ""
    return (f"(composite f (({' '.join(params)}) -> (Y{{{dt[A.dtype]}}}[{', '.join(map(str, out))}]))"
            f" (matmul-nbits A B S{keys}))")


def assert_close(y: np.ndarray, want: np.ndarray, mag: np.ndarray, f16: bool = False) -> None:
    """|y - want| within 8 f32 steps of the products' magnitude sum (plus an f16 rounding of the
    result for f16 outputs)."""
    y = np.asarray(y, np.float64)
    tol = 8 * EPS32 * mag + (2.0 ** -10 * np.abs(want) if f16 else 0.0) + 1e-30
    assert y.shape == want.shape
    bad = np.abs(y - want) > tol
    assert not bad.any(), f"{bad.sum()} of {bad.size} off, worst {np.max(np.abs(y - want) - tol)}"


CASES = [  # lead dims of A, N, K, block size, zero points, bias
    ((1,), 96, 700, 32, None, False),      # K not a multiple of the block: the last one padded
    ((3,), 40, 77, 16, "u8", True),        # 5 blocks: the last zero-point byte half used
    ((2,), 17, 300, 128, "f", True),       # float zero points
    ((2, 3), 24, 64, 32, "u8", False),     # batch dims on A, K a multiple of the block
    ((0,), 8, 40, 16, None, True),         # an empty M
    ((), 33, 129, 16, "u8", True),         # A a vector: Y [N]
    ((1,), 5, 1, 32, None, False),         # K = 1
]


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("lead,N,K,bs,zp_kind,with_bias", CASES)
def test_composite_matches_the_oracle(runtime, lead, N, K, bs, zp_kind, with_bias):
    A, B, S, zp, bias = case(lead, N, K, bs, zp_kind, with_bias)
    args = [x for x in (A, B, S, zp, bias) if x is not None]
    mod = caten.loads(source(A, B, S, zp, bias), runtime=runtime, check_bounds=runtime != "numpy")
    y = np.asarray(mod.f(*args))
    want, mag = oracle(A, B, S, K, zp, bias)
    assert_close(y, want, mag)


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_one_compile_serves_symbolic_leading_dims(runtime):
    src = ("(composite f ((A{f32}[M, T, 70] B{u8}[12, 5, 8] S{f32}[60] Z{u8}[36]) -> (Y{f32}[M, T, 12]))"
           " (matmul-nbits A B S :zero-point Z))")
    mod = caten.loads(src, runtime=runtime, check_bounds=runtime != "numpy")
    for lead in [(1, 1), (3, 5), (0, 2)]:
        A, B, S, zp, _ = case(lead, 12, 70, 16, "u8", False)
        want, mag = oracle(A, B, S, 70, zp)
        assert_close(np.asarray(mod.f(A, B, S, zp)), want, mag)


EIGHT = [  # 8-bit codes: lead dims, N, K, block size, zero points ([N*blocks] bytes), bias
    ((2,), 24, 100, 16, None, True),
    ((3,), 17, 77, 32, "u8", False),
    ((1, 2), 9, 130, 64, "f", True),
]


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("lead,N,K,bs,zp_kind,with_bias", EIGHT)
def test_eight_bit_codes(runtime, lead, N, K, bs, zp_kind, with_bias):
    A, B, S, zp, bias = case(lead, N, K, bs, zp_kind, with_bias, bits=8)
    args = [x for x in (A, B, S, zp, bias) if x is not None]
    mod = caten.loads(source(A, B, S, zp, bias, bits=8), runtime=runtime, check_bounds=runtime != "numpy")
    want, mag = oracle(A, B, S, K, zp, bias, bits=8)
    assert_close(np.asarray(mod.f(*args)), want, mag)


@pytest.mark.parametrize("lead,N,K,bs,zp_kind,with_bias", [c for c in EIGHT if c[4] != "f"])
def test_eight_bit_import_matches_onnxruntime(lead, N, K, bs, zp_kind, with_bias):
    pytest.importorskip("onnx")
    import caten.onnx

    A, B, S, zp, bias = case(lead, N, K, bs, zp_kind, with_bias, bits=8)
    model = nbits_model(A.shape, N, K, bs, B, S, zp, bias, bits=8)
    y = np.asarray(caten.onnx.load(model, runtime="llvm", check_bounds=True)(A))
    want, mag = oracle(A, B, S, K, zp, bias, bits=8)
    assert_close(y, want, mag)
    ref = ort_run(model, A)
    assert_close(ref.astype(np.float64), want, mag)
    assert_close(y, ref.astype(np.float64), mag)


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("dtype,zp_kind", [("f16", "u8"), ("f16", "f"), ("f64", "u8"), ("f64", "f")])
def test_composite_in_other_float_dtypes(runtime, dtype, zp_kind):
    """f16 A and scales (products summed in f32, the result rounded to f16); f64 (summed in f64)."""
    A, B, S, zp, bias = case((2,), 24, 100, 32, zp_kind, True, dtype)
    args = [x for x in (A, B, S, zp, bias) if x is not None]
    mod = caten.loads(source(A, B, S, zp, bias), runtime=runtime, check_bounds=runtime != "numpy")
    y = np.asarray(mod.f(*args))
    assert y.dtype == A.dtype
    want, mag = oracle(A, B, S, 100, zp, bias)
    if dtype == "f64":
        assert np.all(np.abs(y - want) <= 64 * np.finfo(np.float64).eps * mag)
    else:
        assert_close(y, want, mag, f16=True)


@pytest.mark.parametrize("lead,N,K,bs,zp_kind,with_bias", [c for c in CASES if len(c[0]) >= 1 and c[0][0] != 0])
def test_onnxruntime_agrees_with_the_oracle(lead, N, K, bs, zp_kind, with_bias):
    """The oracle is onnxruntime's semantics (a check of this file's reading of the op)."""
    A, B, S, zp, bias = case(lead, N, K, bs, zp_kind, with_bias)
    want, mag = oracle(A, B, S, K, zp, bias)
    assert_close(ort_run(nbits_model(A.shape, N, K, bs, B, S, zp, bias), A), want, mag)


IMPORT_CASES = [  # lead, N, K, bs, zero points, bias, dtype, runtime
    ((1,), 96, 700, 32, None, False, "f32", "llvm"),
    ((3,), 40, 77, 16, "u8", True, "f32", "c"),
    ((2,), 17, 300, 128, "f", True, "f32", "numpy"),
    ((2, 3), 24, 64, 32, "u8", True, "f32", "llvm"),
    ((0,), 8, 40, 16, "u8", True, "f32", "llvm"),
    ((2,), 24, 100, 32, "u8", True, "f16", "llvm"),
    ((1,), 16, 64, 16, None, False, "f16", "c"),
]


@pytest.mark.parametrize("lead,N,K,bs,zp_kind,with_bias,dtype,runtime", IMPORT_CASES)
def test_import_matches_onnxruntime_and_the_oracle(lead, N, K, bs, zp_kind, with_bias, dtype, runtime):
    pytest.importorskip("onnx")
    import caten.onnx

    A, B, S, zp, bias = case(lead, N, K, bs, zp_kind, with_bias, dtype)
    model = nbits_model(A.shape, N, K, bs, B, S, zp, bias, dtype)
    mod = caten.onnx.load(model, runtime=runtime, check_bounds=runtime != "numpy")
    y = np.asarray(mod(A))
    assert y.dtype == A.dtype
    want, mag = oracle(A, B, S, K, zp, bias)
    assert_close(y, want, mag, f16=dtype == "f16")
    if A.size:
        ref = ort_run(model, A)
        assert_close(y, ref.astype(np.float64), mag + np.abs(ref), f16=dtype == "f16")


def test_import_feeds_a_following_node():
    """The op's output type is known to the nodes after it (onnx has no schema to infer it)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import caten.onnx

    A, B, S, zp, bias = case((2,), 12, 50, 16, "u8", True)
    m = nbits_model(A.shape, 12, 50, 16, B, S, zp, bias)
    g = m.graph
    g.node[0].output[0] = "h"
    g.node.append(helper.make_node("Relu", ["h"], ["Y"]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("Y", TensorProto.FLOAT, None))
    y = np.asarray(caten.onnx.load(m, runtime="llvm")(A))
    want, mag = oracle(A, B, S, 50, zp, bias)
    assert_close(y, np.maximum(want, 0), mag)


@pytest.mark.parametrize("attrs,inputs,msg", [
    ({"bits": 2}, None, "bits=2"),
    ({"accuracy_level": 4}, None, "accuracy_level=4"),
    ({"block_size": 24}, None, "power of 2"),
    ({"K": 65}, None, "K=65"),
    ({}, "g_idx", "g_idx"),
])
def test_import_refuses_what_it_cannot_match(attrs, inputs, msg):
    pytest.importorskip("onnx")
    from onnx import numpy_helper

    import caten.onnx

    A, B, S, zp, bias = case((1,), 8, 64, 16, None, False)
    m = nbits_model(A.shape, 8, 64, 16, B, S, attrs=attrs)
    if inputs == "g_idx":
        m.graph.node[0].input.extend(["", "g"])
        m.graph.initializer.append(numpy_helper.from_array(np.arange(64, dtype=np.int32) // 16, "g"))
    with pytest.raises(caten.Error, match=re.escape(msg)):
        caten.onnx.load(m, runtime="numpy")(A)


def test_tensor_entry():
    """The library composite is a caten.Tensor function too (caten.matmul_nbits)."""
    A, B, S, zp, bias = case((3,), 20, 70, 16, "u8", True)
    y = caten.matmul_nbits(caten.tensor(A), caten.tensor(B), caten.tensor(S), zero_point=caten.tensor(zp),
                           bias=caten.tensor(bias))
    want, mag = oracle(A, B, S, 70, zp, bias)
    assert_close(y.numpy(), want, mag)


def test_import_refuses_float_zero_points_of_eight_bit_codes():
    """onnxruntime's CPU kernel has no such mode either: nothing to match."""
    pytest.importorskip("onnx")
    import caten.onnx

    A, B, S, zp, bias = case((1,), 8, 64, 16, "f", False, bits=8)
    with pytest.raises(caten.Error, match="u8 zero points"):
        caten.onnx.load(nbits_model(A.shape, 8, 64, 16, B, S, zp, bits=8), runtime="numpy")(A)


def test_other_com_microsoft_ops_stay_refused():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import caten.onnx

    node = helper.make_node("Gelu", ["A"], ["Y"], domain="com.microsoft")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(caten.Error, match="com.microsoft"):
        caten.onnx.load(m, runtime="numpy")(np.ones(2, np.float32))


@pytest.mark.parametrize("src,msg", [
    ("(composite f ((A{f32}[1, 64] B{u8}[8, 4, 8] S{f32}[31]) -> (Y{f32}[1, 8])) (matmul-nbits A B S))", "scales"),
    ("(composite f ((A{f32}[1, 64] B{u8}[8, 3, 8] S{f32}[24]) -> (Y{f32}[1, 8])) (matmul-nbits A B S))", "blocks"),
    ("(composite f ((A{f32}[1, 60] B{u8}[8, 5, 6] S{f32}[40]) -> (Y{f32}[1, 8])) (matmul-nbits A B S))", "block size"),
    ("(composite f ((A{f32}[1, 64] B{u8}[8, 4, 8] S{f32}[32]) -> (Y{f32}[1, 8])) (matmul-nbits A B S :bits 2))",
     "8-bit"),
    ("(composite f ((A{f32}[1, 64] B{u8}[8, 4, 8] S{f32}[32]) -> (Y{f32}[1, 8])) (matmul-nbits A B S :bits 8))",
     "blocks"),
    ("(composite f ((A{f32}[1, 64] B{u8}[8, 4, 8] S{f32}[32] Z{u8}[8]) -> (Y{f32}[1, 8]))"
     " (matmul-nbits A B S :zero-point Z))", "zero points"),
])
def test_composite_refuses_bad_shapes(src, msg):
    with pytest.raises(caten.Error, match=msg):
        caten.loads(src, runtime="numpy")


def test_one_gemv_kernel_reads_the_packed_codes(tmp_path):
    """A batch-1 GEMV is a copy of A's even/odd k, the zero points unpacked ([N, blocks] bytes), one
    kernel over the packed bytes with [N, 8] partial sums, and their sum: no buffer near a
    dequantized W (N*K f32) is made."""
    from caten.cli.main import cli

    N, K = 256, 1000
    A, B, S, zp, bias = case((1,), N, K, 32, "u8", True)
    file = tmp_path / "nbits.lisp"
    file.write_text(source(A, B, S, zp, bias))
    res = CliRunner().invoke(cli, ["-r", "llvm", str(file), "--emit", "schedule"])
    out = res.output
    assert res.exit_code == 0 and "4 kernel(s)" in out, out
    assert int(re.search(r"arena (\d+) bytes", out).group(1)) < N * K // 2, out  # under the packed codes' size
    main = out.split("kernel f__k2:")[1].split("kernel f__k3")[0]
    assert "in1" in main and "(tiled) REDUCE f32 [256 1 1 8]" in main, out


@pytest.mark.parametrize("bits,zp_kind,lead,K,bs", [(4, None, (3,), 40, 32), (4, "u8", (2, 3), 50, 16),
                                                    (4, "f", (5,), 33, 16), (8, "u8", (3,), 40, 16),
                                                    (8, None, (1,), 16, 16)])
@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_gradients_match_torch(runtime, bits, zp_kind, lead, K, bs):
    """dA = dY W and dS = the per-block sums of (dYᵀ A)(q - z), against torch's autograd through
    the dequantized weights in f64 (the codes and zero points are constants)."""
    torch = pytest.importorskip("torch")
    A, B, S, zp, _ = case(lead, 4, K, bs, zp_kind, False, seed=7, bits=bits)
    G = np.random.default_rng(8).standard_normal(tuple(lead) + (4,)).astype(np.float32)

    def p(name, x):
        return f"{name}{{{'u8' if x.dtype == np.uint8 else 'f32'}}}[{', '.join(map(str, x.shape))}]"

    ins = [("A", A), ("B", B), ("S", S)] + ([("Z", zp)] if zp is not None else [])
    names = " ".join(n for n, _ in ins)
    src = source(A, B, S, zp, None, bits) + (
        f"\n(composite g (({' '.join(p(n, x) for n, x in ins)} {p('G', G)}) -> ({p('dA', A)}) ({p('dS', S)}))\n"
        f"  (setf r (vjp f {names} :wrt [A S] :cotangent G))\n  (return (nth r 0) (nth r 1)))")
    dA, dS = caten.loads(src, runtime=runtime, check_bounds=runtime != "numpy").g(*[x for _, x in ins], G)
    N, KB, _ = B.shape
    ta = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    ts = torch.tensor(S, dtype=torch.float64, requires_grad=True)
    c = torch.tensor(dequantized(B, np.ones(N * KB), KB * bs, zp, bits))  # (q - z), every block whole
    w = (c.reshape(N, KB, bs) * ts.reshape(N, KB, 1)).reshape(N, -1)[:, :K]
    wa, ws = torch.autograd.grad(ta @ w.T, (ta, ts), torch.tensor(G, dtype=torch.float64))
    np.testing.assert_allclose(dA, wa.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dS, ws.numpy(), rtol=1e-4, atol=1e-3)
