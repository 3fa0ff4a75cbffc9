"""ONNX lowerings of the optimizer steps of domain `ai.onnx.preview.training` (Adagrad, Adam, Momentum).

Each is its spec's formula (onnx.reference.ops.aionnx_preview_training), composed elementwise for
every optimized tensor of the node. The reference mixes f64 scalars (the attributes, `t`-dependent
factors) into f32 tensors; here every step runs in f64 and each result is rounded once to its
tensor's dtype, so nothing is rounded more often than in the reference. The step count `t` stays a
run-time input: the `t > 0` branches are a `where`."""

from __future__ import annotations

from caten.frontends.onnx.node import N, handler
from caten.frontends.text import lit


def _f(v: float) -> str:
    return lit(float(v), "f64")


def _groups(n: N, per: int) -> list[list[str]]:
    """The optimized tensors' operands as f64: per tensor i, [X_i, G_i, ...] (`per` operands each)."""
    k, rest = divmod(n.nin - 2, per)
    if rest or k == 0:
        raise n.fail(f"expects 2 + {per}*k inputs, got {n.nin}")
    for i in range(2, n.nin):
        if not n.is_float(i):
            raise n.fail(f"input {i} must be a float tensor")
    return [[n.let(f"(cast {n.x(2 + j * k + i)} f64)") for j in range(per)] for i in range(k)]


def _scalars(n: N) -> tuple[str, str]:
    """R and T as f64 scalars."""
    return n.let(f"(cast {n.x(0)} f64)"), n.let(f"(cast {n.x(1)} f64)")


def _back(n: N, exprs: list[str], like: list[int]) -> list[str]:
    """Results rounded to the dtype of the input each updates (input index in `like`)."""
    return [f"(cast {e} {n.dt(i)})" for e, i in zip(exprs, like)]


@handler("Adagrad")
def _adagrad(n: N) -> list[str]:
    decay, eps, norm = _f(n.a("decay_factor", 0.0)), _f(n.a("epsilon", 0.0)), _f(n.a("norm_coefficient", 0.0))
    r, t = _scalars(n)
    lr = n.let(f"(/ {r} (+ {_f(1.0)} (* {t} {decay})))")
    groups = _groups(n, 3)
    k = len(groups)
    xs, hs = [], []
    for x, g, h in groups:
        gr = n.let(f"(+ (* {norm} {x}) {g})")
        hn = n.let(f"(+ {h} (* {gr} {gr}))")
        xs.append(f"(- {x} (/ (* {lr} {gr}) (+ (sqrt {hn}) {eps})))")
        hs.append(hn)
    return _back(n, xs + hs, [2 + i for i in range(k)] + [2 + 2 * k + i for i in range(k)])


@handler("Adam")
def _adam(n: N) -> list[str]:
    alpha, beta = n.a("alpha", 0.9), n.a("beta", 0.999)
    eps, norm = _f(n.a("epsilon", 0.0)), _f(n.a("norm_coefficient", 0.0))
    post = _f(n.a("norm_coefficient_post", 0.0))
    r, t = _scalars(n)
    bias = f"(/ (* {r} (sqrt (- {_f(1.0)} (pow {_f(beta)} {t})))) (- {_f(1.0)} (pow {_f(alpha)} {t})))"
    lr = n.let(f"(where (> {t} {_f(0.0)}) {bias} {r})")
    groups = _groups(n, 4)
    k = len(groups)
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        gr = n.let(f"(+ (* {norm} {x}) {g})")
        vn = n.let(f"(+ (* {_f(alpha)} {v}) (* {_f(1 - alpha)} {gr}))")
        hn = n.let(f"(+ (* {_f(beta)} {h}) (* {_f(1 - beta)} (* {gr} {gr})))")
        xn = f"(- {x} (* {lr} (/ {vn} (+ (sqrt {hn}) {eps}))))"
        xs.append(f"(* (- {_f(1.0)} {post}) {xn})")
        vs.append(vn)
        hs.append(hn)
    return _back(n, xs + vs + hs, [2 + j * k + i for j in (0, 2, 3) for i in range(k)])


@handler("Momentum")
def _momentum(n: N) -> list[str]:
    alpha, beta, norm = _f(n.a("alpha")), _f(n.a("beta")), _f(n.a("norm_coefficient"))
    mode = n.a("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise n.fail(f"mode `{mode}` is neither standard nor nesterov")
    r, t = _scalars(n)
    b = n.let(f"(where (> {t} {_f(0.0)}) (full [] {beta} :dtype f64) {_f(1.0)})")
    groups = _groups(n, 3)
    k = len(groups)
    xs, vs = [], []
    for x, g, v in groups:
        gr = n.let(f"(+ (* {norm} {x}) {g})")
        vn = n.let(f"(+ (* {alpha} {v}) (* {b} {gr}))")
        step = vn if mode == "standard" else f"(+ {gr} (* {alpha} {vn}))"
        xs.append(f"(- {x} (* {r} {step}))")
        vs.append(vn)
    return _back(n, xs + vs, [2 + i for i in range(k)] + [2 + 2 * k + i for i in range(k)])
