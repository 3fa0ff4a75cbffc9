"""Collectives and data parallel training across processes (LANGUAGE.md section 15, docs/distributed.md).

Groups of 2 and 4 processes run tests/distributed_worker.py over gloo on 127.0.0.1 (a free port,
every launch under a time limit); their results are checked here against numpy (the collectives'
values and gradients, every op and dtype on numpy, f32 on llvm and c) and against one process
training on the whole batch (the same weights, rtol 1e-5). A rank that dies makes the others
raise caten.Error within the group's timeout. Single-process: each collective is the identity.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).parent))
import distributed_worker as W  # noqa: E402

WORKER = Path(__file__).parent / "distributed_worker.py"
LAUNCH_TIMEOUT = 150  # seconds for a whole group; each process also has the group's own timeout


def c_cuts_externs() -> bool:
    """Whether the c runtime runs programs with host kernels (Capabilities.extern_split)."""
    from caten import plugin, target

    return plugin.get("c").capabilities(target.resolve(None)).extern_split


RUNTIMES = ["numpy", "llvm"] + (["c"] if c_cuts_externs() else [])


def launch(tmp: Path, world: int, phases: list[str], group_timeout: float = 60) -> list[dict | None]:
    """Run the worker's `phases` in `world` processes; each rank's results (None: it wrote none)."""
    port = caten.distributed.free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   CATEN_TEST_GROUP_TIMEOUT=str(group_timeout), OMP_NUM_THREADS="1", CATEN_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(tmp)] + phases, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for r, p in enumerate(procs):
        f = tmp / f"rank{r}.npz"
        dead = r == 1 and any(ph.startswith("die=") for ph in phases) and p.returncode == 3  # as told to
        assert (p.returncode == 0 or dead) and f.exists(), f"rank {r} failed:\n{logs[r][-4000:]}"
        results.append(dict(np.load(f)))
    return results


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def group(request, tmp_path_factory):
    """One launch per group size: the collectives, the training runs, and (2) a rank dying last."""
    w = request.param
    t0 = time.monotonic()
    if w == 2:
        rts = ",".join(RUNTIMES)
        compiled = ",".join(r for r in RUNTIMES if r != "numpy")
        phases = [f"coll={rts}", f"train={rts}", f"zero={compiled}", f"tp={rts}", f"att={rts}", "nosync=llvm",
                  f"mixer={compiled}", "die=llvm"]
        res = launch(tmp_path_factory.mktemp("world2"), 2, phases, 45)
    else:
        res = launch(tmp_path_factory.mktemp("world4"), 4, ["coll=llvm", "trainjit=llvm"])  # (test time)
    return w, res, time.monotonic() - t0


# the oracle ------------------------------------------------------------------------------------
def _parts(a: np.ndarray, w: int, axis: int) -> list[np.ndarray]:
    return np.split(a, w, axis=axis)


def expected(name: str, dt: str, w: int, r: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(value, vjp) of collective `name` on rank r of w, from every rank's inputs."""
    xs = [W.rank_input(s, W.shape_of(name), dt) for s in range(w)]
    if name in ("ar-max", "ar-min", "rs1-max") and dt in ("f32", "f16", "f64"):
        xs[w - 1] = xs[w - 1].copy()
        xs[w - 1][1, 2] = np.nan
    wide = np.stack([x.astype(np.float64) if dt[0] in "fb" and dt != "bool" else x for x in xs])
    total, mx, mn = (None if dt == "bool" else wide.sum(0)), wide.max(0), wide.min(0)
    like = W.np_dtype(dt) if dt != "bool" else np.dtype(np.bool_)
    cast = lambda a: np.asarray(a).astype(like)  # noqa: E731 (integer sums wrap to the dtype, as in one process)
    ys = None
    if name == "ar-sum":
        val = cast(total)
    elif name == "ar-mean":
        val = cast(total / w)
    elif name == "ar-max":
        val = cast(mx)
    elif name == "ar-min":
        val = cast(mn)
    elif name == "ag0":
        val = np.concatenate(xs, axis=0)
    elif name == "ag1":
        val = np.concatenate(xs, axis=1)
    elif name == "rs0":
        val = cast(_parts(total, w, 0)[r])
    elif name == "rs1-mean":
        val = cast(_parts(total / w, w, 1)[r])
    elif name == "rs1-max":
        val = cast(_parts(mx, w, 1)[r])
    elif name in ("bc0", "bc1"):
        val = xs[0 if name == "bc0" else w - 1]
    else:  # gar: the identity
        val = xs[r]
    if dt not in ("f32", "f64", "f16"):
        return val, None
    cs = [W.rank_input(s, val.shape, dt, salt=1).astype(np.float64) for s in range(w)]
    ct = sum(cs)
    if name == "ar-sum":
        ys = ct
    elif name in ("ar-mean", "gar"):
        ys = ct / w
    elif name in ("ag0", "ag1"):
        ys = _parts(ct, w, 0 if name == "ag0" else 1)[r]
    elif name == "rs0":
        ys = np.concatenate(cs, axis=0)
    elif name == "rs1-mean":
        ys = np.concatenate(cs, axis=1) / w
    elif name in ("bc0", "bc1"):
        ys = ct if r == (0 if name == "bc0" else w - 1) else np.zeros_like(ct)
    return val, None if ys is None else cast(ys)


