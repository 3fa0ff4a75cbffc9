"""One process of the groups tests/test_distributed.py launches (RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment, as torchrun sets them):

    python distributed_worker.py OUT_DIR coll=numpy,llvm train=llvm zero=llvm die=llvm  (PHASES)

`coll`: every collective's values (and gradients, through the language's `vjp`) on inputs that
`rank_input` derives from the rank, for the test to check against numpy; `train` (`trainjit`): an
MLP trained 20 SGD steps under DistributedDataParallel on this rank's shard of the batch, eagerly
and (only) as a caten.jit step; `zero`: SGD with momentum under ZeroRedundancyOptimizer; `tp`,
`att`: Megatron's MLP and attention split over the ranks (outputs, gradients); `nosync`: gradients
inside and outside DistributedDataParallel.no_sync(); `mixer`: a small MLP-Mixer under DDP; `die`
(last): the MLP's training where rank 1 exits in step 3. Each rank writes its results to
OUT_DIR/rank{R}.npz (a key per case; a refused case as an `error: ...` string).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

import caten
import caten.distributed as cd

WIDE = ("f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
BATCH, DIMS, STEPS, LR = 8, (5, 8, 3), 20, 0.1


def np_dtype(dt: str) -> np.dtype:
    from caten.tensor.lazy import np_dtype as f

    return f(dt)


def rank_input(r: int, shape: tuple[int, ...], dt: str, salt: int = 0) -> np.ndarray:
    """Rank r's input: small integers (exact sums in every dtype and order), a nan for max/min."""
    rng = np.random.default_rng(1000 * salt + r)
    lo = 0 if dt.startswith("u") or dt == "bool" else -4
    v = rng.integers(lo, 5, size=shape)
    if dt == "bool":
        return v > 1
    return v.astype(np_dtype(dt))


def source(w: int) -> str:
    """The collectives as language programs, with their vjps (output shapes for a group of w)."""
    ops = {"ar-sum": ("(all-reduce X :op sum)", "M, N"), "ar-mean": ("(all-reduce X :op mean)", "M, N"),
           "ar-max": ("(all-reduce X :op max)", "M, N"), "ar-min": ("(all-reduce X :op min)", "M, N"),
           "ag0": ("(all-gather X :axis 0)", f"(* {w} M), N"), "ag1": ("(all-gather X :axis -1)", f"M, (* {w} N)"),
           "rs0": ("(reduce-scatter X :axis 0)", f"(/ M {w}), N"),
           "rs1-mean": ("(reduce-scatter X :axis 1 :op mean)", f"M, (/ N {w})"),
           "rs1-max": ("(reduce-scatter X :axis 1 :op max)", f"M, (/ N {w})"),
           "bc0": ("(broadcast X)", "M, N"), "bc1": (f"(broadcast X :root {w - 1})", "M, N"),
           "gar": ("(grad-all-reduce X :op mean)", "M, N")}
    out = []
    for name, (body, shape) in ops.items():
        out.append(f"(composite {name} ((X{{T}}[M, N]) -> (Y{{T}}[{shape}])) {body})")
        out.append(f"(composite {name}-vjp ((X{{T}}[M, N]) (C{{T}}[{shape}]) -> (G{{T}}[M, N]))"
                   f" (vjp {name} X :wrt X :cotangent C))")
    return "\n".join(out)


SHAPES = {"ar": (3, 5), "ag": (3, 5), "rs0": (4, 3), "rs1": (3, 4), "bc": (3, 5), "gar": (3, 5)}


def shape_of(name: str) -> tuple[int, ...]:
    return SHAPES.get(name.split("-")[0], SHAPES.get(name[:2], (3, 5)))


def storable(y: np.ndarray) -> np.ndarray:
    """y as np.savez keeps it: a bf16 array (which it would store as raw void) as its exact f32 values."""
    return y.astype(np.float32) if y.dtype.name == "bfloat16" else y


