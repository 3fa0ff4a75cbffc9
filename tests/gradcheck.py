"""Gradient checks for tests: caten's `value-and-grad` of a loss written in caten's language,
against torch.autograd (when installed) or central finite differences in f64."""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence

import numpy as np

import caten


def grad_source(body: str, arrays: Sequence[np.ndarray], wrt: Sequence[int]) -> str:
    """A loss composite `f` of the arrays (params A, B, ... with dims a0, a1, ...) and a composite
    `g` returning the loss then d/d(each wrt param)."""
    names = string.ascii_uppercase[:len(arrays)]
    sig = []
    for nm, a in zip(names, arrays):
        dt = {np.float32: "f32", np.float64: "f64", np.int64: "i64", np.bool_: "bool"}[a.dtype.type]
        dims = ", ".join(f"{nm.lower()}{i}" for i in range(a.ndim))
        sig.append(f"{nm}{{{dt}}}[{dims}]")
    params = ", ".join(sig)
    out_dt = "f64" if any(a.dtype == np.float64 for a in arrays) else "f32"
    call = " ".join(names)
    w = " ".join(names[i] for i in wrt)
    dtn = {np.float32: "f32", np.float64: "f64"}
    dims = {i: ", ".join(f"{names[i].lower()}{k}" for k in range(arrays[i].ndim)) for i in wrt}
    grads = [f"G{names[i]}{{{dtn[arrays[i].dtype.type]}}}[{dims[i]}]" for i in wrt]
    outs = ", ".join([f"L{{{out_dt}}}"] + grads)
    rets = " ".join(f"(nth r {k})" for k in range(len(wrt) + 1))
    return (f"(composite f (({params}) -> (L{{{out_dt}}}))\n  {body})\n"
            f"(composite g (({params}) -> ({outs}))\n"
            f"  (setf r (value-and-grad f {call} :wrt [{w}]))\n  (return {rets}))\n")


def defines(arrays: Sequence[np.ndarray], dyn: Sequence[str] = ()) -> dict[str, int]:
    """Every dim of the generated signature bound to its size, but those named in `dyn`."""
    names = string.ascii_uppercase[:len(arrays)]
    return {f"{nm.lower()}{i}": d for nm, a in zip(names, arrays) for i, d in enumerate(a.shape)
            if f"{nm.lower()}{i}" not in dyn}


def caten_grads(body: str, arrays: Sequence[np.ndarray], wrt: Sequence[int], runtime: str = "numpy",
                dyn: Sequence[str] = ()) -> list[np.ndarray]:
    mod = caten.loads(grad_source(body, arrays, wrt), runtime=runtime, defines=defines(arrays, dyn))
    out = mod.g(*arrays)
    return [np.asarray(o) for o in out]


def torch_grads(fn: Callable, arrays: Sequence[np.ndarray], wrt: Sequence[int]) -> list[np.ndarray]:
    import torch

    ts = [torch.tensor(a, requires_grad=(i in wrt)) for i, a in enumerate(arrays)]
    loss = fn(*ts)
    loss.backward()
    return [loss.detach().numpy()] + [ts[i].grad.numpy() for i in wrt]


def fd_grads(body: str, arrays: Sequence[np.ndarray], wrt: Sequence[int], eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of the f64 loss, element by element (small arrays only)."""
    arrays = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    mod = caten.loads(grad_source(body, arrays, wrt), runtime="numpy", defines=defines(arrays))
    f = mod.f
    out = [np.asarray(f(*arrays))]
    for i in wrt:
        g = np.zeros_like(arrays[i])
        for idx in np.ndindex(arrays[i].shape):
            hi = [a.copy() for a in arrays]
            lo = [a.copy() for a in arrays]
            hi[i][idx] += eps
            lo[i][idx] -= eps
            g[idx] = (float(f(*hi)) - float(f(*lo))) / (2 * eps)
        out.append(g)
    return out


def assert_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
