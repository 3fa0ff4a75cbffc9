"""`caten.jit` and `caten.trace` (LANGUAGE.md section 12).

A jitted training step (forward, backward, Adam update) must give the numbers of the same step
run eagerly, compile once (later calls compile nothing: `stats()["programs"]` and `Jit.traces`
stay put), retrace once for a new batch size, advance the seed stream (dropout masks differ from
call to call, reproducible with `caten.manual_seed`), leave gradients readable, and give the
parameters the program's output arrays as their storage. `caten.trace` text compiles with
`caten.loads` (llvm, c) to the same numbers, and with `caten -r cuda -S` / `-r opencl -S`.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

import caten
from caten import Tensor, nn, optim, plugin
from caten.tensor.realize import stats

T = importlib.import_module("caten.tensor.trace")  # the module (caten.tensor.trace is also the function)


def _model(seed: int = 0, dropout: float = 0.0):
    caten.manual_seed(seed)
    layers = [nn.Linear(6, 10), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(10, 3)]
    return nn.Sequential(*layers)


def _batch(n: int, seed: int):
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, 6)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[r.integers(0, 3, n)]
    return Tensor(x), Tensor(y)


def _stepper(model, opt):
    def step(x, y):
        loss = model(x).cross_entropy(y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def _same_params(a, b, rtol=1e-5, atol=1e-6):
    for (k, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=rtol, atol=atol, err_msg=k)


def test_jitted_adam_step_matches_eager_and_compiles_once():
    me, mj = _model(), _model()
    step_e = _stepper(me, optim.Adam(me.parameters(), lr=0.05))
    step_j = caten.jit(_stepper(mj, optim.Adam(mj.parameters(), lr=0.05)))
    before = None
    for i in range(5):
        x, y = _batch(8, i)
        le, lj = step_e(x, y), step_j(x, y)
        assert lj.shape == () and lj.dtype == "f32"
        np.testing.assert_allclose(lj.item(), le.item(), rtol=1e-5)
        _same_params(me, mj)
        for p, q in zip(me.parameters(), mj.parameters()):  # the step's gradients stay readable
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7)
        if i == 0:
            before = stats()["programs"]
    assert stats()["programs"] == before, "calls after the first compile nothing"
    assert step_j.traces == 1
    first = stats()["programs"]
    step_j(*_batch(5, 9))  # a new batch size traces (and compiles) once more
    step_e(*_batch(5, 9))
    assert step_j.traces == 2
    after = stats()["programs"]
    assert after > first
    step_j(*_batch(5, 10))
    step_e(*_batch(5, 10))
    step_j(*_batch(8, 11))  # the old size replays its program
    step_e(*_batch(8, 11))
    assert step_j.traces == 2 and stats()["programs"] == after
    _same_params(me, mj)


def test_jitted_step_lr_change_and_sgd_momentum():
    me, mj = _model(), _model()
    oe, oj = optim.SGD(me.parameters(), lr=0.1, momentum=0.9), optim.SGD(mj.parameters(), lr=0.1, momentum=0.9)
    step_e, step_j = _stepper(me, oe), caten.jit(_stepper(mj, oj))
    for i in range(4):
        for o in (oe, oj):
            o.param_groups[0]["lr"] = 0.1 / (i + 1)  # a scheduler: read at every call, no retrace
        np.testing.assert_allclose(step_j(*_batch(8, i)).item(), step_e(*_batch(8, i)).item(), rtol=1e-5)
        _same_params(me, mj)
    assert step_j.traces == 1
    for o in (oe, oj):
        o.param_groups[0]["momentum"] = 0.5  # a literal of the program: traced again
    step_j(*_batch(8, 7))
    step_e(*_batch(8, 7))
    _same_params(me, mj)
    assert step_j.traces == 2


def test_zero_grad_outside_the_jitted_function():
    """Without zero_grad inside, gradients accumulate across calls exactly as eagerly."""
    me, mj = _model(), _model()
    oe, oj = optim.SGD(me.parameters(), lr=0.1), optim.SGD(mj.parameters(), lr=0.1)

    def make(model, opt):
        def step(x, y):
            model(x).cross_entropy(y).backward()
            opt.step()
        return step

    step_e, step_j = make(me, oe), caten.jit(make(mj, oj))
    for i in range(4):
        if i % 2 == 0:
            oe.zero_grad()
            oj.zero_grad()
        step_e(*_batch(8, i))
        step_j(*_batch(8, i))
        _same_params(me, mj)
        for p, q in zip(me.parameters(), mj.parameters()):
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert step_j.traces == 2  # one program with no gradient to accumulate into, one with


def test_dropout_in_a_jitted_step_advances_the_seed_stream():
    m = _model(dropout=0.5)
    f = caten.jit(lambda x: m(x))
    x = Tensor(np.ones((16, 6), np.float32))
    caten.manual_seed(11)
    a, b = f(x).numpy().copy(), f(x).numpy().copy()
    assert not np.array_equal(a, b)
    caten.manual_seed(11)
    np.testing.assert_array_equal(f(x).numpy(), a)
    np.testing.assert_array_equal(f(x).numpy(), b)
    assert f.traces == 1
    # eager draws the same seeds, so the same masks
    caten.manual_seed(11)
    np.testing.assert_array_equal(m(x).numpy(), a)
    m.eval()  # a different mode: traced again, and dropout is the identity
    np.testing.assert_array_equal(f(x).numpy(), m(x).numpy())
    assert f.traces == 2
    m.train()
    caten.manual_seed(11)
    np.testing.assert_array_equal(f(x).numpy(), a)
    assert f.traces == 2


@pytest.mark.parametrize("read", ["item", "numpy", "bool", "float", "captured"])
def test_reading_a_value_inside_a_jitted_function_is_an_error(read):
    w = Tensor(np.ones(3, np.float32))

    def f(x):
        y = (x * 2).sum()
        if read == "captured":  # a value read while tracing would be stale in every replay
            y = y * float(w.numpy().sum())
        elif read == "item":
            y.item()
        elif read == "numpy":
            y.numpy()
        elif read == "bool":
            bool(y > 0)
        else:
            float(y)
        return y

    with pytest.raises(caten.Error) as e:
        caten.jit(f)(Tensor(np.ones(3, np.float32)))
    assert "traced" in e.value.message and "return the tensor" in (e.value.hint or "")


def test_parameters_take_the_programs_output_arrays(monkeypatch):
    """A jitted step copies no parameter: each parameter's storage after a call is the array the
    compiled program returned, and large ones are recycled between two calls (ping-pong)."""
    caten.manual_seed(0)
    big = nn.Linear(512, 512)  # 1 MiB weights: the runtime's output pool recycles these
    opt = optim.SGD(big.parameters(), lr=0.01)
    x = Tensor(np.random.default_rng(0).standard_normal((4, 512)).astype(np.float32))
    returned: list = []
    real = T.program

    def spy(text, runtime):
        fn = real(text, runtime)

        def call(*a, out=None):
            outs = fn(*a, out=out)
            returned[:] = [outs]  # only the latest: holding older ones would keep them from reuse
            return outs
        return call

    monkeypatch.setattr(T, "program", spy)

    @caten.jit
    def step(x):
        loss = (big(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    expect = big.weight.numpy().copy()
    ptrs = []
    for _ in range(4):
        w0 = big.weight.numpy().copy()
        step(x)
        outs = returned[-1]
        assert any(o is big.weight.node.value for o in outs), "the weight is an output array, not a copy"
        assert any(o is big.bias.node.value for o in outs)
        np.testing.assert_allclose(big.weight.numpy(), w0 - 0.01 * big.weight.grad.numpy(), rtol=1e-5, atol=1e-7)
        ptrs.append(big.weight.node.value.ctypes.data)
    assert big.weight.numpy().base is big.weight.node.value  # numpy() is a read-only view, no copy
    assert not big.weight.numpy().flags.writeable
    assert ptrs[0] == ptrs[2] and ptrs[1] == ptrs[3] and ptrs[0] != ptrs[1], ptrs
    # an array the caller still holds is never reused under it
    held = big.weight.numpy()
    snapshot = held.copy()
    step(x)
    step(x)
    np.testing.assert_array_equal(held, snapshot)
    assert not np.array_equal(expect, big.weight.numpy())


# caten.trace ------------------------------------------------------------------------------------
def _traced_step(runtime="llvm"):
    m = _model(3)
    opt = optim.Adam(m.parameters(), lr=0.02)
    return m, opt, _stepper(m, opt)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_traced_forward_compiles_with_loads(runtime):
    m = _model(1)
    x, _ = _batch(4, 0)
    text = caten.trace(lambda a: m(a).softmax(), x, name="fwd")
    assert text.startswith("(composite fwd (")
    fn = caten.loads(text, runtime=runtime).fwd
    ws = [p.numpy() for p in m.parameters()]  # captured tensors follow the arguments, in order
    np.testing.assert_allclose(fn(x.numpy(), *ws), m(x).softmax().numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_traced_training_step_compiles_with_loads(runtime):
    """The whole step's text, compiled on its own, gives the eager step's loss and parameters."""
    m, opt, step = _traced_step()
    x, y = _batch(8, 0)
    tp = T.Traced(step, [x, y], {}, "llvm")
    assert caten.trace(step, x, y) == tp.text  # caten.trace is that text
    inputs = tp.inputs([x.numpy(), y.numpy()])
    outs = caten.loads(tp.text, runtime=runtime).f(*inputs)
    loss = step(x, y)  # eager
    np.testing.assert_allclose(outs[0], loss.numpy(), rtol=1e-5)
    params = {id(ref[1]): ref[1] for _, ref in tp.updates}
    got = {id(ref[1]): v for (kind, ref), v in zip(tp.updates, outs[1:]) if kind == "node"}
    for p in m.parameters():
        assert id(p) in params
        np.testing.assert_allclose(got[id(p)], p.numpy(), rtol=1e-5, atol=1e-7)


def _caten_cli(tmp_path, *args):
    p = subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


@pytest.mark.parametrize("runtime,ext", [("cuda", "cu"), ("opencl", "cl")])
def test_traced_step_compiles_from_the_command_line(tmp_path, runtime, ext):
    """`caten -r cuda -S` / `-r opencl -S` on the traced step; the CUDA source through nvcc and
    ptxas, the OpenCL source through the OpenCL driver (PoCL here), when they are installed."""
    _, _, step = _traced_step()
    (tmp_path / "step.lisp").write_text(caten.trace(step, *_batch(8, 0)))
    _caten_cli(tmp_path, "-r", runtime, "-S", "step.lisp", "-o", f"k.{ext}")
    src = (tmp_path / f"k.{ext}").read_text()
    manifest = json.loads((tmp_path / "k.json").read_text())
    assert [p["name"] for p in manifest["programs"]] == ["grad0", "f"]  # the helper and the step
    assert all(p["launches"] for p in manifest["programs"])
    if runtime == "cuda":
        assert "__global__" in src
        nvcc, ptxas = shutil.which("nvcc"), shutil.which("ptxas")
        if nvcc is None:
            pytest.skip("nvcc is not on PATH (CUDA toolkit absent): the source was written, not compiled")
        p = subprocess.run([nvcc, "-ptx", "-arch=compute_80", "k.cu", "-o", "k.ptx"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        if ptxas is not None:
            p = subprocess.run([ptxas, "-arch=sm_80", "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr
    else:
        assert "__kernel" in src
        ok, why = plugin.get("opencl").available()
        if not ok:
            pytest.skip(f"no OpenCL device to build the source with: {why}")
        import pyopencl as cl

        ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
        prog = cl.Program(ctx, src).build()
        names = {ln["kernel"] for p in manifest["programs"] for ln in p["launches"]}
        assert names <= set(prog.get_info(cl.program_info.KERNEL_NAMES).split(";"))


@pytest.mark.parametrize("runtime", ["numpy", "c"])
def test_jitted_step_on_each_runtime(runtime):
    """A jitted SGD-with-momentum step with dropout on numpy and c gives eager llvm's numbers."""
    ml, mo = _model(4, dropout=0.3), _model(4, dropout=0.3).to(runtime)
    sl = _stepper(ml, optim.SGD(ml.parameters(), lr=0.1, momentum=0.9, nesterov=True))
    so = caten.jit(_stepper(mo, optim.SGD(mo.parameters(), lr=0.1, momentum=0.9, nesterov=True)))
    for i in range(3):
        x, y = _batch(8, i)
        caten.manual_seed(100 + i)  # the same dropout masks
        le = sl(x, y)
        caten.manual_seed(100 + i)
        lo = so(Tensor(x.numpy(), runtime=runtime), Tensor(y.numpy(), runtime=runtime))
        np.testing.assert_allclose(lo.item(), le.item(), rtol=1e-5)
    _same_params(ml, mo)
    assert so.traces == 1


