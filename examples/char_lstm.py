"""Train the character-level LSTM of examples/char_lstm.lisp on the repository's own docs, then
sample from it.

    python examples/char_lstm.py [--steps 300] [--runtime llvm] [--no-torch]

Each training step -- the forward scan over the sequence, its reverse-mode gradient and the Adam
update -- is one caten program (`train-step`); the sampler (`sample`) is one more: a scan that
carries (h, c, logits, trip) and stacks one token per trip, so generating N characters is one
call, not N. The corpus is README.md and docs/*.md as shipped (nothing is downloaded). With torch
installed the script checks that torch computes the same step-0 loss for the same weights and
batch (rtol 1e-4), then times one training step and the sampling of N characters against
torch eager (torch.nn.LSTM, a Python loop for sampling) with the same weights.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

import caten

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def layout(v: int, h: int) -> list[tuple[int, ...]]:
    """The shapes of Theta's pieces in char-lstm-weights' order: Wih, Whh, Bias, Wout, Bout."""
    return [(4 * h, v), (4 * h, h), (4 * h,), (v, h), (v,)]


def unpack(theta: np.ndarray, v: int, h: int) -> list[np.ndarray]:
    ps, o = [], 0
    for shape in layout(v, h):
        n = int(np.prod(shape))
        ps.append(theta[o:o + n].reshape(shape))
        o += n
    assert o == theta.size, (o, theta.size)
    return ps


def init(v: int, h: int, seed: int = 0) -> np.ndarray:
    """torch's defaults: LSTM weights and biases U(-1/sqrt(h), 1/sqrt(h)) (Bias, the sum of two
    such biases, drawn once), the head U(-1/sqrt(h), 1/sqrt(h))."""
    rng = np.random.default_rng(seed)
    b = 1 / np.sqrt(h)
    return np.concatenate([rng.uniform(-b, b, s).astype(np.float32).ravel() for s in layout(v, h)])


def corpus() -> str:
    """The repository's README and docs, as shipped, runs of spaces (markdown tables' padding)
    squeezed to one: otherwise "space" is the best guess so often that greedy decoding says nothing else."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return re.sub(" {2,}", " ", "\n".join(f.read_text(encoding="utf-8") for f in files if f.exists()))


def encode(text: str) -> tuple[np.ndarray, list[str]]:
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    return np.array([lookup[c] for c in text], np.int64), chars


