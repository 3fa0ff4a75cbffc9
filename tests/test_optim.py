"""The optimizer steps of LANGUAGE.md section 11 (ops/optim.lisp) against torch.optim.

Each optimizer runs 3 steps on fixed gradients, from caten and from the torch.optim class of the
same name, with default and non-default keywords; the parameter and every state tensor must
agree after each step. Adam's step `t` is given three ways: an integer literal (one composite
per step), an i64 scalar tensor (one composite called 3 times), and a dotimes loop (the 3 steps
in one program). Runs on the numpy, llvm and c runtimes.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")

RUNTIMES = ["numpy", "llvm", "c"]
SHAPE = (3, 5)
STEPS = 3
TOL = {"f32": dict(rtol=1e-5, atol=1e-6), "f64": dict(rtol=1e-11, atol=1e-13)}
NP = {"f32": np.float32, "f64": np.float64}


def _data(dt: str) -> tuple[np.ndarray, list[np.ndarray]]:
    r = np.random.default_rng(7)
    w = r.standard_normal(SHAPE).astype(NP[dt])
    return w, [r.standard_normal(SHAPE).astype(NP[dt]) for _ in range(STEPS)]


def _kw(keys: dict) -> str:
    return " ".join(f":{k} {'true' if v is True else 'false' if v is False else v}" for k, v in keys.items())


def _torch_steps(cls, kw: dict, w: np.ndarray, grads: list[np.ndarray], state: tuple[str, ...]) -> list[tuple]:
    """(param, *state tensors) after each torch.optim step."""
    p = torch.nn.Parameter(torch.from_numpy(w.copy()))
    opt = cls([p], **kw)
    out = []
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        st = opt.state[p]
        out.append((p.detach().numpy().copy(), *(st[k].numpy().copy() for k in state)))
    return out


def _check(got: tuple, want: tuple, dt: str, what: str) -> None:
    for j, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == np.dtype(NP[dt]) and a.shape == SHAPE, (what, j, a.dtype, a.shape)
        np.testing.assert_allclose(a, b, **TOL[dt], err_msg=f"{what}: output {j}")


@functools.cache
def _mod(src: str, rt: str):
    return caten.loads(src, runtime=rt)


# ------------------------------------------------------------------------------------------ SGD
SGD_CASES = [({"lr": 0.1}, {"lr": 0.1}),
             ({"lr": 0.05, "weight-decay": 0.2}, {"lr": 0.05, "weight_decay": 0.2})]


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("case", range(len(SGD_CASES)))
def test_sgd_update_matches_torch_sgd(rt, case):
    ours, theirs = SGD_CASES[case]
    src = f"""(composite step ((W{{f32}}[3 5] G{{f32}}[3 5]) -> (W2{{f32}}[3 5]))
                (sgd-update W G {_kw(ours)}))"""
    w, grads = _data("f32")
    want = _torch_steps(torch.optim.SGD, theirs, w, grads, ())
    m = _mod(src, rt)
    for k, g in enumerate(grads):
        w = m.step(w, g)
        _check((w,), want[k], "f32", f"sgd step {k + 1}")


def test_sgd_update_default_lr_is_torchs():
    w, grads = _data("f32")
    m = _mod("(composite step ((W{f32}[3 5] G{f32}[3 5]) -> (W2{f32}[3 5])) (sgd-update W G))", "numpy")
    _check((m.step(w, grads[0]),), _torch_steps(torch.optim.SGD, {}, w, grads[:1], ())[0], "f32", "sgd default")


# ------------------------------------------------------------------------------------- momentum
MOMENTUM_CASES = [
    ({"lr": 0.1, "momentum": 0.9}, {"lr": 0.1, "momentum": 0.9}),
    ({"lr": 0.05, "momentum": 0.8, "weight-decay": 0.1}, {"lr": 0.05, "momentum": 0.8, "weight_decay": 0.1}),
    ({"lr": 0.1, "momentum": 0.9, "nesterov": True}, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ({"lr": 0.02, "momentum": 0.7, "weight-decay": 0.3, "nesterov": True},
     {"lr": 0.02, "momentum": 0.7, "weight_decay": 0.3, "nesterov": True}),
]


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("case", range(len(MOMENTUM_CASES)))
def test_momentum_update_matches_torch_sgd_with_momentum(rt, case):
    """v starts at 0: torch's first buffer is the gradient itself, which m*0 + g gives."""
    ours, theirs = MOMENTUM_CASES[case]
    src = f"""(composite step ((W{{f32}}[3 5] G{{f32}}[3 5] V{{f32}}[3 5]) -> (W2{{f32}}[3 5] V2{{f32}}[3 5]))
                (let ((r (momentum-update W G V {_kw(ours)}))) (return (nth r 0) (nth r 1))))"""
    w, grads = _data("f32")
    want = _torch_steps(torch.optim.SGD, theirs, w, grads, ("momentum_buffer",))
    m = _mod(src, rt)
    v = np.zeros_like(w)
    for k, g in enumerate(grads):
        w, v = m.step(w, g, v)
        _check((w, v), want[k], "f32", f"momentum step {k + 1}")