def test_jitted_step_on_opencl_matches_llvm():
    ok, why = plugin.get("opencl").available()
    if not ok:
        pytest.skip(f"runtime opencl unavailable: {why}")
    ml, mo = _model(2), _model(2).to("opencl")
    sl = caten.jit(_stepper(ml, optim.AdamW(ml.parameters(), lr=0.05)))
    so = caten.jit(_stepper(mo, optim.AdamW(mo.parameters(), lr=0.05)))
    for i in range(3):
        x, y = _batch(8, i)
        lo = so(Tensor(x.numpy(), runtime="opencl"), Tensor(y.numpy(), runtime="opencl"))
        np.testing.assert_allclose(lo.item(), sl(x, y).item(), rtol=1e-5)
        assert lo.runtime == "opencl"
    _same_params(ml, mo, rtol=1e-4, atol=1e-6)


def test_tensors_in_lists_and_keywords_are_inputs():
    """Tensors inside list arguments and keyword arguments are program inputs, not baked values:
    two tensors that print alike (numpy elides the middle of large arrays) still differ."""
    f = caten.jit(lambda xs, scale=None: (xs[0] + xs[1]) * scale)
    a = np.zeros(100, np.float32)
    b = a.copy()
    b[50] = 1
    s = Tensor(np.full(100, 2, np.float32))
    r1 = f([Tensor(a), Tensor(a)], scale=s).numpy().copy()
    r2 = f([Tensor(a), Tensor(b)], scale=s).numpy().copy()
    r3 = f([Tensor(a), Tensor(b)], scale=Tensor(np.full(100, 3, np.float32))).numpy()
    np.testing.assert_array_equal(r1, np.zeros(100))
    np.testing.assert_array_equal(r2, 2 * b)
    np.testing.assert_array_equal(r3, 3 * b)
    assert f.traces == 1
    f([Tensor(a), a], scale=s)  # a numpy array where a Tensor was: another program
    assert f.traces == 2