# the dtypes each op is checked in on numpy: every one where gloo's wire dtype differs (reductions),
# a few for the byte-moving ops; llvm and c check f32
_ALL = WIDE + ("bool",)
NUMPY_DTYPES = {"ar-sum": _ALL, "ar-max": _ALL, "ar-min": _ALL, "rs0": _ALL, "rs1-max": _ALL,
                "ar-mean": ("f16", "bf16", "f32", "f64", "i32"), "rs1-mean": ("f16", "f32", "u8"),
                "ag0": ("f32", "bf16", "i16"), "ag1": ("f64", "bool", "u64"), "bc0": ("f32", "u16"),
                "bc1": ("f16", "i8", "bool"), "gar": ("f32", "f64")}


def dtypes_of(name: str, rt: str) -> tuple[str, ...]:
    return NUMPY_DTYPES[name] if rt == "numpy" else ("f32",)


def collectives(res: dict, runtimes: list[str]) -> None:
    r, w = cd.rank(), cd.world_size()
    src = source(w)
    for rt in runtimes:
        mod = caten.loads(src, runtime=rt)
        for name in NUMPY_DTYPES:
            for dt in dtypes_of(name, rt):
                x = rank_input(r, shape_of(name), dt)
                if name in ("ar-max", "ar-min", "rs1-max") and dt in ("f32", "f16", "f64") and r == w - 1:
                    x = x.copy()
                    x[1, 2] = np.nan
                key = f"{rt}/{name}/{dt}"
                try:
                    y = getattr(mod, name.replace("-", "_"))(x)
                    res[key] = storable(y)
                except caten.Error as e:
                    res[key] = np.array("error: " + e.message)
                    continue
                if dt in ("f32", "f64"):
                    c = rank_input(r, y.shape, dt, salt=1)
                    try:
                        res[key + "/vjp"] = storable(getattr(mod, (name + "-vjp").replace("-", "_"))(x, c))
                    except caten.Error as e:
                        res[key + "/vjp"] = np.array("error: " + e.message)
        # an empty axis: nothing to send, the shapes still right
        res[f"{rt}/empty"] = mod.ag1(np.zeros((0, 2), np.float32))
    res["tensor/shard"] = cd.shard(caten.Tensor(np.arange(4 * w * 3, dtype=np.float32).reshape(3, 4 * w)), 1).numpy()


def mlp(seed: int, rt: str) -> caten.nn.Module:
    """Linear -> tanh -> Linear, weights from `seed`."""
    rng = np.random.default_rng(seed)
    net = caten.nn.Sequential(caten.nn.Linear(DIMS[0], DIMS[1]), caten.nn.Tanh(), caten.nn.Linear(DIMS[1], DIMS[2]))
    net.load_state_dict({k: rng.standard_normal(v.shape).astype(np.float32) * 0.5 for k, v in net.state_dict().items()})
    return net.to(rt)


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return (rng.standard_normal((BATCH, DIMS[0])).astype(np.float32),
            rng.standard_normal((BATCH, DIMS[2])).astype(np.float32))


