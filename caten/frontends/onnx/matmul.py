"""ONNX lowerings of MatMul and Gemm."""

from __future__ import annotations

from caten.frontends.onnx.node import N, handler


@handler("MatMul")
def _matmul(n: N) -> str:
    return f"(matmul {n.x(0)} {n.x(1)})"


@handler("Gemm")
def _gemm(n: N) -> str:
    a, b = n.x(0), n.x(1)
    if n.a("transA", 0):
        a = f"(transpose {a})"
    if n.a("transB", 0):
        b = f"(transpose {b})"
    y = f"(matmul {a} {b})"
    if n.a("alpha", 1.0) != 1.0:
        y = f"(* {n.lit(n.a('alpha', 1.0))} {y})"
    if n.has(2):
        c = n.x(2)
        if n.a("beta", 1.0) != 1.0:
            c = f"(* {n.lit(n.a('beta', 1.0))} {c})"
        y = f"(+ {y} {c})"
    return y
