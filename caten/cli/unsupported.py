"""The torch names caten does not have, each with why: docs/tensor.md's generated list.

The candidates come from torch itself (every public attribute of `torch.Tensor`, every public
function of `torch` and `torch.nn.functional`), less what `caten.Tensor`, `caten` and
`caten.nn.functional` provide, so the list shrinks by itself as names are added. The reasons are
the hand-kept tables below (an exact name first, then the first matching pattern); a name with no
reason yet is listed under "not yet" rather than left out. tests/test_torch_unsupported_doc.py compares the
committed list with this generator when the same torch is installed; regenerate it with
`python -m caten.cli.unsupported docs/tensor.md` (torchnames.rewrite runs it too).
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from types import ModuleType

COMPLEX = "complex numbers: caten has no complex dtype yet (issue #42)"
SPARSE = "sparse layouts: caten's tensors are dense values"
QUANT = "quantized tensors: caten has no quantized dtypes (its integer dtypes are plain integers)"
STORAGE = "storage, strides and memory: caten's tensors are values without strides or shared memory"
DEVICE = ("device and backend APIs (CUDA, cuDNN, MIOpen, MKL-DNN, XLA, streams...): caten picks a "
          "runtime per tensor (`runtime=`), not a device")
DIST = "distributed, threads and processes: out of scope (a caten program runs where it is called)"
STATE = ("torch's process-wide settings (default dtype/device, threads, determinism, anomaly mode, "
         "autocast, printing): caten takes such choices per call or has none")
SCRIPT = "TorchScript and torch's own compiler: caten is the compiler (`caten.jit`)"
INTERNAL = ("backend kernel entry points and dispatch machinery (`native_*`, `*_backward*`, "
            "`__torch_function__` helpers): caten differentiates through its own VJP rules")
INPLACE = ("in-place form of an op caten has under its plain name: write `t = t.op(...)` (caten's "
           "tensors are values; in-place forms exist where torch code needs them)")
VIEWCOPY = "`*_copy` twin of a view: caten's views are already copies; use the plain name"
RANDOM = "random distributions beyond rand/randn/randint: not written yet (caten's seed stream)"
AUTOGRAD = "autograd hooks and graph internals: only leaves get `.grad`, through `value-and-grad`"
NOT_YET = "not yet: no reason recorded; a candidate to add (or to give a reason in caten/cli/unsupported.py)"

# exact names (any namespace) whose reason no pattern gives
NAMES: dict[str, str] = {
    **dict.fromkeys(["H", "mH", "adjoint", "chalf", "cfloat", "cdouble", "polar", "complex", "isreal",
                     "vdot", "view_as_real", "view_as_complex", "sgn"], COMPLEX),
    **dict.fromkeys(["values", "indices", "smm", "spmm", "hspmm", "dsmm", "sspaddmm", "saddmm"], SPARSE),
    **dict.fromkeys(["element_size", "nbytes", "itemsize", "set_", "is_set_to", "is_contiguous",
                     "dim_order", "layout", "from_file", "frombuffer", "from_dlpack", "save", "load",
                     "new", "unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes",
                     "to_padded_tensor", "is_nested", "is_meta", "apply_", "map_", "map2_",
                     "as_subclass", "module_load", "hash_tensor"], STORAGE),
    **dict.fromkeys(["get_device", "record_stream", "is_cpu", "cpu", "cuda", "get_device_module",
                     "get_default_device", "set_default_device"], DEVICE),
    **dict.fromkeys(["fork", "wait", "is_distributed", "share_memory_", "is_shared",
                     "prepare_multiprocessing_environment"], DIST),
    **dict.fromkeys(["compile", "parse_ir", "parse_schema", "parse_type_comment", "import_ir_module",
                     "import_ir_module_from_buffer", "merge_type_from_type_comment", "classproperty",
                     "compiled_with_cxx11_abi", "cond", "get_file_path", "sym_constrain_range",
                     "vmap", "while_loop", "typename", "unify_type_list"], SCRIPT),
    **dict.fromkeys(["has_torch_function", "has_torch_function_unary", "has_torch_function_variadic",
                     "handle_torch_function", "boolean_dispatch", "assert_int_or_pair", "output_nr",
                     "reinforce", "volatile"], INTERNAL),
    **dict.fromkeys(["register_hook", "register_post_accumulate_grad_hook", "retains_grad",
                     "is_inference", "is_inference_mode_enabled", "grad_dtype"], AUTOGRAD),
    **dict.fromkeys(["bernoulli", "bernoulli_", "multinomial", "normal", "poisson", "binomial",
                     "cauchy_", "exponential_", "geometric_", "log_normal_", "random_", "randperm",
                     "randint_like", "rrelu", "rrelu_", "initial_seed", "seed", "get_rng_state",
                     "set_rng_state"], RANDOM),
}

# (pattern over the whole name, reason), first match wins
PATTERNS: list[tuple[str, str]] = [
    (r".*(complex|conj|imag|real\b|_real$).*|real|angle", COMPLEX),
    (r".*(sparse|coalesce|crow_|ccol_|col_indices|row_indices|to_dense|dense_dim).*", SPARSE),
    (r".*(quantiz|qparams|qscheme|int_repr|fbgemm|fake_quant).*|q_.*", QUANT),
    (r".*(storage|stride|data_ptr|pin_memory|pinned|resize|untyped).*", STORAGE),
    (r"(.*_)?(cuda|cudnn|miopen|mkldnn|vulkan|mps|xpu|ipu|xla|hpu|mtia|maia)(_.*)?|.*_stream|profiler_.*", DEVICE),
    (r".*(autocast|num_threads|interop|deterministic|anomaly|printoptions|warn_always|default_dtype"
     r"|default_tensor_type|float32_matmul_precision|flush_denormal|grad_enabled).*", STATE),
    (r"sym_.*", SCRIPT),
    (r"native_.*|.*_backward.*|.*_stats(_.*)?|batch_norm_elemt|.*_with_indices", INTERNAL),
    (r".*_copy", VIEWCOPY),  # its view is in caten (reason() sends any other `_copy` to its view's reason)
]


def reason(name: str, has: Callable[[str], bool]) -> str:
    """Why caten lacks `name`; `has(n)` says whether the same namespace of caten provides `n`."""
    if name in NAMES:
        return NAMES[name]
    if name.endswith("_copy") and not has(name.removesuffix("_copy")):
        return reason(name.removesuffix("_copy"), has)
    for pattern, why in PATTERNS:
        if re.fullmatch(pattern, name):
            return why
    if name.endswith("_") and has(name.rstrip("_")):
        return INPLACE
    return NOT_YET


def _public(mod: object, routines: bool) -> list[str]:
    return [n for n in dir(mod) if not n.startswith("_") and (not routines or inspect.isroutine(getattr(mod, n)))]


def missing(torch: ModuleType) -> dict[str, dict[str, list[str]]]:
    """reason -> namespace ("Tensor", "torch", "F") -> the sorted names caten lacks."""
    import torch.nn.functional as TF

    import caten
    import caten.nn.functional as CF
    from caten.tensor.torchnames import REGISTRY

    sides: list[tuple[str, list[str], Callable[[str], bool]]] = [
        ("Tensor", _public(torch.Tensor, False), lambda n: hasattr(caten.Tensor, n)),
        ("torch", _public(torch, True), lambda n: n in REGISTRY or hasattr(caten, n)),
        ("F", _public(TF, True), lambda n: hasattr(CF, n)),
    ]
    out: dict[str, dict[str, list[str]]] = {}
    for space, names, has in sides:
        for n in sorted(set(names)):
            if not has(n):
                out.setdefault(reason(n, has), {}).setdefault(space, []).append(n)
    return out


ORDER = [COMPLEX, SPARSE, QUANT, STORAGE, DEVICE, DIST, STATE, SCRIPT, INTERNAL, AUTOGRAD, INPLACE, VIEWCOPY,
         RANDOM, NOT_YET]
SPACES = {"Tensor": "`torch.Tensor`", "torch": "`torch`", "F": "`torch.nn.functional`"}


def version(torch: ModuleType) -> str:
    """torch's release (no local build tag): the list is only comparable with the torch it came from."""
    return torch.__version__.split("+")[0]


