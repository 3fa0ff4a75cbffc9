"""onnxruntime's weight-only quantized matmul, `com.microsoft` MatMulNBits (what its 4-bit weight
quantizer writes for LLM weights), as the library's `matmul-nbits`: the packed codes are read in
the kernel, never dequantized into a float copy of the weight.

Only the contrib ops in `MICROSOFT` are accepted from that domain (translate.lower_node asks), so
a `com.microsoft` op that shares a name with an ONNX op is still refused."""

from __future__ import annotations

from caten.frontends.onnx.node import N, handler

MICROSOFT = frozenset({"MatMulNBits"})  # the com.microsoft ops this importer lowers


@handler("MatMulNBits")
def _matmul_nbits(n: N) -> str:
    """Y = A @ dequantize(B)^T (+ bias), with onnxruntime's CPU semantics for bits 4 and 8 and
    accuracy levels 0/1 (products in f32). Levels 2-4 run on onnxruntime with f16/bf16 products or
    A quantized to int8 blockwise, which caten does not reproduce: refused, as are other bit widths
    (2) and g_idx (act-order) reordering."""
    bits, bs, acc = n.a("bits", 4), n.a("block_size"), n.a("accuracy_level", 0)
    k_attr, n_attr = n.a("K"), n.a("N")
    if bits not in (4, 8):
        raise n.fail(f"MatMulNBits with bits={bits} is not supported (only 4- and 8-bit codes)")
    if acc not in (0, 1):
        raise n.fail(f"MatMulNBits with accuracy_level={acc} is not supported: onnxruntime then computes "
                     "in f16/bf16 or with A quantized to int8, which caten does not reproduce (levels 0 and 1 "
                     "are f32)")
    if n.has(4):
        raise n.fail("MatMulNBits with g_idx (act-order block indices) is not supported")
    if bs is None or k_attr is None or n_attr is None:
        raise n.fail("MatMulNBits needs the attributes K, N and block_size")
    if bs < 16 or bs & (bs - 1):
        raise n.fail(f"MatMulNBits block_size must be a power of 2 >= 16, got {bs}")
    dt = n.dt(0)
    if dt not in ("f32", "f16") or n.dt(2) != dt:
        raise n.fail(f"MatMulNBits takes A and scales of one dtype, f32 or f16; got {dt} and {n.dt(2)}")
    shape = n.shape(0)
    if shape[-1] != k_attr:
        raise n.fail(f"A's last dim {shape[-1]} differs from the attribute K={k_attr}")
    kb = -(-k_attr // bs)
    b, blob = n.x(1), bs * bits // 8
    if n.shape(1) != [n_attr, kb, blob] or n.dt(1) != "u8":
        if n.dt(1) != "u8" or [d for d in n.shape(1) if not isinstance(d, int)] or \
                _count(n.shape(1)) != n_attr * kb * blob:
            raise n.fail(f"B must be u8 [N, ceil(K/block_size), block_size*bits/8] = [{n_attr}, {kb}, {blob}], "
                         f"got {n.dt(1)} {n.shape(1)}")
        b = f"(reshape {b} [{n_attr} {kb} {blob}])"
    keys = f" :bits {bits}" if bits != 4 else ""
    if n.has(3):
        if n.dt(3) not in ("u8", dt):
            raise n.fail(f"MatMulNBits zero points are u8 (packed) or {dt}, got {n.dt(3)}")
        if bits == 8 and n.dt(3) != "u8":  # (onnxruntime's CPU kernel refuses them too)
            raise n.fail("MatMulNBits with 8-bit codes takes u8 zero points, not floats")
        keys += f" :zero-point {n.x(3)}"
    if n.has(5):
        if n.dt(5) != dt:
            raise n.fail(f"MatMulNBits' bias must be {dt}, got {n.dt(5)}")
        keys += f" :bias {n.x(5)}"
    n.g.types[n.node.output[0]] = (dt, list(shape[:-1]) + [n_attr])  # onnx has no schema of the op
    return f"(matmul-nbits {n.x(0)} {b} {n.x(2)}{keys})"


def _count(shape: list) -> int:
    c = 1
    for d in shape:
        c *= d
    return c
