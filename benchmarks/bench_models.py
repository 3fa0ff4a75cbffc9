"""Real models in caten against torch eager, torch.compile and onnxruntime, in ONE run.

    python benchmarks/bench_models.py [--only resnet18,mobilenet_v2] [--reps 10] [--markdown]
    python benchmarks/bench_models.py --small        # small shapes: a smoke run in seconds

Each model has random weights (torchvision / transformers built from configs: nothing is
downloaded) and runs in eval mode on float32 inputs. caten imports it with `caten.from_torch`;
where that refuses (an aten op caten does not map yet), through ONNX (`torch.onnx.export`, then
`caten.onnx.load`), and the table says which path ran. Every system's output is compared with
torch eager's before anything is timed: a wrong answer is reported instead of a time.

Cold is caten's import + compile + first call with an empty compile cache (a private folder);
warm is the same in a new process with that cache filled (`--warm` runs it). Steady-state calls
are timed in alternating rounds (`timing.rounds`), so drift on a shared machine hits every system
alike; ratios are system/caten (> 1: caten is faster).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from deps import need_or_exit
from timing import rounds


@dataclass
class Model:
    name: str
    build: Callable[[bool], tuple[Any, tuple[Any, ...]]]  # small -> (torch module, example inputs)


def _vision(fn: str, batch: int = 1) -> Callable[[bool], tuple[Any, tuple[Any, ...]]]:
    def build(small: bool) -> tuple[Any, tuple[Any, ...]]:
        import torch
        import torchvision

        torch.manual_seed(0)
        m = getattr(torchvision.models, fn)(weights=None).eval()
        side = 64 if small else 224
        return m, (torch.randn(batch, 3, side, side),)
    return build


def _vit(small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    if small:
        m = VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
        side = 32
    else:
        m = VisionTransformer(image_size=224, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768,
                              mlp_dim=3072)
        side = 224
    # torchvision zeroes the classifier: random weights there too, or every output is 0 and the
    # check against torch's could not fail
    torch.nn.init.normal_(m.heads.head.weight, std=0.02)
    return m.eval(), (torch.randn(1, 3, side, side),)


def _bert(small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                     vocab_size=1000) if small else BertConfig()
    tokens = 16 if small else 128
    return _Last(BertModel(cfg).eval()), (torch.randint(0, cfg.vocab_size, (1, tokens)),)


def _gpt2(small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, use_cache=False) if small else \
        GPT2Config(use_cache=False)
    tokens = 16 if small else 512
    return _Last(GPT2Model(cfg).eval()), (torch.randint(0, cfg.vocab_size, (1, tokens)),)


class _Last:
    """A transformers model as a function of its token ids giving the last hidden state (a plain
    tensor output, which every exporter takes)."""

    def __new__(cls, inner: Any) -> Any:
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, ids: Any) -> Any:
                return self.inner(input_ids=ids).last_hidden_state

        return Wrapped().eval()


MODELS = [
    Model("resnet18", _vision("resnet18")),
    Model("resnet18_b8", _vision("resnet18", batch=8)),
    Model("mobilenet_v2", _vision("mobilenet_v2")),
    Model("mobilenet_v3_small", _vision("mobilenet_v3_small")),
    Model("efficientnet_b0", _vision("efficientnet_b0")),
    Model("vit_b_16", _vit),
    Model("bert_base", _bert),
    Model("gpt2_prefill", _gpt2),
]


def _caten(module: Any, args: tuple[Any, ...]) -> tuple[Callable[..., Any], str]:
    """caten's compiled model and the path that imported it."""
    import caten

    np_args = [a.numpy() for a in args]
    try:
        m = caten.from_torch(module, args)
        return (lambda: m(*np_args)), "from_torch"
    except caten.Error as e:
        first = str(e).splitlines()[0][:120]
    import torch

    import caten.onnx

    buf = io.BytesIO()
    try:
        torch.onnx.export(module, args, buf, dynamo=False)
    except Exception as e:  # both paths refused: say why from_torch did, then the exporter
        raise RuntimeError(f"from_torch: {first}; torch.onnx.export: {type(e).__name__}: "
                           f"{str(e).splitlines()[0][:120]}") from None
    m = caten.onnx.load(_proto(buf))
    return (lambda: m(*np_args)), f"onnx (from_torch: {first})"


