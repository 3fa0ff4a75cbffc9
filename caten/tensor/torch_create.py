"""torch's creation functions: `Tensor.zeros(2, 3)` or `caten.zeros((2, 3))`, `*_like`, `eye`,
`linspace`, `caten.tensor(data)`, with torch's default dtypes (f32, or i64 for `full` of an int)
and `requires_grad=`. `device=` takes "cpu" (the default runtime) or a caten runtime's name.
Random tensors draw from the seed stream (`caten.manual_seed`); their values are caten's, not
torch's generator's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import dtype_name, np_dtype
from caten.tensor.tensor import FLOATS, Tensor, _dt, _leafify, _seed, apply
from caten.tensor.torch_shape import sizes
from caten.tensor.torchnames import torch_name


class Unimplemented(Error, NotImplementedError):
    """What torch raises NotImplementedError for (a dtype or mode its kernel lacks): a caten Error
    that torch-minded code catches as torch's."""


def runtime_of(device: Any, runtime: Any) -> Any:
    """torch's `device=`: "cpu" is the default runtime; a caten runtime's name picks it."""
    if device is None or runtime is not None:
        return runtime
    name = str(device)
    return None if name == "cpu" else name


def _legacy(size: tuple, dtype: Any, what: str) -> tuple[list, Any]:
    """(the shape as the library's list, the dtype): the library's form `zeros([2, 3], "f32")`,
    a shape list and then a dtype, stays accepted beside torch's `zeros(2, 3, dtype=...)`."""
    if len(size) == 2 and isinstance(size[0], (list, tuple)) and dtype is None and dtype_name(size[1]):
        return [sizes(size[:1], what)], size[1]
    return [sizes(size, what)], dtype


def _make(op: str, args: list, kw: dict, dtype: Any, requires_grad: bool, runtime: Any) -> Tensor:
    t = apply(op, args, {**kw, "dtype": _dt(dtype if dtype is not None else "f32")}, runtime=runtime)
    return _leafify(t, requires_grad)


@torch_name("tensor", "`Tensor(data)`: Python floats f32, ints i64, numpy arrays keep their dtype", "creation",
            kind="function", example="caten.tensor([[1.0, 2.0]])")
def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, runtime: Any = None):
    if isinstance(data, np.ndarray) and data.dtype.kind == "c":  # a planar complex pair (docs/fft.md)
        from caten.tensor.complex import from_numpy as complex_from_numpy

        return complex_from_numpy(data, requires_grad, runtime_of(device, runtime))
    return Tensor(data, dtype=None if dtype is None else _dt(dtype), requires_grad=requires_grad,
                  runtime=runtime_of(device, runtime))


@torch_name("as_tensor", "`tensor(data)`", "creation", kind="function", example="caten.as_tensor([1.0, 2.0])")
def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    if isinstance(data, Tensor) and dtype is None:
        return data
    return tensor(data, dtype=dtype, device=device)


@torch_name("from_numpy", "`Tensor(array)` (a copy: tensors are values)", "creation", kind="function")
def from_numpy(array: np.ndarray) -> Tensor:
    return Tensor(np.asarray(array))


@torch_name("zeros", "`(zeros shape :dtype dtype)`", "creation", kind="static", example="caten.zeros(2, 3)")
def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, runtime: Any = None):
    args, dtype = _legacy(size, dtype, "zeros")
    return _make("zeros", args, {}, dtype, requires_grad, runtime_of(device, runtime))


@torch_name("ones", "`(ones shape :dtype dtype)`", "creation", kind="static", example="caten.ones(2, 3)")
def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, runtime: Any = None):
    args, dtype = _legacy(size, dtype, "ones")
    return _make("ones", args, {}, dtype, requires_grad, runtime_of(device, runtime))


@torch_name("empty", "`zeros` (caten never hands out uninitialised memory)", "creation", kind="static",
            example="caten.empty(2, 3)")
def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, runtime: Any = None):
    args, dtype = _legacy(size, dtype, "empty")
    return _make("zeros", args, {}, dtype, requires_grad, runtime_of(device, runtime))