# ----------------------------------------------------------------------------------- Adam/AdamW
ADAM_CASES = [
    ("adam-update", "Adam", {}, {}),
    ("adam-update", "Adam", {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight-decay": 0.1},
     {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("adamw-update", "AdamW", {}, {}),
    ("adamw-update", "AdamW", {"lr": 0.02, "beta1": 0.85, "beta2": 0.95, "eps": 1e-5, "weight-decay": 0.3},
     {"lr": 0.02, "betas": (0.85, 0.95), "eps": 1e-5, "weight_decay": 0.3}),
]
ADAM_IDS = ["adam-default", "adam-keys", "adamw-default", "adamw-keys"]
_SIG = ("(W{{{d}}}[3 5] G{{{d}}}[3 5] M{{{d}}}[3 5] V{{{d}}}[3 5]{extra}) "
        "-> (W2{{{d}}}[3 5] M2{{{d}}}[3 5] V2{{{d}}}[3 5])")


def _adam_src(name: str, keys: dict, dt: str, t: str, extra: str = "") -> str:
    return (f"(composite step ({_SIG.format(d=dt, extra=extra)})\n"
            f"  (let ((r ({name} W G M V {t} {_kw(keys)}))) (return (nth r 0) (nth r 1) (nth r 2))))")


def _adam_want(case: int, dt: str) -> tuple[np.ndarray, list[np.ndarray], list[tuple]]:
    _, cls, _, theirs = ADAM_CASES[case]
    w, grads = _data(dt)
    return w, grads, _torch_steps(getattr(torch.optim, cls), theirs, w, grads, ("exp_avg", "exp_avg_sq"))


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("case", range(len(ADAM_CASES)), ids=ADAM_IDS)
def test_adam_step_as_a_literal(rt, case):
    name, _, ours, _ = ADAM_CASES[case]
    w, grads, want = _adam_want(case, "f32")
    m, v = np.zeros_like(w), np.zeros_like(w)
    for k, g in enumerate(grads):
        w, m, v = _mod(_adam_src(name, ours, "f32", str(k + 1)), rt).step(w, g, m, v)
        _check((w, m, v), want[k], "f32", f"{name} literal t={k + 1}")


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("case", range(len(ADAM_CASES)), ids=ADAM_IDS)
def test_adam_step_as_an_i64_tensor(rt, dt, case):
    """One compiled program serves every step: t is read at run time (bias correction in f64)."""
    name, _, ours, _ = ADAM_CASES[case]
    w, grads, want = _adam_want(case, dt)
    mod = _mod(_adam_src(name, ours, dt, "t", " t{i64}"), rt)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for k, g in enumerate(grads):
        w, m, v = mod.step(w, g, m, v, np.array(k + 1, np.int64))
        _check((w, m, v), want[k], dt, f"{name} tensor t={k + 1}")


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("case", range(len(ADAM_CASES)), ids=ADAM_IDS)
def test_adam_steps_in_a_dotimes_loop(rt, case):
    """Three steps in one program, t = (+ i 1) from the loop index, the gradient picked by i."""
    name, _, ours, _ = ADAM_CASES[case]
    w, grads, want = _adam_want(case, "f32")
    src = f"""(composite train ((W{{f32}}[3 5] G1{{f32}}[3 5] G2{{f32}}[3 5] G3{{f32}}[3 5])
                                -> (W2{{f32}}[3 5] M2{{f32}}[3 5] V2{{f32}}[3 5]))
      (setf w W) (setf m (zeros [3 5])) (setf v (zeros [3 5]))
      (dotimes (i 3)
        (setf r ({name} w (nth (list G1 G2 G3) i) m v (+ i 1) {_kw(ours)}))
        (setf w (nth r 0)) (setf m (nth r 1)) (setf v (nth r 2)))
      (return w m v))"""
    got = _mod(src, rt).train(w, *grads)
    _check(got, want[-1], "f32", f"{name} dotimes")


def test_adam_bias_correction_uses_the_step():
    """A wrong t (2 instead of 1) changes the first step: the test above can tell the steps apart."""
    w, grads, want = _adam_want(0, "f32")
    z = np.zeros_like(w)
    got = _mod(_adam_src("adam-update", {}, "f32", "t", " t{i64}"), "numpy").step(w, grads[0], z, z,
                                                                                  np.array(2, np.int64))
    assert np.abs(got[0] - want[0][0]).max() > 1e-4


def test_adam_t_must_be_an_integer_scalar():
    src = _adam_src("adam-update", {}, "f32", "t", " t{f32}[2]")
    with pytest.raises(caten.Error):
        caten.loads(src, runtime="numpy").step(*[np.zeros(SHAPE, np.float32)] * 4, np.zeros(2, np.float32))


def test_conformance_suite_runs_the_multi_output_updates():
    """`caten test-runtime` covers the library's composites; the updates give several outputs,
    which its generated programs spread with `nth` (a row with no case would be blank)."""
    from caten import plugin as R
    from caten.conformance import cases as C
    from caten.conformance.runner import run_suite

    adam = C.build(C.rows("adam-update")[0])
    assert adam.variants and all(len(v.outs) == 3 for v in adam.variants)
    assert any(v.expr.endswith(" N)") for v in adam.variants)  # t a dynamic dim: known only at run time
    res = run_suite(R.get("llvm"), "momentum-update", isolate=False)
    cells = {c.dtype: c.status for c in res.cells}
    assert cells.get("f32") == "pass" and cells.get("f64") == "pass", cells
    assert set(cells.values()) == {"pass"}, cells
