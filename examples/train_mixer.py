"""Train the MLP-Mixer of examples/ on scikit-learn's digits (8x8 images, 10 classes) with Adam.

    python examples/train_mixer.py [--epochs 40] [--runtime llvm] [--torch]

Each training step -- forward, backward and the Adam update -- is one caten program
(`train-step` in train_mixer.lisp), compiled once (the batch dim is symbolic, so the short last
batch runs the same code). The parameters are one flat vector Theta; Theta and Adam's moments M
and V alternate between two sets of arrays through caten's `out=`, so a step allocates nothing and
copies no parameter: the arrays are passed to the compiled code by pointer. `--torch` trains the
same model (same initial weights, same batches) in torch eager and prints both times per epoch.
Needs the `train` extra: pip install caten[train] (scikit-learn).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import caten

HERE = Path(__file__).resolve().parent
T, P, K = 64, 9, 10  # tokens (one per pixel), values per token (its 3x3 neighbourhood), classes
C, DT, DC = 32, 64, 64  # the defaults of mixer-classifier in train_mixer.lisp
# (shape, kind) of each piece of Theta, in the order mixer-classifier slices them
LAYOUT = [((P, C), "w"), ((C,), "b"), ((C,), "g"), ((C,), "z"), ((T, DT), "w"), ((DT,), "b"), ((DT, T), "w"),
          ((T,), "b"), ((C,), "g"), ((C,), "z"), ((C, DC), "w"), ((DC,), "b"), ((DC, C), "w"), ((C,), "b"),
          ((C,), "g"), ((C,), "z"), ((C, K), "w"), ((K,), "b")]


def digits(seed: int = 0) -> tuple[np.ndarray, ...]:
    """Standardized 3x3 neighbourhoods [N, 64, 9], one-hot labels, split 80/20 stratified, fixed seed."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("train_mixer.py needs scikit-learn: pip install 'caten[train]'")
    d = load_digits()
    img = np.pad((d.images / 16.0).astype(np.float32), ((0, 0), (1, 1), (1, 1)))
    # token (i, j) holds the 3x3 neighbourhood of pixel (i, j): overlapping patches, zero-padded
    x = np.stack([img[:, i:i + 3, j:j + 3].reshape(len(img), P) for i in range(8) for j in range(8)], axis=1)
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=0.2, random_state=seed, stratify=d.target)
    mu, sd = xtr.mean(), xtr.std()  # standardized with the training set's statistics
    return (xtr - mu) / sd, np.eye(K, dtype=np.float32)[ytr], (xte - mu) / sd, yte


def init(seed: int = 0) -> np.ndarray:
    """torch's defaults: Linear weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)); LayerNorm 1, 0."""
    rng = np.random.default_rng(seed)
    parts, fan_in = [], 1
    for shape, kind in LAYOUT:
        if kind == "w":
            fan_in = shape[0]
        bound = 1 / np.sqrt(fan_in)
        parts.append({"w": lambda s, b=bound: rng.uniform(-b, b, s), "b": lambda s, b=bound: rng.uniform(-b, b, s),
                      "g": np.ones, "z": np.zeros}[kind](shape).astype(np.float32).ravel())
    return np.concatenate(parts)