def committed_version(text: str) -> str | None:
    """The torch release the list in `text` was generated from."""
    m = re.search(r"generated from torch ([\w.]+)'s own names", text)
    return m.group(1) if m else None


def listing(torch: ModuleType) -> str:
    """The generated markdown: one entry per reason, its names by namespace, all sorted."""
    groups = missing(torch)
    total = sum(len(v) for g in groups.values() for v in g.values())
    out = [f"{total} public names of `torch.Tensor`, `torch` and `torch.nn.functional` that caten does not "
           f"provide, by reason (generated from torch {version(torch)}'s own names less caten's; regenerate with "
           "`python -m caten.cli.unsupported docs/tensor.md`):", ""]
    for why in ORDER:
        if why not in groups:
            continue
        out.append(f"- {why}:")
        for space in SPACES:
            if space in groups[why]:
                out.append(f"  - {SPACES[space]}: " + ", ".join(f"`{n}`" for n in groups[why][space]))
    return "\n".join(out) + "\n"


BEGIN, END = "<!-- unsupported torch names: generated -->", "<!-- end of unsupported torch names -->"


def page(text: str, torch: ModuleType) -> str:
    """`text` (docs/tensor.md) with the list between its markers regenerated."""
    head, rest = text.split(BEGIN, 1)
    return head + BEGIN + "\n" + listing(torch) + END + rest.split(END, 1)[1]


def rewrite(path: str) -> bool:
    """Regenerate the list in the page at `path`; False (page untouched) when torch is not installed."""
    try:
        import torch
    except ImportError:
        return False
    import caten.tensor  # noqa: F401  (registers every name)

    with open(path, encoding="utf-8") as f:
        text = f.read()
    if BEGIN not in text:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(page(text, torch))
    return True


if __name__ == "__main__":
    if not rewrite(sys.argv[1] if len(sys.argv) > 1 else "docs/tensor.md"):
        sys.exit("torch is not installed (or the page has no markers): nothing regenerated")