def test_gradients_of_tensor_arguments():
    """backward inside a jitted function gives the grads to the tensors of *that* call."""
    f = caten.jit(lambda a: ((a * a).sum() * 0.5).backward())
    xs = [Tensor(np.arange(3, dtype=np.float32) + i, requires_grad=True) for i in range(3)]
    for x in xs:
        f(x)
    for x in xs:
        np.testing.assert_array_equal(x.grad.numpy(), x.numpy())
    f(xs[0])  # accumulates, as eager backward
    np.testing.assert_array_equal(xs[0].grad.numpy(), 2 * xs[0].numpy())
    assert f.traces == 2


def test_function_without_results_and_methods():
    f = caten.jit(lambda a: None)
    assert f(Tensor(np.ones(2, np.float32))) is None
    with pytest.raises(caten.Error, match="computes nothing"):
        caten.trace(lambda a: None, Tensor(np.ones(2, np.float32)))

    class M:
        def __init__(self):
            self.w = Tensor(np.full(2, 3, np.float32))

        @caten.jit
        def __call__(self, x):
            return x * self.w

    np.testing.assert_array_equal(M()(Tensor(np.ones(2, np.float32))).numpy(), [3, 3])


@pytest.mark.parametrize("requires_grad", [True, False])
def test_detach_inside_jit_reads_the_current_value(requires_grad):
    """x * w.detach() in a jitted function reads w as it is at each call (a fresh leaf holding the
    traced value was a constant of the trace: replays after an update computed with the old w)."""
    w = caten.Tensor(np.ones(3, np.float32), runtime="llvm")
    if requires_grad:
        w.requires_grad_(True)
    f = caten.jit(lambda x: x * w.detach())
    x = caten.Tensor(np.arange(3, dtype=np.float32), runtime="llvm")
    np.testing.assert_array_equal(f(x).numpy(), [0, 1, 2])
    with caten.no_grad():
        w.copy_(caten.Tensor(np.full(3, 5, np.float32), runtime="llvm"))
    np.testing.assert_array_equal(f(x).numpy(), [0, 5, 10])


def test_detach_inside_jit_stops_the_gradient():
    w = caten.Tensor(np.full(3, 2, np.float32), runtime="llvm").requires_grad_(True)
    x = caten.Tensor(np.arange(3, dtype=np.float32), runtime="llvm")

    def step(a):
        loss = (a * w.detach() * w).sum()
        loss.backward()  # d/dw = a * w: only the second factor's share
        return loss

    np.testing.assert_array_equal(caten.jit(step)(x).numpy(), 12)
    np.testing.assert_array_equal(w.grad.numpy(), [0, 2, 4])