def batch(ids: np.ndarray, t: int, b: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """b random windows of t + 1 characters: (inputs [t, b], targets [t, b]) as indices."""
    start = rng.integers(0, len(ids) - t - 1, b)
    w = np.stack([ids[s:s + t + 1] for s in start], axis=1)
    return w[:-1], w[1:]


def onehot(idx: np.ndarray, v: int) -> np.ndarray:
    return np.eye(v, dtype=np.float32)[idx]


class TorchModel:
    """The same model in torch eager: torch.nn.LSTM (bias_ih our Bias, bias_hh zero and frozen:
    Adam on two biases would move their sum twice as far) and a Linear head, trained with
    torch.optim.Adam(lr=1e-2)."""

    def __init__(self, theta: np.ndarray, v: int, h: int):
        import torch

        self.torch, self.v = torch, v
        wih, whh, bias, wout, bout = (torch.tensor(p) for p in unpack(theta, v, h))
        self.lstm, self.head = torch.nn.LSTM(v, h), torch.nn.Linear(h, v)
        with torch.no_grad():
            self.lstm.weight_ih_l0.copy_(wih)
            self.lstm.weight_hh_l0.copy_(whh)
            self.lstm.bias_ih_l0.copy_(bias)
            self.lstm.bias_hh_l0.zero_()
            self.head.weight.copy_(wout)
            self.head.bias.copy_(bout)
        self.lstm.bias_hh_l0.requires_grad_(False)
        params = [p for p in [*self.lstm.parameters(), *self.head.parameters()] if p.requires_grad]
        self.opt = torch.optim.Adam(params, lr=1e-2)

    def loss(self, x: np.ndarray, y: np.ndarray):
        """x, y: [t, b] indices."""
        torch = self.torch
        out, _ = self.lstm(torch.nn.functional.one_hot(torch.tensor(x), self.v).float())
        return torch.nn.functional.cross_entropy(self.head(out).reshape(-1, self.v), torch.tensor(y).reshape(-1))

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.opt.zero_grad()
        loss = self.loss(x, y)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def sample(self, prime: np.ndarray, n: int) -> np.ndarray:
        """Greedy decoding, one Python trip per character (the eager way)."""
        torch = self.torch
        with torch.no_grad():
            out, state = self.lstm(torch.nn.functional.one_hot(torch.tensor(prime), self.v).float()[:, None])
            logits, toks = self.head(out[-1, 0]), []
            for _ in range(n):
                tok = int(logits.argmax())
                toks.append(tok)
                x = torch.zeros(1, 1, self.v)
                x[0, 0, tok] = 1.0
                out, state = self.lstm(x, state)
                logits = self.head(out[0, 0])
        return np.array(toks, np.int64)


class CatenModel:
    """The compiled programs and the training state (Theta, Adam's M and V, alternated with spare
    arrays through `out=`)."""

    def __init__(self, theta: np.ndarray, v: int, h: int, runtime: str):
        self.mod = caten.load(HERE / "char_lstm.lisp", runtime=runtime)
        self.v, self.h = v, h
        self.state = [theta.copy(), np.zeros_like(theta), np.zeros_like(theta)]
        self.spare = [np.empty_like(theta) for _ in range(3)]
        self.loss = np.empty((), np.float32)
        self.t = 0

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.t += 1
        z = np.zeros((x.shape[1], self.h), np.float32)
        self.mod.train_step(onehot(x, self.v), onehot(y, self.v), z, z, *self.state, np.array(self.t, np.int64),
                            out=[self.loss, *self.spare])
        self.state, self.spare = self.spare, self.state
        return float(self.loss)

    def sample(self, prime: np.ndarray, n: int, seed: int = 0, temperature: float = 0.0) -> np.ndarray:
        z = np.zeros((1, self.h), np.float32)
        return self.mod.sample(onehot(prime, self.v)[:, None], z, z, self.state[0], np.array(seed, np.int64),
                               np.array(temperature, np.float32), np.zeros(n, np.float32))


def best_of(f, n: int = 5) -> float:
    f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--chars", type=int, default=200, help="characters to sample")
    ap.add_argument("--runtime", default="llvm")
    ap.add_argument("--no-torch", action="store_true", help="skip the comparison with torch eager")
    args = ap.parse_args()
    ids, chars = encode(corpus())
    v, h = len(chars), args.hidden
    theta = init(v, h)
    rng = np.random.default_rng(1)
    data = [batch(ids, args.seq, args.batch, rng) for _ in range(args.steps)]
    print(f"corpus {len(ids)} characters, vocabulary {v}; LSTM hidden {h}, sequence {args.seq}, batch {args.batch}")
    t0 = time.perf_counter()
    cm = CatenModel(theta, v, h, args.runtime)
    tm = None
    if not args.no_torch:
        try:
            tm = TorchModel(theta, v, h)
        except ImportError:
            print("torch is not installed: caten only")
    losses = []
    for i, (x, y) in enumerate(data):
        losses.append(cm.step(x, y))
        if i == 0:
            print(f"compile + first step {time.perf_counter() - t0:.1f} s")
            if tm is not None:
                want = tm.step(x, y)
                np.testing.assert_allclose(losses[0], want, rtol=1e-4)
                print(f"step 0 loss: caten {losses[0]:.6f}, torch {want:.6f}")
        if i % 50 == 0 or i == len(data) - 1:
            print(f"step {i:4d}  loss {np.mean(losses[-50:]):.4f}")
    t_train = time.perf_counter() - t0
    print(f"trained {args.steps} steps in {t_train:.1f} s (compile included)")
    assert np.mean(losses[-20:]) < losses[0] - 0.5, "the loss did not go down"
    prime = ids[:8]
    text = "".join(chars[i] for i in cm.sample(prime, args.chars))
    print(f"greedy sample after {''.join(chars[i] for i in prime)!r}:\n{text}")
    text = "".join(chars[i] for i in cm.sample(prime, args.chars, seed=7, temperature=0.8))
    print(f"sample at temperature 0.8:\n{text}")
    if tm is None:
        return
    tm = TorchModel(cm.state[0], v, h)  # the trained weights
    same = np.array_equal(cm.sample(prime, args.chars), tm.sample(prime, args.chars))
    print(f"greedy tokens equal to torch's: {same}")
    x, y = data[0]
    c_step, t_step = best_of(lambda: cm.step(x, y)), best_of(lambda: tm.step(x, y))
    c_smp, t_smp = best_of(lambda: cm.sample(prime, args.chars)), best_of(lambda: tm.sample(prime, args.chars))
    print(f"training step: caten {c_step * 1e3:.2f} ms, torch eager {t_step * 1e3:.2f} ms "
          f"(caten is {t_step / c_step:.2f}x torch's speed)")
    print(f"sampling {args.chars} chars: caten {c_smp * 1e3:.2f} ms, torch eager {t_smp * 1e3:.2f} ms "
          f"(caten is {t_smp / c_smp:.2f}x torch's speed)")


if __name__ == "__main__":
    sys.exit(main())
