"""Greedy decoding with a KV cache: a GPT-2-small-shaped model (12 layers, 768 wide, 12 heads,
vocabulary 50257, random weights), batch 1, one token per step:

    python benchmarks/bench_decode.py [--tokens 64] [--ctx 256] [--layers 12]

The step is one torch module whose caches are buffers updated in place (`index_copy_` at the
position, as transformers' static cache does), so one program serves every step: caten imports
it with `caten.from_torch`, where the buffer updates become in-place outputs (an output named as
its input, written into that array: only the new row is stored, no copy of the cache). Attention
reads the whole cache with the positions after the current one masked.

Reported: tokens/s of caten (llvm), of the same module in torch eager (on 2 threads and on 1: its
small per-token ops can cost more in thread wake-ups than they save) and, when transformers is
installed, of transformers' GPT2LMHeadModel.generate (its own cache) on the same weights' shapes;
the greedy tokens of caten and torch must agree. Also the bytes each step must read (weights
and the cache) over the step's time, against the roofline's memory bandwidth (`caten profile`'s
measured figure), which bounds a memory-bound GEMV.
"""

from __future__ import annotations

import argparse
import copy
import math
import time


def model(layers: int, ctx: int, width: int = 768, heads: int = 12, vocab: int = 50257):
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
            self.fc, self.out = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
            self.register_buffer("k", torch.zeros(1, heads, ctx, width // heads))
            self.register_buffer("v", torch.zeros(1, heads, ctx, width // heads))

        def forward(self, x, pos, mask):
            hd = width // heads
            q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
            q, k, v = (t.reshape(1, 1, heads, hd).transpose(1, 2) for t in (q, k, v))
            self.k.index_copy_(2, pos, k)
            self.v.index_copy_(2, pos, v)
            s = (q @ self.k.transpose(-1, -2)) / math.sqrt(hd)
            s = torch.where(mask, s, torch.tensor(float("-inf")))
            a = (torch.softmax(s, dim=-1) @ self.v).transpose(1, 2).reshape(1, 1, width)
            x = x + self.proj(a)
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = torch.nn.Embedding(vocab, width), torch.nn.Embedding(ctx, width)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.ln = torch.nn.LayerNorm(width)
            self.register_buffer("steps", torch.arange(ctx))

        def forward(self, tok, pos):
            x = self.wte(tok) + self.wpe(pos).reshape(1, 1, width)
            mask = self.steps <= pos
            for b in self.blocks:
                x = b(x, pos, mask)
            logits = self.ln(x) @ self.wte.weight.t()
            return logits.reshape(vocab).argmax().reshape(1, 1)

    torch.manual_seed(0)
    m = Decoder().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)  # random weights with a spread: greedy tokens that differ from step to step
    return m


def decode(step, tokens: int, first: int = 0):
    """Greedy tokens from `step(tok, pos)`, and the seconds they took."""
    import torch

    tok = torch.tensor([[first]])
    out = []
    t0 = time.perf_counter()
    for p in range(tokens):
        tok = torch.as_tensor(step(tok, torch.tensor([p]))).reshape(1, 1)
        out.append(int(tok))
    return out, time.perf_counter() - t0


def hf_generate(layers: int, tokens: int) -> float | None:
    """transformers' GPT-2 (random weights, its own cache) generating `tokens` greedily: seconds."""
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=layers)).eval()
    ids = torch.tensor([[0]])
    with torch.no_grad():
        m.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
        t0 = time.perf_counter()
        m.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--runtime", default="llvm")
    a = ap.parse_args()
    import torch

    import caten

    torch.set_num_threads(2)
    base = model(a.layers, a.ctx)
    rows = []
    warm = a.tokens // 4
    for name in ("caten", "torch eager", "torch eager, 1 thread"):
        m = copy.deepcopy(base)
        torch.set_num_threads(1 if "1 thread" in name else 2)  # (small ops: a second thread may cost more)
        if name == "caten":
            t0 = time.perf_counter()
            step = caten.from_torch(m, (torch.tensor([[0]]), torch.tensor([0])), runtime=a.runtime)
            step(torch.tensor([[0]]), torch.tensor([0]))
            compile_s = time.perf_counter() - t0
        else:
            def step(tok, pos, m=m):
                with torch.no_grad():
                    return m(tok, pos)
        decode(step, warm)  # warm-up (fills the first positions; rewritten below)
        toks, secs = decode(step, a.tokens)
        rows.append((name, toks, secs))
    hf = {}
    for n in (2, 1):
        torch.set_num_threads(n)
        hf[n] = hf_generate(a.layers, a.tokens)
    weights = sum(p.numel() for p in base.parameters()) * 4
    cache = 2 * a.layers * a.ctx * 768 * 4
    print(f"GPT-2-small-shaped greedy decode: {a.layers} layers, cache of {a.ctx} positions, {a.tokens} tokens, "
          f"batch 1 ({a.runtime}; caten import+compile {compile_s:.1f} s)")
    print("| system | tokens/s | ms/token | GB/s read (weights + cache) |")
    print("|---|---|---|---|")
    for name, _, secs in rows:
        print(f"| {name} | {a.tokens / secs:.1f} | {1e3 * secs / a.tokens:.1f} | "
              f"{(weights + cache) * a.tokens / secs / 1e9:.1f} |")
    for n, secs in hf.items():
        if secs is not None:
            print(f"| transformers generate{', 1 thread' if n == 1 else ''} | {a.tokens / secs:.1f} | "
                  f"{1e3 * secs / a.tokens:.1f} | - |")
    torch.set_num_threads(2)
    same = rows[0][1] == rows[1][1]
    print(f"greedy tokens equal: {same}" + ("" if same else f" (caten {rows[0][1][:8]}, torch {rows[1][1][:8]})"))


if __name__ == "__main__":
    main()
