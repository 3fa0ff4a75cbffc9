"""The pending graph as caten source: one composite, one `setf` per call, library names kept.

Realizing a tensor, `caten.trace` and `caten.jit` all print the graph here and compile the
text with `caten.loads`, so a Tensor program goes through the rules, fusion, the arena and the
cache exactly as a `.lisp` file does. Names are given in visiting order, so a loop that builds
the same graph prints the same text, and the text is the key of the compiled program.

A gradient node prints as a call of `value-and-grad` (or `vjp`) on a helper composite holding the
differentiated part of the graph: the helper's parameters are where differentiation stops
(leaves, and values that need no gradient: they are computed by the caller, which is how
`detach` stops a gradient), so the backward pass is the autodiff transform of the language.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from caten.tensor.lazy import DETACH, GRAD, INPUT, NTH, Node, call_text, text, toposort


def signature(names: Sequence[str], nodes: Sequence[Node]) -> str:
    parts = []
    for nm, n in zip(names, nodes):
        dims = f"[{', '.join(map(str, n.shape))}]" if n.shape else ""
        parts.append(f"{nm}{{{n.dtype}}}{dims}")
    return "(" + " ".join(parts) + ")"


def main_cut(n: Node) -> bool:
    """Where a realizing program stops: inputs and values already computed."""
    return n.op == INPUT or n.value is not None


class Printer:
    """Prints composites; helpers for gradients are collected and printed before their caller."""

    def __init__(self) -> None:
        self.helpers: list[str] = []

    def composite(self, name: str, outputs: Sequence[Node], first: Sequence[Node] = (),
                  cut: Callable[[Node], bool] = main_cut, doc: str | None = None) -> tuple[str, list[Node]]:
        """(text of the composite, its parameters in order): `first` are the leading parameters
        (a traced function's arguments, named x0, x1, ...); the other cut nodes follow in visiting
        order, named w0, w1, ... (captured parameters, or the values a program starts from)."""
        firsts = {id(n) for n in first}
        order = toposort(list(outputs), lambda n: id(n) in firsts or cut(n))
        params = list(first) + [n for n in order if (cut(n) or n.op == INPUT) and id(n) not in firsts]
        names: dict[int, str] = {}
        for i, p in enumerate(params):
            names[id(p)] = f"x{i}" if i < len(first) else f"w{i - len(first)}"
        lines: list[str] = []
        k = 0
        for n in order:
            if id(n) in names:
                continue
            if n.op == DETACH:
                names[id(n)] = names[id(n.srcs[0])]
                continue
            var = f"t{k}"
            k += 1
            names[id(n)] = var
            lines.append(f"(setf {var} {self._expr(n, names)})")
        onames = [names[id(o)] for o in outputs]
        outs = " ".join(f"y{i}{{{o.dtype}}}" + (f"[{', '.join(map(str, o.shape))}]" if o.shape else "")
                        for i, o in enumerate(outputs))
        head = f"(composite {name} ({signature([names[id(p)] for p in params], params)} -> ({outs}))"
        if doc:
            head += f"\n  {_string(doc)}"
        ret = f"(return {' '.join(onames)})" if len(onames) > 1 else onames[0]
        body = "\n  ".join(lines + [ret])
        return f"{head}\n  {body})\n", params

    def _expr(self, n: Node, names: dict[int, str]) -> str:
        args = [names[id(s)] if isinstance(s, Node) else text(s) for s in n.srcs]
        if n.op == NTH:
            return f"(nth {args[0]} {args[1]})"
        if n.op == GRAD:
            return self._grad(n, args)
        return call_text(n.op, args, n.kw, lambda m: names[id(m)])

    def _grad(self, n: Node, args: list[str]) -> str:
        """`(value-and-grad helper ARGS :wrt ...)`, or `vjp` with a cotangent."""
        loss: Node = n.kw["loss"]
        wrt: list[int] = n.kw["wrt"]
        cot = n.kw.get("cotangent", False)
        hparams = [s for s in n.srcs[:len(n.srcs) - (1 if cot else 0)]]
        inside = {id(p) for p in hparams}
        hname = f"grad{len(self.helpers)}"
        self.helpers.append("")  # the slot keeps helper names unique while nested ones print
        slot = len(self.helpers) - 1
        htext, _ = self.composite(hname, [loss], hparams, cut=lambda m: id(m) in inside)
        self.helpers[slot] = htext
        w = [f"x{i}" for i in wrt]  # the helper's parameters are all `first`: x0, x1, ...
        wtext = w[0] if len(w) == 1 else "[" + " ".join(w) + "]"
        fargs = " ".join(args[:len(hparams)])
        if cot:
            return f"(vjp {hname} {fargs} :wrt {wtext} :cotangent {args[-1]})"
        return f"(value-and-grad {hname} {fargs} :wrt {wtext})"

    def program(self, name: str, outputs: Sequence[Node], first: Sequence[Node] = (),
                doc: str | None = None) -> tuple[str, list[Node]]:
        """The whole text (helpers, then the composite `name`) and the parameters of `name`."""
        main, params = self.composite(name, outputs, first, doc=doc)
        return "\n".join([h for h in self.helpers if h] + [main]), params


def _string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