NAMES = tuple(W.NUMPY_DTYPES)


def _check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_collectives_values_and_gradients(group, runtime):
    w, coll, _ = group
    if runtime == "c" and "c" not in RUNTIMES:
        pytest.skip("the c runtime does not cut programs at EXTERN nodes (runtimes/c_rt.py: extern_split)")
    if runtime != "llvm" and w != 2:
        pytest.skip("the group of 4 runs llvm")
    checked = 0
    for r, res in enumerate(coll):
        for name in NAMES:
            for dt in W.dtypes_of(name, runtime):
                key = f"{runtime}/{name}/{dt}"
                got = res[key]
                refused = got.dtype.kind == "U"
                if dt == "bool" and name in ("ar-sum", "ar-mean", "rs0", "rs1-mean"):
                    assert refused and "bool" in str(got), key  # sums of bool are an error, as the language's
                    continue
                if name.endswith("mean") and dt[0] in "iu":
                    assert refused and "float" in str(got), key
                    continue
                assert not refused, f"{key}: {got}"
                val, vjp = expected(name, dt, w, r)
                val = W.storable(val)
                _check(got, val, key)
                checked += 1
                if key + "/vjp" in res:
                    g = res[key + "/vjp"]
                    if name in ("ar-max", "ar-min", "rs1-max"):
                        assert g.dtype.kind == "U" and ("max" in str(g) or "min" in str(g)), f"{key}: {g}"
                    else:
                        _check(g, vjp, key + "/vjp")
        assert res[f"{runtime}/empty"].shape == (0, 2 * w)
        np.testing.assert_array_equal(res["tensor/shard"], np.arange(4 * w * 3, dtype=np.float32).reshape(3, 4 * w)
                                      [:, 4 * r:4 * (r + 1)])
    assert checked >= len(NAMES) * w


def reference(runtime: str, jit: bool, momentum: float = 0.0) -> dict[str, np.ndarray]:
    """One process training on the whole batch from rank 0's weights."""
    net = W.mlp(0, runtime)
    x, y = W.batch()
    if momentum:  # plain SGD with momentum, what ZeRO-1 shards
        opt = caten.optim.SGD(net.parameters(), lr=W.LR, momentum=momentum)
        xt, yt = caten.Tensor(x, runtime=runtime), caten.Tensor(y, runtime=runtime)
        for _ in range(W.STEPS):
            opt.zero_grad()
            ((net(xt) - yt) ** 2).mean().backward()
            opt.step()
    else:
        W.train(net, x, y, runtime, jit)
    return net.state_dict()