def _proto(buf: io.BytesIO) -> Any:
    import onnx

    return onnx.load_from_string(buf.getvalue())


def _output(y: Any) -> np.ndarray:
    if isinstance(y, (list, tuple)):
        y = y[0]
    return y.detach().numpy() if hasattr(y, "detach") else np.asarray(y)


def bench(model: Model, small: bool, reps: int, compiled: bool, ort: bool) -> dict[str, Any]:
    import torch

    module, args = model.build(small)
    row: dict[str, Any] = {"model": model.name}
    with torch.no_grad():
        ref = _output(module(*args))
        t0 = time.perf_counter()
        fn, row["path"] = _caten(module, args)
        got = _output(fn())
        row["cold_s"] = time.perf_counter() - t0
        fns: dict[str, Callable[[], Any]] = {"caten": fn, "torch": lambda: module(*args)}
        if not np.allclose(got, ref, rtol=1e-3, atol=1e-3):
            row["error"] = f"caten's output differs from torch's (max |diff| {np.abs(got - ref).max():.3g})"
            return row
        if compiled:
            cm = torch.compile(module)
            cm(*args)
            fns["torch.compile"] = lambda: cm(*args)
        if ort:
            fns.update(_onnxruntime(module, args))
        times = rounds(fns, reps, max_s=60.0, settle=0.05)
    row.update({k: v for k, v in times.items()})
    return row


def _onnxruntime(module: Any, args: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    try:
        import onnxruntime
    except ImportError:
        return {}
    import torch

    buf = io.BytesIO()
    try:
        torch.onnx.export(module, args, buf, dynamo=False)
    except Exception as e:  # (the legacy exporter lacks some ops: that column is then "-")
        print(f"  onnxruntime skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]}", file=sys.stderr)
        return {}
    sess = onnxruntime.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    return {"onnxruntime": lambda: sess.run(None, feed)}


def table(rows: list[dict[str, Any]], systems: list[str]) -> str:
    head = "| model | path | caten cold | caten | " + " | ".join(f"{s} (x)" for s in systems[1:]) + " |"
    out = [head, "|" + "---|" * (4 + len(systems) - 1)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r.get('path', '-')} | | {r['error']} |" + " |" * (len(systems) - 1))
            continue
        cells = [f"{r[s] * 1e3:.2f} ms ({r[s] / r['caten']:.2f}x)" if s in r else "-" for s in systems[1:]]
        out.append(f"| {r['model']} | {r['path']} | {r['cold_s']:.2f} s | {r['caten'] * 1e3:.2f} ms | "
                   + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model names: " + ",".join(m.name for m in MODELS))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--small", action="store_true", help="small configs: a smoke run")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its compile takes minutes)")
    a = ap.parse_args()
    need_or_exit("bench_models.py", "torch", "torch", "comparing with torch")
    need_or_exit("bench_models.py", "torchvision", "oracles", "building the vision models")
    need_or_exit("bench_models.py", "transformers", "oracles", "building BERT and GPT-2")
    # a private, empty compile cache: "cold" means cold
    os.environ.setdefault("CATEN_CACHE_DIR", os.path.join(tempfile.mkdtemp(prefix="bench-models-"), "caten"))
    chosen = [m for m in MODELS if not a.only or m.name in a.only.split(",")]
    rows = []
    for m in chosen:
        print(f"{m.name} ...", file=sys.stderr, flush=True)
        try:
            rows.append(bench(m, a.small, a.reps, not a.no_compile, ort=True))
        except Exception as e:  # one model's failure must not hide the others' numbers
            rows.append({"model": m.name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"})
    systems = ["caten", "torch"] + ([] if a.no_compile else ["torch.compile"]) + ["onnxruntime"]
    print(table(rows, systems))


if __name__ == "__main__":
    main()
