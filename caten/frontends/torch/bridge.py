"""ATen calls lowered through `caten.Tensor`: the fx operands become placeholder Tensors, the
Tensor op (the same code `import caten` users call, with torch's semantics already checked
against torch) builds its lazy graph, and that graph is printed into the importer's text, one
`setf` per call. One source of truth: an op the Tensor library learns is importable by naming
it here, never by a second lowering. Needs static sizes (Tensor shapes are integers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.frontends.text import lit
from caten.frontends.torch.context import Ctx, dtype_of, meta


def refuse(n: Any, what: str) -> Error:
    return Error(f"torch.export node `{n.name}`: {what}", None, "docs/import.md lists the supported ATen ops")


class Bridge:
    """Placeholders for fx nodes, remembered so that the printed graph reads the caten vars."""

    def __init__(self, c: Ctx, n: Any) -> None:
        self.c, self.n = c, n
        self.vars: dict[int, str] = {}

    def t(self, a: Any) -> Any:
        """An fx tensor node as a placeholder Tensor (other values unchanged; lists elementwise)."""
        import torch.fx

        from caten.tensor.lazy import placeholder
        from caten.tensor.tensor import Tensor

        if isinstance(a, (list, tuple)):
            return [self.t(x) for x in a]
        if not isinstance(a, torch.fx.Node):
            return a
        val = meta(a)
        if not hasattr(val, "shape"):
            raise refuse(self.n, f"the size `{a.name}` is symbolic; this op needs static sizes")
        shape = tuple(val.shape)
        if not all(isinstance(d, int) for d in shape):
            raise refuse(self.n, f"`{a.name}` has symbolic sizes {list(shape)}; this op needs static sizes")
        node = placeholder(shape, dtype_of(val.dtype))
        self.vars[id(node)] = self.c.arg(a)
        return Tensor(node)

    def emit(self, outs: Any) -> list[str]:
        """caten vars of the Tensor results `outs` (a Tensor or a sequence of them)."""
        from caten.tensor.lazy import DETACH, INPUT, NTH, call_text, text, toposort

        roots = [o.node for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
        names = dict(self.vars)
        for m in toposort(roots, lambda m: id(m) in names or m.op == INPUT):
            if id(m) in names:
                continue
            if m.op == INPUT:
                if m.value is None:
                    raise refuse(self.n, "the Tensor op read a value that is only known when the model runs")
                v = np.asarray(m.value)
                names[id(m)] = (f"(full [] {lit(v.item(), m.dtype)} :dtype {m.dtype})" if v.ndim == 0
                                else self.c.const(self.n.name + "_k", v, m.dtype))
                continue
            if m.op == DETACH:
                names[id(m)] = names[id(m.srcs[0])]
                continue
            args = [names[id(s)] if hasattr(s, "srcs") else text(s) for s in m.srcs]
            if m.op == NTH:
                expr = f"(nth {args[0]} {args[1]})"
            elif m.op.startswith("."):
                raise refuse(self.n, f"the Tensor op made a `{m.op}` node, which the importer cannot print")
            else:
                expr = call_text(m.op, args, m.kw, lambda k: names[id(k)])
            names[id(m)] = self.c.emit(self.n.name, expr)
        return [names[id(r)] for r in roots]


def via(fn: Callable[..., Any]) -> Callable[[Ctx, Any], Any]:
    """A lowering that calls `fn(b, node)`; `fn` turns operands into Tensors with `b.t` and returns
    Tensor result(s) (None for an output torch gives but nothing reads). Each result's shape
    and dtype must be torch's: a differing dtype is cast to torch's, a differing shape refused."""

    def lower(c: Ctx, n: Any) -> Any:
        from caten.tensor import state
        from caten.tensor.trace import Trace

        b = Bridge(c, n)
        state.TRACES.append(Trace("numpy"))  # as caten.jit: no eager reads of values, which are unknown
        try:
            res = fn(b, n)
        except Error as e:
            raise refuse(n, e.message) from None
        except (AttributeError, TypeError, ValueError) as e:  # a Tensor op that reads values eagerly
            raise refuse(n, f"caten.Tensor computes this op from known values only ({type(e).__name__}: {e})") from None
        finally:
            state.TRACES.pop()
        many = isinstance(res, (list, tuple))
        outs = list(res) if many else [res]
        vals = meta(n) if many else [meta(n)]
        live = [(o, v) for o, v in zip(outs, vals) if o is not None]
        names = iter(b.emit([o for o, _ in live]))
        result: list[Any] = []
        for o in outs:
            if o is None:
                result.append(None)
                continue
            var = next(names)
            v = vals[len(result)]
            if tuple(o.shape) != tuple(v.shape):
                raise refuse(n, f"caten computes shape {list(o.shape)}, torch {list(v.shape)}")
            want = dtype_of(v.dtype)
            result.append(var if o.dtype == want else f"(cast {var} {want})")
        return result if many else result[0]

    return lower