def _group_of_2(group, runtime: str) -> tuple[int, list]:
    """(size, results) of the group of 2, which runs these cases on every runtime that cuts programs
    at EXTERN nodes; the group of 4 skips them (test time)."""
    w, res, _ = group
    if runtime not in RUNTIMES or w != 2:
        pytest.skip("run in the group of 2, on the runtimes that cut programs at EXTERN nodes")
    return w, res


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_zero1_matches_one_process(group, runtime):
    """ZeRO-1 (momentum state sharded, gradients reduce-scattered, weights all-gathered) trains as
    one process with the whole optimizer state does (which is what plain data parallel gives)."""
    w, res = _group_of_2(group, runtime)
    want = reference(runtime, False, momentum=0.9)
    for r, rr in enumerate(res):
        for k, v in want.items():
            np.testing.assert_allclose(rr[f"{runtime}/zero/{k}"], v, rtol=1e-5, atol=1e-6, err_msg=f"rank {r} {k}")


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_data_parallel_matches_one_process(group, runtime):
    w, train, _ = group
    if runtime == "c" and "c" not in RUNTIMES:
        pytest.skip("the c runtime does not cut programs at EXTERN nodes (runtimes/c_rt.py: extern_split)")
    if w != 2 and runtime != "llvm":
        pytest.skip("the group of 4 trains on llvm")
    for mode in ("eager", "jit") if w == 2 else ("jit",):
        want = reference(runtime, mode == "jit")
        for r, res in enumerate(train):
            for k, v in want.items():
                np.testing.assert_allclose(res[f"{runtime}/{mode}/{k}"], v, rtol=1e-5, atol=1e-6,
                                           err_msg=f"rank {r} {mode} {k}")