def batches(n: int, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    return [order[i:i + size] for i in range(0, n, size)]


def train_caten(data, theta, epochs: int, batch: int, runtime: str,
                quiet: bool = False) -> tuple[float, list, np.ndarray]:
    """(seconds per epoch, [(mean train loss, test accuracy)] per epoch, the trained Theta)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    xtr, ytr, xte, yte = data
    mod = caten.load(HERE / "train_mixer.lisp", runtime=runtime, defines={"T": T, "P": P, "K": K, "NP": theta.size})
    state = [theta.copy(), np.zeros_like(theta), np.zeros_like(theta)]
    spare = [np.empty_like(theta) for _ in range(3)]
    loss = np.empty((), np.float32)
    rng = np.random.default_rng(1)
    step, history, seconds = 0, [], 0.0
    columns = (TextColumn("[bold]epoch {task.completed:>3}/{task.total}"), BarColumn(),
               TextColumn("loss {task.fields[loss]:.4f}  test accuracy {task.fields[acc]:.2%}"), TimeElapsedColumn())
    with Progress(*columns, disable=quiet) as bar:
        task = bar.add_task("train", total=epochs, loss=float("nan"), acc=0.0)
        for _ in range(epochs):
            t0 = time.perf_counter()
            total = 0.0
            for idx in batches(len(xtr), batch, rng):
                step += 1
                mod.train_step(xtr[idx], ytr[idx], *state, np.array(step, np.int64), out=[loss, *spare])
                state, spare = spare, state  # the new values become the next step's inputs
                total += float(loss) * len(idx)
            seconds += time.perf_counter() - t0
            acc = float((mod.predict(xte, state[0]) == yte).mean())
            history.append((total / len(xtr), acc))
            bar.update(task, advance=1, loss=total / len(xtr), acc=acc)
    return seconds / epochs, history, state[0]


def train_torch(data, theta, epochs: int, batch: int) -> tuple[float, float, np.ndarray]:
    """The same model, initial weights and batches in torch eager: (seconds per epoch, test accuracy,
    the trained parameters as one flat vector)."""
    import torch

    xtr, ytr, xte, yte = data
    ps, o = [], 0
    for shape, _ in LAYOUT:
        n = int(np.prod(shape))
        ps.append(torch.tensor(theta[o:o + n].reshape(shape), requires_grad=True))
        o += n
    gelu, ln = torch.nn.functional.gelu, torch.nn.functional.layer_norm

    def model(x):
        h = x @ ps[0] + ps[1]
        n1 = ln(h, (C,), ps[2], ps[3])
        h = h + (gelu(n1.transpose(1, 2) @ ps[4] + ps[5]) @ ps[6] + ps[7]).transpose(1, 2)
        n2 = ln(h, (C,), ps[8], ps[9])
        h = h + gelu(n2 @ ps[10] + ps[11]) @ ps[12] + ps[13]
        return ln(h, (C,), ps[14], ps[15]).mean(1) @ ps[16] + ps[17]

    opt = torch.optim.Adam(ps, lr=3e-3)
    rng = np.random.default_rng(1)
    xt, yt = torch.tensor(xtr), torch.tensor(ytr.argmax(1))
    t0 = time.perf_counter()
    for _ in range(epochs):
        for idx in batches(len(xtr), batch, rng):
            i = torch.tensor(idx)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[i]), yt[i]).backward()
            opt.step()
    seconds = (time.perf_counter() - t0) / epochs
    with torch.no_grad():
        acc = float((model(torch.tensor(xte)).argmax(1).numpy() == yte).mean())
    return seconds, acc, np.concatenate([p.detach().numpy().ravel() for p in ps])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--runtime", default="llvm")
    ap.add_argument("--torch", action="store_true", help="also train in torch eager and compare times")
    args = ap.parse_args()
    if args.torch:  # before the epochs: not a traceback after them
        try:
            import torch  # noqa: F401
        except ImportError:
            sys.exit("train_mixer.py --torch needs torch, which is not installed here: pip install 'caten[torch]'")
    data = digits()
    theta = init()
    per_epoch, history, _ = train_caten(data, theta, args.epochs, args.batch, args.runtime)
    acc = history[-1][1]
    print(f"caten ({args.runtime}): test accuracy {acc:.2%} after {args.epochs} epochs, "
          f"{per_epoch * 1e3:.1f} ms per epoch ({len(data[0])} examples, batch {args.batch})")
    if args.torch:
        t_sec, t_acc, _ = train_torch(data, theta, args.epochs, args.batch)
        print(f"torch eager: test accuracy {t_acc:.2%}, {t_sec * 1e3:.1f} ms per epoch "
              f"(caten is {t_sec / per_epoch:.2f}x torch's speed)")
    sys.exit(0 if acc >= 0.97 else 1)


if __name__ == "__main__":
    main()
