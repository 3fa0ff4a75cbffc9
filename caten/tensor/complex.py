"""Complex tensors for caten.Tensor: planar pairs (real, imag) of real Tensors of f32 or f64.

caten's principal ops are real, so a complex value is two real tensors, and every complex
operation is real arithmetic on the pair (the library's FFT composites in ops/fft.lisp take and
give such pairs). Gradients flow through the parts: the gradient of a real loss reaches the real
and imaginary Tensors it was built from, as torch's `x.grad` (d/dre + i d/dim) does.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.tensor import Tensor

CDTYPES = {"f32": "complex64", "f64": "complex128"}
PARTS = {v: k for k, v in CDTYPES.items()}


def _real_dtype(t: Tensor, what: str) -> Tensor:
    if t.dtype in ("f32", "f64"):
        return t
    if t.dtype in ("f16", "bf16"):
        raise Error(f"{what}: complex {t.dtype} is not supported", hint="use float32 or float64 parts")
    return t.float()  # integers and bool promote to float32, as torch's complex ops


class ComplexTensor:
    """A complex tensor held as (real, imag) Tensors of one float dtype, shape and runtime."""

    __array_priority__ = 1000  # numpy scalars defer to our reflected operators

    def __init__(self, real: Tensor, imag: Tensor) -> None:
        real, imag = _real_dtype(real, "complex"), _real_dtype(imag, "complex")
        if real.dtype != imag.dtype:
            dt = "f64" if "f64" in (real.dtype, imag.dtype) else "f32"
            real, imag = real.to(dt), imag.to(dt)
        if tuple(real.shape) != tuple(imag.shape):
            shape = np.broadcast_shapes(tuple(real.shape), tuple(imag.shape))
            real, imag = real.expand(*shape), imag.expand(*shape)
        self.real, self.imag = real, imag

    # ---- properties, as torch's
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.real.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.real.size() if dim is None else self.real.size(dim)

    def dim(self) -> int:
        return len(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self) -> str:
        return CDTYPES[self.real.dtype]

    @property
    def runtime(self) -> str:
        return self.real.runtime

    @property
    def requires_grad(self) -> bool:
        return bool(self.real.requires_grad or self.imag.requires_grad)

    @property
    def grad(self) -> ComplexTensor | None:
        """d(loss)/d(real) + i d(loss)/d(imag) of the parts (torch's convention for a real loss)."""
        gr, gi = self.real.grad, self.imag.grad
        if gr is None and gi is None:
            return None
        return ComplexTensor(gr if gr is not None else self.real * 0, gi if gi is not None else self.imag * 0)

    def is_complex(self) -> bool:
        return True

    def is_floating_point(self) -> bool:
        return False

    def __len__(self) -> int:
        if not self.shape:
            raise Error("len() of a 0-d tensor")
        return self.shape[0]

    # ---- reading
    def numpy(self) -> np.ndarray:
        re, im = self.real.numpy(), self.imag.numpy()
        out = np.empty(re.shape, np.complex64 if re.dtype == np.float32 else np.complex128)
        out.real, out.imag = re, im
        return out

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> complex:
        return complex(self.numpy().item())

    def __repr__(self) -> str:
        return f"tensor({np.array2string(self.numpy(), separator=', ')}, dtype={self.dtype})"

    # ---- elementwise
    def conj(self) -> ComplexTensor:
        return ComplexTensor(self.real, -self.imag)

    def conj_physical(self) -> ComplexTensor:
        return self.conj()

    def abs(self) -> Tensor:
        """|z| = hypot(re, im) (no overflow); its gradient at 0 is 0, as torch's (hypot's own is nan
        there, so zeros read hypot(1, 0) through a where that passes them no gradient)."""
        zero = (self.real == 0) & (self.imag == 0)
        return Tensor.where(zero, 0.0, Tensor.where(zero, 1.0, self.real).hypot(self.imag))

    def angle(self) -> Tensor:
        return self.imag.atan2(self.real)

    def exp(self) -> ComplexTensor:
        m = self.real.exp()
        return ComplexTensor(m * self.imag.cos(), m * self.imag.sin())

    def __neg__(self) -> ComplexTensor:
        return ComplexTensor(-self.real, -self.imag)

    def __pos__(self) -> ComplexTensor:
        return self

    def __add__(self, o: Any) -> ComplexTensor:
        r, i = _parts(o, self)
        return ComplexTensor(self.real + r, self.imag + i if i is not None else self.imag)

    __radd__ = __add__

    def __sub__(self, o: Any) -> ComplexTensor:
        r, i = _parts(o, self)
        return ComplexTensor(self.real - r, self.imag - i if i is not None else self.imag)

    def __rsub__(self, o: Any) -> ComplexTensor:
        return (-self) + o

    def __mul__(self, o: Any) -> ComplexTensor:
        r, i = _parts(o, self)
        if i is None:
            return ComplexTensor(self.real * r, self.imag * r)
        return ComplexTensor(self.real * r - self.imag * i, self.real * i + self.imag * r)

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> ComplexTensor:
        r, i = _parts(o, self)
        if i is None:
            return ComplexTensor(self.real / r, self.imag / r)
        return self * ComplexTensor(r, -i) / (r * r + i * i)

    def __rtruediv__(self, o: Any) -> ComplexTensor:
        return as_complex(o, self) / self

    def __matmul__(self, o: Any) -> ComplexTensor:
        o = as_complex(o, self)
        mm = Tensor.matmul
        return ComplexTensor(mm(self.real, o.real) - mm(self.imag, o.imag),
                             mm(self.real, o.imag) + mm(self.imag, o.real))

    def __rmatmul__(self, o: Any) -> ComplexTensor:
        return as_complex(o, self) @ self

    def matmul(self, o: Any) -> ComplexTensor:
        return self @ o

    def mul(self, o: Any) -> ComplexTensor:
        return self * o

    def add(self, o: Any) -> ComplexTensor:
        return self + o

    def sub(self, o: Any) -> ComplexTensor:
        return self - o

    def div(self, o: Any) -> ComplexTensor:
        return self / o

    # ---- layout and reductions: the same on both parts
    def _map(self, name: str, *args: Any, **kw: Any) -> ComplexTensor:
        return ComplexTensor(getattr(self.real, name)(*args, **kw), getattr(self.imag, name)(*args, **kw))

    def reshape(self, *shape: Any) -> ComplexTensor:
        return self._map("reshape", *shape)

    def view(self, *shape: Any) -> ComplexTensor:
        return self._map("reshape", *shape)

    def permute(self, *dims: Any) -> ComplexTensor:
        return self._map("permute", *dims)

    def transpose(self, d0: int, d1: int) -> ComplexTensor:
        return self._map("transpose", d0, d1)

    def unsqueeze(self, dim: int) -> ComplexTensor:
        return self._map("unsqueeze", dim)

    def squeeze(self, *dim: Any) -> ComplexTensor:
        return self._map("squeeze", *dim)

    def flip(self, *dims: Any) -> ComplexTensor:
        return self._map("flip", *dims)

    def roll(self, *a: Any, **kw: Any) -> ComplexTensor:
        return self._map("roll", *a, **kw)

    def expand(self, *shape: Any) -> ComplexTensor:
        return self._map("expand", *shape)

    def contiguous(self) -> ComplexTensor:
        return self

    def __getitem__(self, idx: Any) -> ComplexTensor:
        return ComplexTensor(self.real[idx], self.imag[idx])

    def sum(self, *a: Any, **kw: Any) -> ComplexTensor:
        return self._map("sum", *a, **kw)

    def mean(self, *a: Any, **kw: Any) -> ComplexTensor:
        return self._map("mean", *a, **kw)

    def to(self, dtype: Any) -> ComplexTensor:
        dt = PARTS.get(str(dtype).replace("caten.", ""), None)
        if dt is None:
            raise Error(f"to(): a complex tensor converts to complex64 or complex128, not {dtype}")
        return ComplexTensor(self.real.to(dt), self.imag.to(dt))

    def detach(self) -> ComplexTensor:
        return self._map("detach")


def _parts(o: Any, like: ComplexTensor) -> tuple[Any, Any]:
    """An operand's (real, imag): imag None for a real one (no work spent on zeros)."""
    if isinstance(o, ComplexTensor):
        return o.real, o.imag
    if isinstance(o, builtins.complex) or (isinstance(o, np.generic) and np.iscomplexobj(o)):
        return float(o.real), float(o.imag)
    if isinstance(o, (int, float, bool, np.generic)):
        return o, None
    if isinstance(o, np.ndarray):
        c = as_complex(o, like)
        return c.real, (c.imag if np.iscomplexobj(o) else None)
    if isinstance(o, Tensor):
        return _real_dtype(o, "complex"), None
    raise Error(f"complex arithmetic with a {type(o).__name__}")


def as_complex(o: Any, like: ComplexTensor | None = None) -> ComplexTensor:
    """A ComplexTensor of o (complex, real tensor, numpy array or Python number)."""
    if isinstance(o, ComplexTensor):
        return o
    rt = like.runtime if like is not None else None
    if isinstance(o, Tensor):
        o = _real_dtype(o, "complex")
        return ComplexTensor(o, o * 0)
    a = np.asarray(o)
    if a.dtype == np.complex64 or a.dtype == np.complex128:
        part = np.float32 if a.dtype == np.complex64 else np.float64
    else:
        part = np.float64 if a.dtype == np.float64 else np.float32
    if like is not None and isinstance(o, (int, float, builtins.complex)):
        part = np.float32 if like.real.dtype == "f32" else np.float64
    return ComplexTensor(Tensor(np.ascontiguousarray(a.real, part), runtime=rt),
                         Tensor(np.ascontiguousarray(np.imag(a), part), runtime=rt))


def from_numpy(a: np.ndarray, requires_grad: bool = False, runtime: str | None = None) -> ComplexTensor:
    """`caten.tensor(complex_array)`: its parts as leaves (so `.grad` is the complex gradient)."""
    if a.dtype not in (np.complex64, np.complex128):
        raise Error(f"caten has no complex dtype for numpy's {a.dtype}", hint="use complex64 or complex128")
    part = np.float32 if a.dtype == np.complex64 else np.float64
    return ComplexTensor(Tensor(np.ascontiguousarray(a.real, part), requires_grad=requires_grad, runtime=runtime),
                         Tensor(np.ascontiguousarray(a.imag, part), requires_grad=requires_grad, runtime=runtime))


def complex(real: Tensor, imag: Tensor) -> ComplexTensor:  # noqa: A001 (torch's name)
    """torch.complex: both parts f32 or both f64, of one shape (broadcast)."""
    if not isinstance(real, Tensor) or not isinstance(imag, Tensor):
        raise Error("complex(): real and imag must be tensors")
    if real.dtype != imag.dtype or real.dtype not in ("f32", "f64"):
        raise Error(f"complex(): expected both parts float32 or both float64, got {real.dtype} and {imag.dtype}",
                    hint="cast them to one float dtype first")
    return ComplexTensor(real, imag)


def polar(abs: Tensor, angle: Tensor) -> ComplexTensor:  # noqa: A002 (torch's names)
    return complex(abs * angle.cos(), abs * angle.sin())


def view_as_real(z: ComplexTensor) -> Tensor:
    """[..., 2]: the parts stacked last (a copy: caten's pairs are planar)."""
    if not isinstance(z, ComplexTensor):
        raise Error("view_as_real is only supported for complex tensors")
    return Tensor.stack([z.real, z.imag], -1)


def view_as_complex(t: Tensor) -> ComplexTensor:
    if not isinstance(t, Tensor) or t.dtype not in ("f32", "f64"):
        raise Error("view_as_complex is only supported for float32 and float64 tensors")
    if not t.shape or t.shape[-1] != 2:
        raise Error(f"view_as_complex: the last dimension must have size 2, got shape {list(t.shape)}")
    return ComplexTensor(t[..., 0], t[..., 1])


def real(z: Any) -> Tensor:
    return z.real if isinstance(z, ComplexTensor) else z


def imag(z: Any) -> Tensor:
    if not isinstance(z, ComplexTensor):
        raise Error("imag is not implemented for tensors with non-complex dtypes")
    return z.imag
