"""Train an MLP and a small CNN on scikit-learn's digits with `caten.Tensor`, `caten.nn` and `caten.optim`.

    python examples/mnist_tensor.py [--model mlp|cnn|both] [--epochs N] [--batch 64] [--runtime llvm]

The digits are 8x8 grey images of 0-9 (1,797 of them, bundled with scikit-learn): split 80/20,
stratified, with a fixed seed (1,437 training / 360 test images), pixels scaled to [0, 1]. The
training step -- forward, cross-entropy, backward and the Adam update of every parameter -- is
one function under `caten.jit`: traced once, compiled into one program, and replayed for every
minibatch, with the parameters and Adam's moments updated in place. Both models reach >= 95%
test accuracy (tests/test_tensor_example.py checks it). Needs scikit-learn and rich
(pip install 'caten[train]').
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import caten
from caten import Tensor, nn, optim

K = 10  # classes


def digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images [1437, 1, 8, 8] in [0, 1], train labels, test images [360, 1, 8, 8], test labels)."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("mnist_tensor.py needs scikit-learn: pip install 'caten[train]'")
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]  # NCHW with one channel
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=0.2, random_state=seed, stratify=d.target)
    return xtr, ytr, xte, yte


def mlp() -> nn.Module:
    """64 pixels -> 128 hidden units -> 10 classes."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, K))


def cnn() -> nn.Module:
    """Two 3x3 convolutions (16 and 32 channels), each followed by ReLU and 2x2 max-pooling, then a
    linear layer: [B, 1, 8, 8] -> [B, 16, 4, 4] -> [B, 32, 2, 2] -> 128 -> 10."""
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, K))


@dataclass
class Spec:
    """A model and how it is trained by default."""

    build: Callable[[], nn.Module]
    epochs: int
    lr: float


MODELS = {"mlp": Spec(mlp, epochs=30, lr=5e-3), "cnn": Spec(cnn, epochs=10, lr=1e-2)}


def train_step(model: nn.Module, opt: optim.Optimizer) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """One jitted training step: (mean cross-entropy, logits) of a batch of images and one-hot labels.

    The first call traces the function on placeholders of the batch's shape and compiles one
    program (forward, backward and the update together); every later call with the same shapes
    runs that program. The parameters and the optimizer's state are inputs the program reads from
    their Tensors at each call, and the updated values it outputs become those Tensors' new values.
    """

    @caten.jit
    def step(x: Tensor, onehot: Tensor) -> tuple[Tensor, Tensor]:
        logits = model(x)
        loss = logits.cross_entropy(onehot)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, logits

    return step


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Test accuracy: one forward pass over all of `x` (compiled once, then taken from the cache)."""
    with caten.no_grad():
        pred = model(Tensor(x)).argmax(axis=1).numpy()
    return float((pred == y).mean())


@dataclass
class Result:
    name: str
    test_accuracy: float
    seconds: float  # training time, compiles included
    traces: int = 0  # how many times the training step was traced (one program per batch shape)
    history: list[tuple[float, float, float]] = field(default_factory=list)  # (loss, train acc, test acc)


def train(name: str, data: tuple[np.ndarray, ...], epochs: int | None = None, batch: int = 64,
          lr: float | None = None, runtime: str = "llvm", seed: int = 0, quiet: bool = False) -> Result:
    """Train model `name` (a key of MODELS) on `data` (from `digits()`) and return its test accuracy."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    spec = MODELS[name]
    epochs = spec.epochs if epochs is None else epochs
    xtr, ytr, xte, yte = data
    caten.tensor.set_default_runtime(runtime)  # the model's parameters live on this runtime
    caten.manual_seed(seed)  # torch's default initialisations, drawn from this seed
    model = spec.build()
    opt = optim.Adam(model.parameters(), lr=spec.lr if lr is None else lr)
    step = train_step(model, opt)
    onehot = np.eye(K, dtype=np.float32)[ytr]
    rng = np.random.default_rng(seed)
    # The last partial batch is dropped: a batch of another shape would be traced and compiled as
    # a second program. The order is reshuffled every epoch, so every image is still used.
    nbatch = len(xtr) // batch
    result = Result(name, 0.0, 0.0)
    columns = (TextColumn(f"[bold]{name:>4}"), TextColumn("epoch"), MofNCompleteColumn(), BarColumn(),
               TextColumn("loss {task.fields[loss]:.4f}  train {task.fields[train]:.2%}  "
                          "test {task.fields[test]:.2%}"), TimeElapsedColumn())
    t0 = time.perf_counter()
    with Progress(*columns, disable=quiet) as bar:
        task = bar.add_task(name, total=epochs, loss=float("nan"), train=0.0, test=0.0)
        for _ in range(epochs):
            order = rng.permutation(len(xtr))
            total, correct = 0.0, 0
            for b in range(nbatch):
                idx = order[b * batch:(b + 1) * batch]
                loss, logits = step(Tensor(xtr[idx]), Tensor(onehot[idx]))
                total += loss.item()
                correct += int((logits.numpy().argmax(axis=1) == ytr[idx]).sum())
            test = accuracy(model, xte, yte)
            result.history.append((total / nbatch, correct / (nbatch * batch), test))
            bar.update(task, advance=1, loss=total / nbatch, train=correct / (nbatch * batch), test=test)
    result.seconds = time.perf_counter() - t0
    result.traces = step.traces
    result.test_accuracy = result.history[-1][2] if result.history else accuracy(model, xte, yte)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    ap.add_argument("--epochs", type=int, default=None, help="default: 30 for the MLP, 10 for the CNN")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=None,
                    help="Adam's learning rate (default: 0.005 for the MLP, 0.01 for the CNN)")
    ap.add_argument("--runtime", default="llvm", help="llvm (default), c, numpy, opencl ...")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = digits()
    names = ["mlp", "cnn"] if args.model == "both" else [args.model]
    results = [train(n, data, args.epochs, args.batch, args.lr, args.runtime, args.seed) for n in names]
    for r in results:
        print(f"{r.name}: test accuracy {r.test_accuracy:.2%} after {len(r.history)} epochs "
              f"({r.seconds:.1f} s with compiling; runtime {args.runtime}, batch {args.batch})")
    st = caten.tensor.stats()
    print(f"caten compiled {st['programs']} programs and ran {st['runs']}")
    sys.exit(0 if all(r.test_accuracy >= 0.95 for r in results) else 1)


if __name__ == "__main__":
    main()