def test_one_process_reference_matches_torch():
    """The single-process run the groups are compared with trains as torch does."""
    want = reference("llvm", True)
    rng = np.random.default_rng(0)
    net = torch.nn.Sequential(torch.nn.Linear(*W.DIMS[:2]), torch.nn.Tanh(), torch.nn.Linear(*W.DIMS[1:]))
    net.load_state_dict({k: torch.tensor(rng.standard_normal(v.shape).astype(np.float32) * 0.5)
                         for k, v in net.state_dict().items()})
    opt = torch.optim.SGD(net.parameters(), lr=W.LR)
    x, y = (torch.tensor(a) for a in W.batch())
    for _ in range(W.STEPS):
        opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()
    for k, v in net.state_dict().items():
        np.testing.assert_allclose(want[k], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_tensor_parallel_mlp_matches_torch(group, runtime):
    """Megatron's MLP split over the ranks: every rank's output and input gradient are the whole
    model's, and its weight and bias gradients are its slices of the whole model's (torch's)."""
    w, res = _group_of_2(group, runtime)
    rng = np.random.default_rng(0)
    net = torch.nn.Sequential(torch.nn.Linear(*W.DIMS[:2]), torch.nn.Tanh(), torch.nn.Linear(*W.DIMS[1:]))
    net.load_state_dict({k: torch.tensor(rng.standard_normal(v.shape).astype(np.float32) * 0.5)
                         for k, v in net.state_dict().items()})
    x, y = (torch.tensor(a) for a in W.batch())
    x.requires_grad_(True)
    out = net(x)
    ((out - y) ** 2).mean().backward()
    h = W.DIMS[1] // w
    for r, rr in enumerate(res):
        part = slice(r * h, (r + 1) * h)
        want = {"out": out.detach(), "x.grad": x.grad, "0.weight.grad": net[0].weight.grad[part],
                "0.bias.grad": net[0].bias.grad[part], "2.weight.grad": net[2].weight.grad[:, part],
                "2.bias.grad": net[2].bias.grad}
        for k, v in want.items():
            np.testing.assert_allclose(rr[f"{runtime}/tp/{k}"], v.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"rank {r} {k}")


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_tensor_parallel_attention_matches_torch(group, runtime):
    """Causal self-attention split by heads: every rank's output and input gradient are the whole
    block's; its q and output-projection gradients are its heads' slices (torch's)."""
    w, res = _group_of_2(group, runtime)
    b, s, d, h = W.ATT
    rng = np.random.default_rng(11)
    lins = []
    for _ in range(4):
        lin = torch.nn.Linear(d, d)
        lin.load_state_dict({k: torch.tensor(rng.standard_normal(v.shape).astype(np.float32) * 0.4)
                             for k, v in lin.state_dict().items()})
        lins.append(lin)
    x = torch.tensor(W.attention_input(), requires_grad=True)
    q, k, v = (lin(x).reshape(b, s, h, d // h).permute(0, 2, 1, 3) for lin in lins[:3])
    scores = q @ k.transpose(-2, -1) / np.sqrt(d // h) + torch.triu(torch.full((s, s), float("-inf")), 1)
    y = lins[3]((scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, s, d))
    (y * y).sum().backward()
    for r, rr in enumerate(res):
        part = slice(r * d // w, (r + 1) * d // w)
        want = {"out": y.detach(), "x.grad": x.grad, "q.weight.grad": lins[0].weight.grad[part],
                "out.weight.grad": lins[3].weight.grad[:, part]}
        for key, val in want.items():
            np.testing.assert_allclose(rr[f"{runtime}/att/{key}"], val.numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg=f"rank {r} {key}")


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_mixer_data_parallel_matches_one_process(group, runtime):
    """An MLP-Mixer (LayerNorm, GELU, token and channel mixing) trained 20 jitted steps under
    DistributedDataParallel: the weights of one process on the whole batch."""
    w, res = _group_of_2(group, runtime)
    net = W.mixer(0, runtime)
    W.train(net, *W.mixer_batch(), runtime, True)
    start = W.mixer(0, runtime).state_dict()
    moved = 0.0
    for k, v in net.state_dict().items():
        moved = max(moved, float(np.abs(v - start[k]).max()))
        for r, rr in enumerate(res):
            np.testing.assert_allclose(rr[f"{runtime}/mixer/{k}"], v, rtol=1e-5, atol=1e-6, err_msg=f"rank {r} {k}")
    assert moved > 0.1  # it trained


def test_no_sync_keeps_gradients_local(group):
    """Under DistributedDataParallel.no_sync() each rank keeps its own shard's gradient (torch's);
    outside it, the ranks' mean."""
    w, res, _ = group
    if w != 2:
        pytest.skip("run in the group of 2")
    rng = np.random.default_rng(0)
    net = torch.nn.Sequential(torch.nn.Linear(*W.DIMS[:2]), torch.nn.Tanh(), torch.nn.Linear(*W.DIMS[1:]))
    net.load_state_dict({k: torch.tensor(rng.standard_normal(v.shape).astype(np.float32) * 0.5)
                         for k, v in net.state_dict().items()})
    x, y = (torch.tensor(a) for a in W.batch())
    local = []
    for r in range(w):
        part = slice(r * W.BATCH // w, (r + 1) * W.BATCH // w)
        net.zero_grad()
        ((net(x[part]) - y[part]) ** 2).mean().backward()
        local.append(net[0].weight.grad.numpy().copy())
    for r, rr in enumerate(res):
        np.testing.assert_allclose(rr["llvm/local/0.weight.grad"], local[r], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rr["llvm/synced/0.weight.grad"], sum(local) / w, rtol=1e-5, atol=1e-6)


def test_init_and_op_diagnostics(monkeypatch):
    import caten.distributed as cd
    from caten.distributed.tensor_ops import _op

    assert [_op(o) for o in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, "min")] == \
        ["sum", "mean", "max", "min"]
    with pytest.raises(caten.Error, match="not a collective"):
        _op(dist.ReduceOp.PRODUCT)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(caten.Error, match="MASTER_PORT"):
        cd.init()
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(caten.Error, match="not in a group of 2"):
        cd.init()
    assert not cd.is_initialized()


def test_a_dead_rank_raises_caten_error_in_the_others(group):
    w, res, seconds = group
    if w != 2:
        pytest.skip("rank 1 dies in the group of 2")
    assert "outcome" not in res[1]  # rank 1 exited in step 3 of the last phase
    assert str(res[0]["outcome"]).startswith("caten.Error"), res[0]["outcome"]
    assert float(res[0]["seconds"]) < 45  # the group's timeout
    assert seconds < LAUNCH_TIMEOUT


# one process: the identity --------------------------------------------------------------------------
@pytest.mark.parametrize("runtime", ["numpy", "llvm"])
def test_single_process_collectives_are_the_identity(runtime):
    import caten.distributed as cd

    assert cd.world_size() == 1 and cd.rank() == 0 and not cd.is_initialized()
    mod = caten.loads(W.source(1), runtime=runtime)
    rng = np.random.default_rng(3)
    for name in NAMES:
        x = rng.standard_normal(W.shape_of(name)).astype(np.float32)
        np.testing.assert_array_equal(getattr(mod, name.replace("-", "_"))(x), x)
        if name not in ("ar-max", "ar-min", "rs1-max"):
            np.testing.assert_array_equal(getattr(mod, (name + "-vjp").replace("-", "_"))(x, 2 * x), 2 * x)
    x = caten.Tensor(rng.standard_normal((2, 3)).astype(np.float32), requires_grad=True, runtime=runtime)
    for f in (cd.all_reduce, cd.all_gather, cd.reduce_scatter, cd.broadcast, cd.shard):
        y = f(x)
        (y * y).sum().backward()
        np.testing.assert_array_equal(y.numpy(), x.numpy())
        np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)
        x.grad = None


def test_diagnostics():
    def err(src: str) -> str:
        with pytest.raises(caten.Error) as e:
            caten.loads(src, runtime="numpy")
        return e.value.message

    assert "sum, mean, max or min" in err("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (all-reduce X :op prod))")
    assert "float" in err("(composite f ((X{i32}[N]) -> (Y{i32}[N])) (all-reduce X :op mean))")
    assert "root" in err("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (broadcast X :root 1))")
    assert "rank-0" in err("(composite f ((X{f32}) -> (Y{f32})) (all-gather X))")
    assert "not divisible" in err("(composite f ((X{f32}[3]) -> (Y{f32}[1])) (reduce-scatter X :world 2))")
    g = "(composite l ((X{f32}[N]) -> (Y{f32})) (sum (all-reduce X :op max)))\n" \
        "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (grad l X :wrt X))"
    assert "max" in err(g)
    # a program compiled for another group size refuses to run rather than compute wrong shapes
    mod = caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[(* 2 N)])) (all-gather X :world 2))", runtime="numpy")
    with pytest.raises(caten.Error, match="compiled for a group of 2"):
        mod.f(np.ones(3, np.float32))
    loop = "(composite f ((X{f32}[T, N]) -> (C{f32}[N]))\n" \
        "  (nth (scan (lambda (c x) (next (+ (all-reduce c) x) x)) (zeros [N]) X :axis 0) 0))"
    x = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(caten.loads(loop, runtime="numpy").f(x), x.sum(0))  # the identity, inside
    with pytest.raises(caten.Error, match="inside a loop"):
        caten.loads(loop, runtime="llvm").f(x)
    with pytest.raises(caten.Error, match="sums or averages"):
        caten.distributed.grad_all_reduce(caten.Tensor(np.ones(2, np.float32)), "max")


def test_the_group_caten_started_ends_before_interpreter_teardown():
    """Regression: `caten run` under torchrun aborted now and then at exit ("terminate called without
    an active exception": gloo's threads destroyed while joinable). The group init() started is
    destroyed by an exit hook, before the interpreter tears down its modules."""
    code = ("import atexit, torch.distributed as d\n"
            "atexit.register(lambda: print('at exit, group alive:', d.is_initialized()))\n"
            "import caten.distributed as cd\n"
            "cd.init(rank=0, world_size=1)\n"
            "print('started:', d.is_initialized())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "started: True" in r.stdout and "at exit, group alive: False" in r.stdout, r.stdout