def _fill_dtype(value: Any) -> str:
    """torch.full's dtype from the fill value: bool, i64 for an int, else f32."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    return "i64" if isinstance(value, (int, np.integer)) else "f32"


@torch_name("full", "`(full shape value :dtype dtype)`; the dtype follows the value as torch's", "creation",
            kind="static", example="caten.full((2, 3), 1.5)")
def full(size: Sequence[int], fill_value: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
         runtime: Any = None):
    dt = _dt(dtype) if dtype is not None else _fill_dtype(fill_value)
    return _make("full", [sizes([size], "full"), fill_value], {}, dt, requires_grad, runtime_of(device, runtime))


@torch_name("rand", "`(rand shape :seed s :dtype dtype)`: uniform in [0, 1)", "creation", kind="static",
            example="caten.rand(2, 3)")
def rand(*size: Any, dtype: Any = None, seed: Any = None, device: Any = None, requires_grad: bool = False,
         runtime: Any = None):
    args, dtype = _legacy(size, dtype, "rand")
    return _make("rand", args, {"seed": _seed(seed)}, dtype, requires_grad,
                 runtime_of(device, runtime))


@torch_name("randn", "`(randn shape :seed s :dtype dtype)`: standard normal", "creation", kind="static",
            example="caten.randn(4, 3)")
def randn(*size: Any, dtype: Any = None, seed: Any = None, device: Any = None, requires_grad: bool = False,
          runtime: Any = None):
    args, dtype = _legacy(size, dtype, "randn")
    return _make("randn", args, {"seed": _seed(seed)}, dtype, requires_grad,
                 runtime_of(device, runtime))


@torch_name("randint", "`(+ (cast (* (rand shape :dtype f64) (- high low)) i64) low)`", "creation",
            kind="static", example="caten.randint(0, 10, (2, 3))")
def randint(low: int, high: Any = None, size: Any = None, dtype: Any = "i64", seed: Any = None,
            device: Any = None, runtime: Any = None):
    if size is None:  # randint(high, size)
        low, high, size = 0, low, high
    if size is None or high is None or int(high) <= int(low):
        raise Error(f"randint needs low < high and a size (got low={low}, high={high}, size={size})",
                    hint="caten.randint(0, 10, (2, 3))")
    u = _make("rand", [sizes([size], "randint")], {"seed": _seed(seed)}, "f64", False, runtime_of(device, runtime))
    return (u * float(int(high) - int(low))).cast("i64").cast(_dt(dtype)) + int(low)


def _like(t: Tensor, dtype: Any) -> tuple[list[int], Any]:
    return list(t.shape), (t.dtype if dtype is None else dtype)


@torch_name("zeros_like", "`zeros` of the tensor's shape, dtype and runtime", "creation", kind="static")
def zeros_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    s, d = _like(input, dtype)
    return _make("zeros", [s], {}, d, requires_grad, input.runtime)


@torch_name("ones_like", "`ones` of the tensor's shape, dtype and runtime", "creation", kind="static")
def ones_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    s, d = _like(input, dtype)
    return _make("ones", [s], {}, d, requires_grad, input.runtime)


@torch_name("empty_like", "`zeros_like`", "creation", kind="static")
def empty_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    s, d = _like(input, dtype)
    return _make("zeros", [s], {}, d, requires_grad, input.runtime)


@torch_name("full_like", "`full` of the tensor's shape, dtype and runtime", "creation", kind="static")
def full_like(input: Tensor, fill_value: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    s, d = _like(input, dtype)
    return _make("full", [s, fill_value], {}, d, requires_grad, input.runtime)


@torch_name("rand_like", "`rand` of the tensor's shape, dtype and runtime", "creation", kind="static")
def rand_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    s, d = _like(input, dtype)
    return _make("rand", [s], {"seed": _seed(None)}, d, requires_grad, input.runtime)


@torch_name("randn_like", "`randn` of the tensor's shape, dtype and runtime", "creation", kind="static")
def randn_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    s, d = _like(input, dtype)
    return _make("randn", [s], {"seed": _seed(None)}, d, requires_grad, input.runtime)


@torch_name("new_zeros", "`zeros` with the tensor's dtype and runtime", "creation")
def new_zeros(self: Tensor, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return _make("zeros", [sizes(size, "new_zeros")], {}, dtype or self.dtype, requires_grad, self.runtime)


@torch_name("new_ones", "`ones` with the tensor's dtype and runtime", "creation")
def new_ones(self: Tensor, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return _make("ones", [sizes(size, "new_ones")], {}, dtype or self.dtype, requires_grad, self.runtime)


@torch_name("new_full", "`full` with the tensor's dtype and runtime", "creation")
def new_full(self: Tensor, size: Sequence[int], fill_value: Any, dtype: Any = None,
             requires_grad: bool = False) -> Tensor:
    return _make("full", [sizes([size], "new_full"), fill_value], {}, dtype or self.dtype, requires_grad,
                 self.runtime)


@torch_name("new_tensor", "`Tensor(data)` with the tensor's dtype and runtime", "creation")
def new_tensor(self: Tensor, data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return Tensor(data, dtype=_dt(dtype or self.dtype), requires_grad=requires_grad, runtime=self.runtime)


@torch_name("arange", "`(arange n)`, then `(+ (* i step) start)` in f64 rounded once for floats", "creation",
            kind="static", example="caten.arange(0, 10, 2)")
def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: Any = None,
           requires_grad: bool = False, runtime: Any = None) -> Tensor:
    """torch.arange: i64, or f32 where an argument is a float; start + i * step."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise Error("arange: the step must not be 0")
    if dtype is None:
        dtype = "f32" if any(isinstance(v, (float, np.floating)) for v in (start, end, step)) else "i64"
    if all(isinstance(v, (int, np.integer)) for v in (start, end, step)):
        n = max(0, -(-(end - start) // step))  # exact for any integers
    else:
        n = max(0, math.ceil((end - start) / step))
    dt, rt = _dt(dtype), runtime_of(device, runtime)
    if step == 1 and start == 0:
        return _leafify(apply("arange", [int(n)], {"dtype": dt}, runtime=rt), requires_grad)
    # start + i * step in f64, rounded once to a float dtype (torch's values, not f32 arithmetic's)
    wide = "f64" if dt in FLOATS else dt
    t = apply("arange", [int(n)], {"dtype": wide}, runtime=rt)
    t = (t * step if step != 1 else t) + start
    return _leafify(t.cast(dt) if wide != dt else t, requires_grad)


@torch_name("eye", "`(cast (= (reshape (arange n) [n 1]) (arange m)) dtype)`", "creation", kind="static",
            example="caten.eye(3)")
def eye(n: int, m: Any = None, dtype: Any = None, device: Any = None, requires_grad: bool = False,
        runtime: Any = None) -> Tensor:
    rt = runtime_of(device, runtime)
    m = n if m is None else m
    rows = apply("arange", [int(n)], {"dtype": "i64"}, runtime=rt).reshape(int(n), 1)
    cols = apply("arange", [int(m)], {"dtype": "i64"}, runtime=rt)
    return _leafify((rows == cols).cast(_dt(dtype or "f32")), requires_grad)


@torch_name("linspace", "torch's formula (start + i*step below the middle, end - (steps-1-i)*step above) "
            "in the dtype's arithmetic, as a constant", "creation", kind="static",
            example="caten.linspace(0, 1, steps=5)")
def linspace(start: Any, end: Any, steps: int, dtype: Any = None, device: Any = None, requires_grad: bool = False,
             runtime: Any = None) -> Tensor:
    dt = _dt(dtype or "f32")
    if dt == "bool":
        raise Unimplemented('"linspace_cpu" not implemented for \'Bool\'')
    steps = int(steps)
    if steps < 0:
        raise Error(f"linspace: steps must be >= 0, not {steps}")
    i = np.arange(steps)
    if dt in FLOATS:
        ty = np.float32 if dt in ("f16", "bf16") else np_dtype(dt).type  # torch's half kernels step in f32
        a, b = ty(start), ty(end)
        step = (b - a) / ty(max(steps - 1, 1))
        vals = np.where(i < steps // 2, a + step * i.astype(ty), b - step * (steps - 1 - i).astype(ty))
    else:  # integers step in f64, truncated
        step = (float(end) - float(start)) / max(steps - 1, 1)
        vals = np.where(i < steps // 2, int(start) + step * i, int(end) - step * (steps - 1 - i))
    if steps == 1:
        vals = np.array([start])
    arr = np.asarray(vals).astype(np_dtype(dt))
    return Tensor(arr, requires_grad=requires_grad, runtime=runtime_of(device, runtime))
