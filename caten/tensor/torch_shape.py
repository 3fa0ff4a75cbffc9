"""torch's shape methods on Tensor: sizes as several ints or one sequence (`view(2, -1)`,
`expand(3, -1)`), `size()`/`size(d)`, torch's squeeze (a dim that is not 1 is left alone),
`transpose(d0, d1)`, `chunk`/`split` as slices, `cat`/`stack` with torch's type promotion.
Each is a library call: `reshape`, `permute`, `expand`, `flip`, `slice`, `concat`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from caten.errors import Error
from caten.tensor.promote import result_type
from caten.tensor.tensor import Tensor, apply
from caten.tensor.torch_reduce import axes, sum_
from caten.tensor.torchnames import ArgError, torch_name


def sizes(args: Sequence[Any], what: str) -> list[int]:
    """torch's size arguments: several ints, or one list/tuple of them."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    out = []
    for a in args:
        if isinstance(a, bool) or not hasattr(a, "__index__"):
            raise ArgError(f"{what}: sizes are ints, not {type(a).__name__}",
                           hint=f"e.g. {what}(2, 3) or {what}((2, 3))")
        out.append(int(a))
    return out


def _dim(t: Tensor, d: Any, extra: int = 0) -> int:
    """A dim in [-rank-extra, rank+extra) as a non-negative index (extra=1: unsqueeze's new axis)."""
    n = t.ndim + extra
    if isinstance(d, bool) or not hasattr(d, "__index__"):
        raise ArgError(f"a dim is an int, not {type(d).__name__}")
    d = int(d)
    if not -max(n, 1) <= d < max(n, 1):
        raise Error(f"dim {d} is out of range for a tensor of rank {t.ndim}")
    return d % max(n, 1)


@torch_name("size", "`.shape`, or `.shape[dim]`", "shape", example="t.size(0)")
def size(self: Tensor, dim: Any = None) -> Any:
    return tuple(self.shape) if dim is None else self.shape[_dim(self, dim)]


@torch_name("dim", "`.ndim`", "shape")
def dim(self: Tensor) -> int:
    return self.ndim


@torch_name("numel", "the product of `.shape`", "shape")
def numel(self: Tensor) -> int:
    return math.prod(self.shape)


@torch_name("nelement", "`numel()`", "shape")
def nelement(self: Tensor) -> int:
    return math.prod(self.shape)


@torch_name("ndimension", "`.ndim`", "shape")
def ndimension(self: Tensor) -> int:
    return self.ndim


@torch_name("reshape", "`(reshape x shape)` (one -1 is inferred)", "shape", example="t.reshape(2, -1)")
def reshape(self: Tensor, *shape: Any) -> Tensor:
    return apply("reshape", [self, sizes(shape, "reshape")], {})


@torch_name("view", "`(reshape x shape)`: tensors are values, so a view is a reshaped copy", "shape",
            example="t.view(-1)")
def view(self: Tensor, *shape: Any) -> Tensor:
    from caten.tensor.torch_bitcast import is_dtype, view_dtype

    if len(shape) == 1 and is_dtype(shape[0]):  # torch's view(dtype): the bits reinterpreted
        return view_dtype(self, shape[0])
    return apply("reshape", [self, sizes(shape, "view")], {})


@torch_name("view_as", "`(reshape x (shape other))`", "shape")
def view_as(self: Tensor, other: Tensor) -> Tensor:
    return apply("reshape", [self, list(other.shape)], {})


@torch_name("reshape_as", "`(reshape x (shape other))`", "shape")
def reshape_as(self: Tensor, other: Tensor) -> Tensor:
    return apply("reshape", [self, list(other.shape)], {})


