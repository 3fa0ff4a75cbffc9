"""ONNX lowerings of the normalizations (batch in inference and training mode, instance, layer,
RMS, group, Lp, mean-variance)."""

from __future__ import annotations

from caten.frontends.onnx.node import N, ax_list, dims, handler


def _bn_training(n: N) -> list[str]:
    r = n.rank()
    axes = ax_list([0] + list(range(2, r)))
    x, eps, mom = n.x(0), n.lit(n.a("epsilon", 1e-5)), n.a("momentum", 0.9)
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    var = n.let(f"(mean (* {d} {d}) :axis {axes} :keepdims true)")
    ch = lambda i: f"(reshape {n.x(i)} [1 -1 {' '.join(['1'] * (r - 2))}])"
    y = f"(+ (* (/ {d} (sqrt (+ {var} {eps}))) {ch(1)}) {ch(2)})"
    flat = lambda v: f"(reshape {v} [-1])"
    rm = f"(+ (* {n.x(3)} {n.lit(mom)}) (* {flat(mu)} {n.lit(1 - mom)}))"
    rv = f"(+ (* {n.x(4)} {n.lit(mom)}) (* {flat(var)} {n.lit(1 - mom)}))"
    return [y, rm, rv]


def _chan(n: N, i: int, r: int) -> str:
    return f"(reshape {n.x(i)} [1 -1 {' '.join(['1'] * (r - 2))}])"


@handler("BatchNormalization")
def _batchnorm(n: N) -> list[str]:
    if n.a("training_mode", 0):
        return _bn_training(n)
    r = n.rank()
    eps = n.lit(n.a("epsilon", 1e-5))
    sc, b, m, v = (_chan(n, i, r) for i in (1, 2, 3, 4))
    return [f"(+ (* (/ (- {n.x(0)} {m}) (sqrt (+ {v} {eps}))) {sc}) {b})"]


@handler("InstanceNormalization")
def _instnorm(n: N) -> str:
    r = n.rank()
    axes = ax_list(range(2, r))
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    var = f"(mean (* {d} {d}) :axis {axes} :keepdims true)"
    return f"(+ (* (/ {d} (sqrt (+ {var} {eps}))) {_chan(n, 1, r)}) {_chan(n, 2, r)})"


@handler("LayerNormalization")
def _layernorm(n: N) -> list[str]:
    r = n.rank()
    a = n.a("axis", -1) % r
    axes = ax_list(range(a, r))
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    inv = n.let(f"(rsqrt (+ (mean (* {d} {d}) :axis {axes} :keepdims true) {eps}))")
    y = f"(* (* {d} {inv}) {n.x(1)})"
    if n.has(2):
        y = f"(+ {y} {n.x(2)})"
    return [y, mu, inv]


@handler("RMSNormalization")
def _rmsnorm(n: N) -> str:
    r = n.rank()
    a = n.a("axis", -1) % r
    axes = ax_list(range(a, r))
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    return f"(* (* {x} (rsqrt (+ (mean (* {x} {x}) :axis {axes} :keepdims true) {eps}))) {n.x(1)})"


@handler("GroupNormalization")
def _groupnorm(n: N) -> str:
    s = n.int_shape()
    g = n.a("num_groups")
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    xg = n.let(f"(reshape {x} [{s[0]} {g} -1])")
    mu = n.let(f"(mean {xg} :axis 2 :keepdims true)")
    d = n.let(f"(- {xg} {mu})")
    y = n.let(f"(reshape (/ {d} (sqrt (+ (mean (* {d} {d}) :axis 2 :keepdims true) {eps}))) {dims(s)})")
    r = len(s)
    if n.shape(1)[0] != s[1]:  # opset 18's per-group scale/bias
        sc_t = f"(reshape (expand (reshape {n.x(1)} [{g} 1]) [{g} {s[1] // g}]) [1 {s[1]} {' '.join(['1'] * (r - 2))}])"
        b_t = f"(reshape (expand (reshape {n.x(2)} [{g} 1]) [{g} {s[1] // g}]) [1 {s[1]} {' '.join(['1'] * (r - 2))}])"
        return f"(+ (* {y} {sc_t}) {b_t})"
    return f"(+ (* {y} {_chan(n, 1, r)}) {_chan(n, 2, r)})"


@handler("LpNormalization")
def _lpnorm(n: N) -> str:
    x, a, p = n.x(0), n.a("axis", -1), n.a("p", 2)
    norm = f"(sqrt (sum (* {x} {x}) :axis {a} :keepdims true))" if p == 2 else \
        f"(sum (abs {x}) :axis {a} :keepdims true)"
    nm = n.let(norm)
    return f"(where (= {nm} 0) (* {x} 0) (/ {x} {nm}))"  # a zero norm gives 0, as the reference


@handler("MeanVarianceNormalization")
def _mvn(n: N) -> str:
    x = n.x(0)
    axes = ax_list(n.a("axes", [0, 2, 3]))
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    return f"(/ {d} (+ (sqrt (mean (* {d} {d}) :axis {axes} :keepdims true)) 1e-09))"