def train(net: caten.nn.Module, x: np.ndarray, y: np.ndarray, rt: str, jit: bool, die_at: int | None = None,
          zero: bool = False) -> None:
    """STEPS of SGD on the mean squared error of net(x) against y (`zero`: SGD with momentum, its
    state sharded by ZeroRedundancyOptimizer)."""
    if zero:
        opt = cd.ZeroRedundancyOptimizer(net.parameters(), caten.optim.SGD, lr=LR, momentum=0.9)
    else:
        opt = caten.optim.SGD(net.parameters(), lr=LR)
    xt, yt = caten.Tensor(x, runtime=rt), caten.Tensor(y, runtime=rt)

    def step(a: caten.Tensor, b: caten.Tensor) -> caten.Tensor:
        opt.zero_grad()
        loss = ((net(a) - b) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = caten.jit(step) if jit else step
    for i in range(STEPS):
        if die_at is not None and i == die_at and cd.rank() == 1:
            os._exit(3)  # a rank dies mid-training: the others must raise, not hang
        run(xt, yt).numpy()


def training(res: dict, runtimes: list[str], modes: tuple[bool, ...] = (False, True)) -> None:
    r, w = cd.rank(), cd.world_size()
    x, y = batch()
    part = slice(r * BATCH // w, (r + 1) * BATCH // w)
    for rt in runtimes:
        for jit in modes:
            # rank r starts from its own weights: DDP copies rank 0's; buckets of 200 bytes: several
            # all-reduces, each overlapping the next bucket's backward
            net = cd.DistributedDataParallel(mlp(r, rt), bucket_cap_mb=200 / 2 ** 20)
            train(net, x[part], y[part], rt, jit)
            for k, v in net.module.state_dict().items():
                res[f"{rt}/{'jit' if jit else 'eager'}/{k}"] = v


class Mixer(caten.nn.Module):
    """A small MLP-Mixer: token mixing and channel mixing blocks (LayerNorm, GELU MLPs, residuals),
    mean over tokens, a linear head. x is [B, T, C]."""

    def __init__(self, t: int = 6, c: int = 4, hidden: int = 8, blocks: int = 2, classes: int = 3):
        nn = caten.nn
        self.norms = nn.ModuleList([nn.LayerNorm(c) for _ in range(2 * blocks)])
        self.tok = nn.ModuleList([nn.Sequential(nn.Linear(t, hidden), nn.GELU(), nn.Linear(hidden, t))
                                  for _ in range(blocks)])
        self.chan = nn.ModuleList([nn.Sequential(nn.Linear(c, hidden), nn.GELU(), nn.Linear(hidden, c))
                                   for _ in range(blocks)])
        self.head = nn.Linear(c, classes)

    def forward(self, x: caten.Tensor) -> caten.Tensor:
        for i, (tok, chan) in enumerate(zip(self.tok, self.chan)):
            x = x + tok(self.norms[2 * i](x).transpose(1, 2)).transpose(1, 2)
            x = x + chan(self.norms[2 * i + 1](x))
        return self.head(x.mean(1))


def mixer(seed: int, rt: str) -> Mixer:
    rng = np.random.default_rng(seed)
    net = Mixer()
    net.load_state_dict({k: (rng.standard_normal(v.shape) * 0.5 + (1.0 if k.endswith("weight") and v.ndim == 1
                                                                    else 0.0)).astype(np.float32)
                         for k, v in net.state_dict().items()})
    return net.to(rt)


def mixer_batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(8)
    return rng.standard_normal((BATCH, 6, 4)).astype(np.float32), rng.standard_normal((BATCH, 3)).astype(np.float32)


def train_mixer(res: dict, runtimes: list[str]) -> None:
    """The Mixer trained 20 jitted SGD steps under DistributedDataParallel on this rank's shard."""
    r, w = cd.rank(), cd.world_size()
    x, y = mixer_batch()
    part = slice(r * BATCH // w, (r + 1) * BATCH // w)
    for rt in runtimes:
        net = cd.DistributedDataParallel(mixer(r, rt))
        train(net, x[part], y[part], rt, True)
        for k, v in net.module.state_dict().items():
            res[f"{rt}/mixer/{k}"] = v


def local_grads(res: dict, runtimes: list[str]) -> None:
    """One forward and backward inside DistributedDataParallel.no_sync(): the gradients stay this
    rank's own (its shard's), then one outside it: averaged."""
    r, w = cd.rank(), cd.world_size()
    x, y = batch()
    part = slice(r * BATCH // w, (r + 1) * BATCH // w)
    for rt in runtimes:
        net = cd.DistributedDataParallel(mlp(0, rt))
        xt, yt = caten.Tensor(x[part], runtime=rt), caten.Tensor(y[part], runtime=rt)
        for synced in (False, True):
            with contextlib.nullcontext() if synced else net.no_sync():
                ((net(xt) - yt) ** 2).mean().backward()
            res[f"{rt}/{'synced' if synced else 'local'}/0.weight.grad"] = net.module[0].weight.grad.numpy()
            net.module.zero_grad()


def zero1(res: dict, runtimes: list[str]) -> None:
    """ZeRO-1 over a plain module (the optimizer reduce-scatters the local gradients), jitted."""
    r, w = cd.rank(), cd.world_size()
    x, y = batch()
    part = slice(r * BATCH // w, (r + 1) * BATCH // w)
    for rt in runtimes:
        net = mlp(0, rt)
        train(net, x[part], y[part], rt, True, zero=True)
        for k, v in net.state_dict().items():
            res[f"{rt}/zero/{k}"] = v


def tensor_parallel(res: dict, runtimes: list[str]) -> None:
    """Megatron's MLP (column-parallel, tanh, row-parallel) split from mlp(0): outputs and gradients."""
    x, y = batch()
    for rt in runtimes:
        full = mlp(0, rt)
        first = cd.ColumnParallelLinear.from_linear(full[0])
        second = cd.RowParallelLinear.from_linear(full[2])
        xt = caten.Tensor(x, requires_grad=True, runtime=rt)
        out = second(caten.Tensor.tanh(first(xt)))
        ((out - caten.Tensor(y, runtime=rt)) ** 2).mean().backward()
        res[f"{rt}/tp/out"] = out.numpy()
        res[f"{rt}/tp/x.grad"] = xt.grad.numpy()
        for name, layer in (("0", first), ("2", second)):
            res[f"{rt}/tp/{name}.weight.grad"] = layer.weight.grad.numpy()
            res[f"{rt}/tp/{name}.bias.grad"] = layer.bias.grad.numpy()


ATT = (2, 5, 8, 4)  # batch, sequence, model width, heads


def attention_layers(rt: str) -> list[caten.nn.Module]:
    """The whole model's q, k, v and output projections (from a fixed seed)."""
    rng = np.random.default_rng(11)
    out = []
    for _ in range(4):
        lin = caten.nn.Linear(ATT[2], ATT[2])
        lin.load_state_dict({k: rng.standard_normal(v.shape).astype(np.float32) * 0.4
                             for k, v in lin.state_dict().items()})
        out.append(lin.to(rt))
    return out


def attention_input() -> np.ndarray:
    return np.random.default_rng(12).standard_normal(ATT[:3]).astype(np.float32)


def tensor_parallel_attention(res: dict, runtimes: list[str]) -> None:
    """A causal self-attention block split by heads: output, input gradient, q and out gradients."""
    for rt in runtimes:
        q, k, v, o = attention_layers(rt)
        att = cd.ParallelSelfAttention.from_linears(q, k, v, o, ATT[3], causal=True)
        xt = caten.Tensor(attention_input(), requires_grad=True, runtime=rt)
        y = att(xt)
        (y * y).sum().backward()
        res[f"{rt}/att/out"] = y.numpy()
        res[f"{rt}/att/x.grad"] = xt.grad.numpy()
        res[f"{rt}/att/q.weight.grad"] = att.q.weight.grad.numpy()
        res[f"{rt}/att/out.weight.grad"] = att.out.weight.grad.numpy()


def dying(res: dict, runtimes: list[str]) -> None:
    r, w = cd.rank(), cd.world_size()
    x, y = batch()
    part = slice(r * BATCH // w, (r + 1) * BATCH // w)
    t0 = time.monotonic()
    try:
        train(cd.DistributedDataParallel(mlp(0, runtimes[0])), x[part], y[part], runtimes[0], jit=True, die_at=3)
        res["outcome"] = np.array("finished")
    except caten.Error as e:
        res["outcome"] = np.array("caten.Error: " + e.message)
    res["seconds"] = np.array(time.monotonic() - t0)


PHASES = {"coll": collectives, "train": training, "trainjit": lambda res, rts: training(res, rts, (True,)),
          "zero": zero1, "tp": tensor_parallel, "att": tensor_parallel_attention, "nosync": local_grads,
          "mixer": train_mixer, "die": dying}


def main() -> None:
    """argv: OUT_DIR, then the phases to run in order, each `phase=RUNTIME,...` (coll, train, die)."""
    out, phases = sys.argv[1], [a.split("=") for a in sys.argv[2:]]
    cd.init(timeout=float(os.environ.get("CATEN_TEST_GROUP_TIMEOUT", "60")))
    res: dict[str, np.ndarray] = {}
    path = os.path.join(out, f"rank{cd.rank()}.npz")
    for phase, rts in phases:
        if phase == "die":
            np.savez(path, **res)  # what this rank computed before a rank dies
        PHASES[phase](res, rts.split(","))
    np.savez(path, **res)
    if any(p == "die" for p, _ in phases):
        os._exit(0)  # the group's peer is gone: skip torch's teardown
    cd.shutdown()


if __name__ == "__main__":
    main()