@torch_name("flatten", "`(reshape x ...)` merging dims start_dim..end_dim", "shape", example="t.flatten(1)")
def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0:
        return apply("reshape", [self, [1]], {})
    a, b = _dim(self, start_dim), _dim(self, end_dim)
    if a > b:
        raise Error(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    s = list(self.shape)
    return apply("reshape", [self, s[:a] + [math.prod(s[a:b + 1])] + s[b + 1:]], {})


@torch_name("unflatten", "`(reshape x ...)` splitting dim into sizes", "shape", example="t.unflatten(1, (2, 3))")
def unflatten(self: Tensor, dim: int, sizes_: Sequence[int]) -> Tensor:
    d = _dim(self, dim)
    s = list(self.shape)
    return apply("reshape", [self, s[:d] + sizes(sizes_, "unflatten") + s[d + 1:]], {})


@torch_name("permute", "`(permute x dims)`", "shape", example="t.permute(1, 0)")
def permute(self: Tensor, *dims: Any) -> Tensor:
    ds = [_dim(self, d) for d in sizes(dims, "permute")]
    if sorted(ds) != list(range(self.ndim)):
        raise Error(f"permute({', '.join(map(str, dims))}) is not a permutation of the {self.ndim} dims")
    return apply("permute", [self, ds], {})


@torch_name("transpose", "`(permute x ...)` swapping dim0 and dim1", "shape", example="t.transpose(0, 1)")
def transpose(self: Tensor, dim0: int, dim1: int) -> Tensor:
    p = list(range(self.ndim))
    a, b = _dim(self, dim0), _dim(self, dim1)
    p[a], p[b] = p[b], p[a]
    return apply("permute", [self, p], {}) if a != b else self


@torch_name("swapaxes", "`transpose`", "shape", example="t.swapaxes(0, 1)")
def swapaxes(self: Tensor, axis0: int, axis1: int) -> Tensor:
    return transpose(self, axis0, axis1)


@torch_name("t", "`(permute x [1 0])` of a tensor of rank <= 2", "shape", example="t.t()")
def t(self: Tensor) -> Tensor:
    if self.ndim > 2:
        raise Error(f"t() expects a tensor of rank <= 2, this one has rank {self.ndim}",
                    hint="use t.transpose(d0, d1) or t.permute(...)")
    return transpose(self, 0, 1) if self.ndim == 2 else self


@torch_name("mT", "`(permute x ...)` swapping the last two dims", "shape", kind="property")
def mT(self: Tensor) -> Tensor:  # noqa: N802
    if self.ndim < 2:
        raise Error(f"mT needs a tensor of rank >= 2, this one has rank {self.ndim}")
    return transpose(self, -2, -1)


@torch_name("squeeze", "`(reshape x ...)` without the size-1 dims (all, or those of dim that are 1)",
            "shape", example="t.squeeze(0)")
def squeeze(self: Tensor, dim: Any = None) -> Tensor:
    if dim is None:
        drop = {i for i, n in enumerate(self.shape) if n == 1}
    else:
        ds = axes(self, list(dim) if isinstance(dim, (list, tuple)) else dim)
        drop = {d for d in (ds if isinstance(ds, list) else [ds]) if self.ndim and self.shape[d] == 1}
    if not drop:
        return self
    return apply("reshape", [self, [n for i, n in enumerate(self.shape) if i not in drop]], {})


@torch_name("unsqueeze", "`(reshape x ...)` with a size-1 dim at dim (-rank-1..rank)", "shape",
            example="t.unsqueeze(0)")
def unsqueeze(self: Tensor, dim: int) -> Tensor:
    d = _dim(self, dim, extra=1)
    s = list(self.shape)
    return apply("reshape", [self, s[:d] + [1] + s[d:]], {})


@torch_name("expand", "`(expand x sizes)`; -1 keeps a dim", "shape", example="t.expand(3, -1)")
def expand(self: Tensor, *sizes_: Any) -> Tensor:
    want = sizes(sizes_, "expand")
    new = len(want) - self.ndim
    if new < 0:
        raise Error(f"expand: {len(want)} sizes for a tensor of rank {self.ndim}",
                    hint="give at least one size per dim (-1 keeps it)")
    out = []
    for i, w in enumerate(want):
        if w == -1:
            if i < new:
                raise Error("expand: -1 cannot be the size of a new leading dim")
            w = self.shape[i - new]
        out.append(w)
    return apply("expand", [self, out], {}) if tuple(out) != self.shape else self


@torch_name("broadcast_to", "`expand`", "shape", example="t.broadcast_to((3, 2, 3))")
def broadcast_to(self: Tensor, size: Sequence[int]) -> Tensor:
    return expand(self, list(size))


@torch_name("expand_as", "`(expand x (shape other))`", "shape")
def expand_as(self: Tensor, other: Tensor) -> Tensor:
    return expand(self, list(other.shape))


@torch_name("repeat", "`(reshape (expand (reshape x ...) ...) ...)`: numpy's tile", "shape",
            example="t.repeat(2, 1)")
def repeat(self: Tensor, *sizes_: Any) -> Tensor:
    reps = sizes(sizes_, "repeat")
    if len(reps) < self.ndim:
        raise Error(f"repeat: {len(reps)} counts for a tensor of rank {self.ndim}",
                    hint="give one count per dim (or more, for new leading dims)")
    s = [1] * (len(reps) - self.ndim) + list(self.shape)
    x = apply("reshape", [self, [v for n in s for v in (1, n)]], {})
    x = apply("expand", [x, [v for r, n in zip(reps, s) for v in (r, n)]], {})
    return apply("reshape", [x, [r * n for r, n in zip(reps, s)]], {})


@torch_name("tile", "`repeat`, with leading 1s where fewer counts than dims", "shape", example="t.tile((2,))")
def tile(self: Tensor, dims: Sequence[int]) -> Tensor:
    reps = sizes([dims], "tile")
    return repeat(self, [1] * (self.ndim - len(reps)) + reps)


@torch_name("movedim", "`(permute x ...)` moving source dims to destination", "shape",
            example="t.movedim(0, -1)")
def movedim(self: Tensor, source: Any, destination: Any) -> Tensor:
    src = [_dim(self, d) for d in (source if isinstance(source, (list, tuple)) else [source])]
    dst = [_dim(self, d) for d in (destination if isinstance(destination, (list, tuple)) else [destination])]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise Error(f"movedim: source {source} and destination {destination} must name as many distinct dims")
    order: list[Any] = [None] * self.ndim
    for s_, d_ in zip(src, dst):
        order[d_] = s_
    rest = iter(a for a in range(self.ndim) if a not in src)
    return apply("permute", [self, [o if o is not None else next(rest) for o in order]], {})


@torch_name("swapdims", "`transpose`", "shape", example="t.swapdims(0, 1)")
def swapdims(self: Tensor, dim0: int, dim1: int) -> Tensor:
    return transpose(self, dim0, dim1)


@torch_name("flip", "`(flip x :axis dims)`", "shape", example="t.flip(0)")
def flip(self: Tensor, *dims: Any) -> Tensor:
    ds = [_dim(self, d) for d in sizes(dims, "flip")]
    return apply("flip", [self], {"axis": ds}) if ds else self


@torch_name("roll", "`(concat (slice x ...) (slice x ...) :axis d)` per dim; no dims: of the flattened tensor",
            "shape", example="t.roll(1, dims=0)")
def roll(self: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    if dims is None:
        return roll(self.reshape(-1), shifts, 0).reshape(list(self.shape))
    sh = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    ds = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if len(sh) != len(ds):
        raise Error(f"roll: {len(sh)} shifts for {len(ds)} dims")
    out = self
    for s, d in zip(sh, ds):
        d = _dim(self, d)
        n = self.shape[d]
        k = int(s) % n if n else 0
        if k:
            out = apply("concat", [_slice(out, d, n - k, n), _slice(out, d, 0, n - k)], {"axis": d})
    return out


def _slice(t: Tensor, d: int, start: int, stop: int) -> Tensor:
    specs = [[0, n, 1] for n in t.shape[:d]] + [[start, stop, 1]]
    return apply("slice", [t] + specs, {})


@torch_name("narrow", "`(slice x ...)` of length items from start along dim", "shape",
            example="t.narrow(0, 1, 2)")
def narrow(self: Tensor, dim: int, start: int, length: int) -> Tensor:
    d = _dim(self, dim)
    n = self.shape[d]
    s = start + n if start < 0 else start
    if not (0 <= s <= n and 0 <= length and s + length <= n):
        raise Error(f"narrow: [{start}, {start}+{length}) is out of range for dim {dim} of size {n}")
    return _slice(self, d, s, s + length)


@torch_name("select", "`(reshape (slice x ...) ...)`: index along dim", "shape", example="t.select(1, 0)")
def select(self: Tensor, dim: int, index: int) -> Tensor:
    d = _dim(self, dim)
    n = self.shape[d]
    if not -n <= index < n:
        raise Error(f"select: index {index} is out of range for dim {dim} of size {n}")
    return squeeze(_slice(self, d, index % n, index % n + 1), d)


@torch_name("split", "`(slice x ...)` pieces of split_size (the last may be shorter) or of the given sizes",
            "shape", example="t.split(2, dim=0)")
def split(self: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    d = _dim(self, dim)
    n = self.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        lens = sizes(split_size_or_sections, "split")
        if sum(lens) != n:
            raise Error(f"split: sizes {lens} do not add up to dim {dim}'s size {n}")
    else:
        k = int(split_size_or_sections)
        if k <= 0:
            raise Error(f"split: a split size must be positive, not {k}")
        lens = [min(k, n - i) for i in range(0, n, k)] or [0]
    out, at = [], 0
    for m in lens:
        out.append(_slice(self, d, at, at + m))
        at += m
    return tuple(out)


@torch_name("chunk", "`split` into pieces of ceil(size/chunks)", "shape", example="t.chunk(2, dim=0)")
def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    if chunks <= 0:
        raise Error(f"chunk: the number of chunks must be positive, not {chunks}")
    n = self.shape[_dim(self, dim)]
    return split(self, max(1, -(-n // chunks)), dim)


@torch_name("unbind", "`select` of every index along dim", "shape", example="t.unbind(0)")
def unbind(self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    d = _dim(self, dim)
    return tuple(select(self, d, i) for i in range(self.shape[d]))


def _common(tensors: Sequence[Any], what: str) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)) or not tensors:
        raise ArgError(f"{what} takes a non-empty list or tuple of tensors", hint=f"caten.{what}([a, b], dim=0)")
    ts = [x if isinstance(x, Tensor) else Tensor(x) for x in tensors]
    dt = result_type(ts)
    return [x if x.dtype == dt else x.cast(dt) for x in ts]


@torch_name("cat", "`(concat xs... :axis dim)`, the tensors at torch's common dtype", "shape", kind="static",
            example="caten.cat([a, b], dim=0)")
def cat(tensors: Sequence[Any], *more: Any, dim: int = 0) -> Tensor:
    if isinstance(tensors, (list, tuple)) and len(more) == 1 and hasattr(more[0], "__index__"):
        more, dim = (), more[0]  # torch's cat(tensors, dim)
    ts = _common([tensors, *more] if more else tensors, "cat")  # the library's concat(a, b, axis=) too
    if len(ts) == 1:
        return ts[0]
    return apply("concat", ts, {"axis": _dim(ts[0], dim)})


@torch_name("concat", "`cat`", "shape", kind="static", example="caten.concat([a, b], dim=0)")
def concat(tensors: Sequence[Any], *more: Any, dim: int = 0) -> Tensor:
    return cat(tensors, *more, dim=dim)


@torch_name("stack", "`(concat (unsqueeze x dim)... :axis dim)`", "shape", kind="static",
            example="caten.stack([a, b], dim=0)")
def stack(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    ts = _common(tensors, "stack")
    if len({x.shape for x in ts}) != 1:
        raise Error(f"stack needs tensors of one shape, not {', '.join(str(list(x.shape)) for x in ts)}")
    d = _dim(ts[0], dim, extra=1)
    return cat([unsqueeze(x, d) for x in ts], d)


@torch_name("hstack", "`cat` along dim 1 (dim 0 for vectors)", "shape", kind="static",
            example="caten.hstack([a, b])")
def hstack(tensors: Sequence[Any]) -> Tensor:
    ts = _common(tensors, "hstack")
    return cat(ts, dim=0 if ts[0].ndim <= 1 else 1)


@torch_name("vstack", "`cat` along dim 0, vectors as rows", "shape", kind="static", example="caten.vstack([a, b])")
def vstack(tensors: Sequence[Any]) -> Tensor:
    ts = _common(tensors, "vstack")
    return cat([x.reshape(1, -1) if x.ndim <= 1 else x for x in ts], dim=0)


@torch_name("diagonal", "`(take x positions)` of the offset-th diagonal of dims dim1 and dim2 (moved last, "
            "flattened), a new last axis", "shape", example="t.diagonal()")
def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    import numpy as np

    if self.ndim < 2:
        raise Error(f"diagonal() needs at least 2 dims, this tensor has {self.ndim}")
    a, b = _dim(self, dim1), _dim(self, dim2)
    if a == b:
        raise Error(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [d for d in range(self.ndim) if d not in (a, b)]
    x = self.permute(*(rest + [a, b])) if rest + [a, b] != list(range(self.ndim)) else self
    r, c = self.shape[a], self.shape[b]
    n = max(0, min(r, c - offset) if offset >= 0 else min(r + offset, c))
    rows = np.arange(n) + max(0, -offset)
    pos = rows * c + rows + offset
    flat = x.reshape([self.shape[d] for d in rest] + [r * c])
    return apply("take", [flat, Tensor(pos.astype(np.int64), runtime=self.runtime)], {"axis": len(rest)})


@torch_name("diag", "a vector: `(where eye v 0)`; a matrix: `diagonal`", "shape", example="t.diag()")
def diag(self: Tensor, diagonal_: int = 0) -> Tensor:
    if self.ndim == 2:
        return diagonal(self, diagonal_)
    if self.ndim != 1:
        raise Error(f"diag() takes a vector or a matrix, this tensor has rank {self.ndim}")
    n = self.shape[0] + abs(diagonal_)
    k = diagonal_
    rows = apply("arange", [n], {"dtype": "i64"}, runtime=self.runtime).reshape(n, 1)
    cols = apply("arange", [n], {"dtype": "i64"}, runtime=self.runtime)
    on = (cols - rows) == k
    vals = apply("pad", [self, [[abs(k), 0]]], {}) if k else self  # out[r, c] = v[c - k] (k >= 0), v[r + k]
    src = vals.reshape(1, n) if k >= 0 else vals.reshape(n, 1)
    out = apply("where", [on, src.expand(n, n), False if self.dtype == "bool" else 0], {})
    return out if out.dtype == self.dtype else out.cast(self.dtype)


@torch_name("tril", "`(tril x :k diagonal)`", "shape", example="t.tril(diagonal=0)")
def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    return apply("tril", [self], {"k": int(diagonal)})


@torch_name("triu", "`(triu x :k diagonal)`", "shape", example="t.triu(diagonal=1)")
def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    return apply("triu", [self], {"k": int(diagonal)})


@torch_name("contiguous", "the tensor itself: caten's tensors have no strides", "shape")
def contiguous(self: Tensor) -> Tensor:
    return self


@torch_name("trace", "`(sum (take (reshape x [-1]) diagonal positions))` of a matrix", "reduction",
            example="t.trace()")
def trace(self: Tensor) -> Tensor:
    if self.ndim != 2:
        raise Error(f"trace() expects a matrix, this tensor has rank {self.ndim}")
    return sum_(diagonal(self))
