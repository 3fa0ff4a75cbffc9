"""JAX's control flow over `caten.Tensor` (docs/language.md section 5.3): `while_loop`, `fori_loop`,
`scan` and `cond`, each ONE loop or branch of the program however many trips it runs.

The user's functions run once, on placeholder Tensors standing for the loop state (and the
scanned slices, the counter, the branch operands); the graph they build is printed as the body
of the language's `while` / `fori` / `scan` / `if` form, so the elaborator builds the LOOP or IF
node through `caten.ir.control` exactly as for a `.lisp` file (the same checks, gradients and
back ends). The part of a body that reads none of its placeholders (a weight, a value computed
before the loop) is a capture: a value of the enclosing graph, bound by name around the form:

    (let ((k1_0 <captured>) ...) (setf r1 (scan (lambda (c x) ... (next (list ..) (list ..))) ..))
         (list (nth (nth r1 0) 0) ...))

The node of that text has one output per leaf of the results (NTH nodes pick them), so the loop
is computed once whatever number of results it has. Eagerly it realizes as any Tensor op; inside
`caten.jit` it is one more statement of the traced program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.emit import Printer, main_cut
from caten.tensor.lazy import DETACH, NTH, Node, placeholder, text, toposort
from caten.tensor.tensor import FLOATS, Tensor

__all__ = ["while_loop", "fori_loop", "scan", "cond"]

_DEPTH = [0]  # how many bodies are being traced around the caller (names of nested bodies differ)


# pytrees (tuples, lists, dicts and None around tensors, as JAX's) -------------------------------
def _flatten(v: Any, out: list[Any]) -> Any:
    if isinstance(v, (list, tuple)):
        return (type(v), [_flatten(x, out) for x in v])
    if isinstance(v, dict):
        return (dict, {k: _flatten(v[k], out) for k in v})
    if v is None:
        return ("N", None)
    out.append(v)
    return ("T", len(out) - 1)


def _unflatten(s: Any, leaves: Sequence[Any]) -> Any:
    kind, x = s
    if kind == "T":
        return leaves[x]
    if kind == "N":
        return None
    if kind is dict:
        return {k: _unflatten(v, leaves) for k, v in x.items()}
    return kind(_unflatten(v, leaves) for v in x)


def _tensor(v: Any, runtime: str, what: str) -> Tensor:
    if isinstance(v, Tensor):
        return v
    if isinstance(v, (bool, int, float, np.ndarray, np.generic)):
        return Tensor(v, runtime=runtime)
    raise Error(f"{what}: a {type(v).__name__} is not a tensor, a number or a tuple/list/dict of them",
                hint="loop state, scanned values and branch results are (pytrees of) caten.Tensor")


def _leaves(tree: Any, runtime: str, what: str) -> tuple[Any, list[Tensor]]:
    raw: list[Any] = []
    s = _flatten(tree, raw)
    return s, [_tensor(v, runtime, what) for v in raw]


def _runtime(*trees: Any) -> str:
    found: list[Any] = []
    for t in trees:
        _flatten(t, found)
    rts = {v.runtime for v in found if isinstance(v, Tensor)}
    if len(rts) > 1:
        raise Error(f"tensors of different runtimes ({', '.join(sorted(rts))}) in one loop",
                    hint="create them with the same runtime=")
    return rts.pop() if rts else state.RUNTIME[0]


def _sig(ts: Sequence[Any]) -> str:
    return ", ".join(f"{t.dtype}{list(t.shape)}" for t in ts)


# bodies as text -----------------------------------------------------------------------------------
class _Form:
    """One control form being built: its captures (values of the enclosing graph, bound by
    `let` names) and the text of its bodies."""

    def __init__(self, runtime: str):
        self.runtime = runtime
        self.d = _DEPTH[0] + 1
        self.caps: list[Node] = []
        self.cap_names: dict[int, str] = {}
        self.bodies = 0

    def capture(self, n: Node) -> str:
        name = self.cap_names.get(id(n))
        if name is None:
            name = self.cap_names[id(n)] = f"k{self.d}_{len(self.caps)}"
            self.caps.append(n)
        return name

    def params(self, like: Sequence[Tensor]) -> list[Tensor]:
        return [Tensor(placeholder(t.shape, t.dtype), runtime=self.runtime) for t in like]

    def trace(self, fn: Callable[..., Any], *args: Any) -> Any:
        _DEPTH[0] += 1
        try:
            return fn(*args)
        finally:
            _DEPTH[0] -= 1

    def body(self, params: Sequence[Tensor], names: Sequence[str],
             outputs: Sequence[Tensor]) -> tuple[list[str], list[str]]:
        """(setf lines, output names) of a body: `params` are bound to `names`; every maximal part
        that reads no parameter is a capture."""
        self.bodies += 1
        pids = {id(p.node): nm for p, nm in zip(params, names)}
        outs = [o.node for o in outputs]
        dep: dict[int, bool] = {}
        for n in toposort(outs, lambda m: id(m) in pids or main_cut(m)):
            dep[id(n)] = id(n) in pids or (not main_cut(n) and any(dep.get(id(s), False) for s in n.deps()))
        label: dict[int, str] = dict(pids)
        lines: list[str] = []
        printer = Printer()
        for n in toposort(outs, lambda m: id(m) in pids or not dep[id(m)]):
            if id(n) in label:
                continue
            if not dep[id(n)]:
                label[id(n)] = self.capture(n)
            elif n.op == DETACH:
                label[id(n)] = label[id(n.srcs[0])]
            else:
                label[id(n)] = f"v{self.d}_{self.bodies}_{len(lines)}"
                lines.append(f"(setf {label[id(n)]} {printer._expr(n, label)})")
        if any(printer.helpers):
            raise Error("a gradient (backward, autograd.grad) inside a loop or branch body is not supported",
                        hint="differentiate the whole loop from outside it")
        return lines, [label[id(o)] for o in outs]

    def node(self, form: str, result: str, picks: list[str], outs: list[Tensor]) -> list[Tensor]:
        """The Tensors of the form's results: `(let (captures) (setf RESULT FORM) (list PICKS))`."""
        srcs: list[Any] = ["("]
        for n in self.caps:
            srcs += [f"({self.cap_names[id(n)]}", n, ")"]
        srcs += [")", f"(setf {result} {form})", "(list " + " ".join(picks) + ")"]
        rg = state.grad_enabled() and any(n.requires_grad for n in self.caps)
        specs = [(tuple(o.shape), o.dtype) for o in outs]
        multi = Node("let", tuple(srcs), {}, None, None, rg, outs=specs)
        return [Tensor(Node(NTH, (multi, i), {}, s, d, rg and d in FLOATS), runtime=self.runtime)
                for i, (s, d) in enumerate(specs)]


def _progn(lines: list[str], last: str) -> str:
    return f"(progn {' '.join(lines)} {last})" if lines else last


def _lst(names: Sequence[str]) -> str:
    return "(list " + " ".join(names) + ")"


def _check_state(what: str, init: list[Tensor], nxt: list[Tensor], s_in: Any, s_out: Any, hint: str) -> None:
    if s_in != s_out or len(init) != len(nxt):
        raise Error(f"{what}: the body returns a state of another structure than the initial one", hint=hint)
    for j, (a, b) in enumerate(zip(init, nxt)):
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            raise Error(f"{what}: state value {j} starts as {a.dtype}{list(a.shape)} but the body gives "
                        f"{b.dtype}{list(b.shape)}", hint=hint)


_STATE_HINT = "each state value keeps its dtype and shape across trips (cast or reshape inside the body)"


def _bound(v: Any, form: _Form, what: str) -> str:
    if isinstance(v, Tensor):
        if v.ndim != 0 or v.dtype not in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"):
            raise Error(f"{what}: a loop bound must be a Python int or a rank-0 integer tensor, got "
                        f"{v.dtype}{list(v.shape)}", hint="reduce it and cast it to an integer dtype")
        return form.capture(v.node)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise Error(f"{what}: a loop bound must be a Python int or a rank-0 integer tensor, got {v!r}")
    return text(int(v))


# the functions ------------------------------------------------------------------------------------
def _state_loop(what: str, init_val: Any, body: Callable[..., Any], cond_fn: Callable[..., Any] | None,
                lower: Any = None, upper: Any = None) -> Any:
    rt = _runtime(init_val, lower, upper)
    s_in, init = _leaves(init_val, rt, what)
    if not init:
        raise Error(f"{what}: the loop state has no tensor", hint="carry at least one tensor")
    f = _Form(rt)
    d = f.d
    names = [f"s{d}_{j}" for j in range(len(init))]
    binds = " ".join(f"({nm} {f.capture(t.node)})" for nm, t in zip(names, init))
    ps = f.params(init)
    st = _unflatten(s_in, ps)
    if cond_fn is not None:
        c = f.trace(cond_fn, st)
        c = _tensor(c, rt, what) if not isinstance(c, Tensor) else c
        if c.ndim != 0 or c.dtype != "bool":
            raise Error(f"{what}: cond_fun must return a rank-0 bool tensor, got {c.dtype}{list(c.shape)}",
                        hint="reduce the condition, e.g. (err > tol).any() or (x - y).abs().max() > tol")
        clines, (cname,) = f.body(ps, names, [c])
    if lower is None:
        s_out, nxt = _leaves(f.trace(body, st), rt, what)
        _check_state(what, init, nxt, s_in, s_out, _STATE_HINT)
        lines, outs = f.body(ps, names, nxt)
        form = f"(while ({binds}) {_progn(clines, cname)} {' '.join(lines)} (next {' '.join(outs)}))"
    else:
        lo, hi = _bound(lower, f, what), _bound(upper, f, what)
        bdt = next((b.dtype for b in (lower, upper) if isinstance(b, Tensor)), "i64")
        idx = Tensor(placeholder((), bdt), runtime=rt)
        s_out, nxt = _leaves(f.trace(body, idx, st), rt, what)
        _check_state(what, init, nxt, s_in, s_out, _STATE_HINT)
        lines, outs = f.body([idx] + ps, [f"n{d}"] + names, nxt)
        lines = [f"(setf n{d} (cast i{d} {bdt}))"] + lines
        form = f"(fori (i{d} {lo} {hi}) ({binds}) {' '.join(lines)} (next {' '.join(outs)}))"
    r = f"r{d}"
    picks = [r] if len(init) == 1 else [f"(nth {r} {j})" for j in range(len(init))]
    return _unflatten(s_in, f.node(form, r, picks, init))


def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any) -> Any:
    """`jax.lax.while_loop`: `val = init_val; while cond_fun(val): val = body_fun(val)`, one loop
    whose trip count is known at run time (no reverse-mode gradient, as JAX)."""
    return _state_loop("while_loop", init_val, body_fun, cond_fun)


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    """`jax.lax.fori_loop`: `for i in range(lower, upper): val = body_fun(i, val)`; the bounds are
    Python ints or rank-0 integer tensors (read at run time); `i` is a rank-0 tensor of the
    bounds' dtype (i64 for Python ints)."""
    return _state_loop("fori_loop", init_val, body_fun, None, lower, upper)


def scan(f: Callable[[Any, Any], Any], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int = 1) -> tuple[Any, Any]:
    """`jax.lax.scan`: `carry, y = f(carry, x)` over the leading axis of `xs` (a pytree), giving
    (final carry, the ys stacked); `xs=None` with `length` scans that many trips."""
    what = "scan"
    rt = _runtime(init, xs)
    s_c, carry = _leaves(init, rt, what)
    s_x, xl = _leaves(xs, rt, what)
    lens = {t.shape[0] if t.ndim else None for t in xl}
    if None in lens or len(lens) > 1 or (length is not None and lens and lens != {length}):
        raise Error(f"scan: every scanned value needs the same leading length{'' if length is None else f' {length}'}, "
                    f"got {_sig(xl)}", hint="scan slices xs along axis 0; stack them to one length")
    if not xl:
        if length is None:
            raise Error("scan: with no xs, give length=", hint="scan(f, init, None, length=n)")
        xl_run = [Tensor(np.zeros((int(length),), np.int8), runtime=rt)]  # a trip counter's stand-in
    else:
        xl_run = xl
    trips = int(xl_run[0].shape[0])
    fm = _Form(rt)
    d = fm.d
    cp, xp = fm.params(carry), fm.params([x[0] if x.ndim else x for x in xl_run])
    res = fm.trace(f, _unflatten(s_c, cp), _unflatten(s_x, xp[:len(xl)]) if xl else None)
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        raise Error("scan: f must return a pair (carry, y)", hint="return (new_carry, None) when there is no y")
    s_c2, nxt = _leaves(res[0], rt, what)
    s_y, ys = _leaves(res[1], rt, what)
    _check_state(what, carry, nxt, s_c, s_c2, "the carry f returns keeps the structure, dtypes and shapes of init")
    pn = [f"c{d}_{j}" for j in range(len(carry))] + [f"x{d}_{j}" for j in range(len(xl_run))]
    lines, outs = fm.body(cp + xp, pn, nxt + ys)
    unpack = [f"(setf {nm} (nth c{d} {j}))" for j, nm in enumerate(pn[:len(carry)])]
    unpack += [f"(setf {nm} (nth x{d} {j}))" for j, nm in enumerate(pn[len(carry):])]
    init_text = _lst([fm.capture(t.node) for t in carry])
    xs_text = _lst([fm.capture(t.node) for t in xl_run])
    body = " ".join(unpack + lines)
    lam = f"(lambda (c{d} x{d}) {body} (next {_lst(outs[:len(carry)])} {_lst(outs[len(carry):])}))"
    form = f"(scan {lam} {init_text} {xs_text} :reverse {text(bool(reverse))})"
    r = f"r{d}"
    picks = [f"(nth (nth {r} 0) {j})" for j in range(len(carry))] + [f"(nth (nth {r} 1) {j})" for j in range(len(ys))]
    stacked = [Tensor(placeholder((trips,) + tuple(y.shape), y.dtype)) for y in ys]
    got = fm.node(form, r, picks, nxt + stacked) if carry or ys else []
    return _unflatten(s_c, got[:len(carry)]), _unflatten(s_y, got[len(carry):])


def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
    """`jax.lax.cond`: `true_fun(*operands)` when the rank-0 `pred` holds, else `false_fun(*operands)`;
    both give the same structure, dtypes and shapes; only the taken side runs."""
    what = "cond"
    rt = _runtime(pred, operands)
    if not isinstance(pred, Tensor):
        if isinstance(pred, (bool, int, np.bool_, np.integer)) or (isinstance(pred, np.ndarray) and pred.ndim == 0):
            return true_fun(*operands) if bool(pred) else false_fun(*operands)
        raise Error(f"cond: the predicate must be a rank-0 bool tensor, got {type(pred).__name__}")
    if pred.ndim != 0 or (pred.dtype != "bool" and pred.dtype in FLOATS):
        raise Error(f"cond: the predicate must be a rank-0 bool (or integer) tensor, got "
                    f"{pred.dtype}{list(pred.shape)}",
                    hint="reduce it first, e.g. (x > 0).all()")
    p = pred if pred.dtype == "bool" else pred != 0
    s_o, ops = _leaves(operands, rt, what)
    fm = _Form(rt)
    d = fm.d
    ps = fm.params(ops)
    pn = [f"o{d}_{j}" for j in range(len(ops))]
    args = _unflatten(s_o, ps)
    s_t, ta = _leaves(fm.trace(true_fun, *args), rt, what)
    s_f, fa = _leaves(fm.trace(false_fun, *args), rt, what)
    if s_t != s_f or len(ta) != len(fa) or any(a.dtype != b.dtype or a.shape != b.shape for a, b in zip(ta, fa)):
        raise Error(f"cond: true_fun gives ({_sig(ta)}) but false_fun gives ({_sig(fa)})",
                    hint="both branches return the same structure of tensors with the same dtypes and shapes")
    if not ta:
        return _unflatten(s_t, [])
    binds = [f"(setf {nm} {fm.capture(o.node)})" for nm, o in zip(pn, ops)]
    tl, tn = fm.body(ps, pn, ta)
    fl, fn = fm.body(ps, pn, fa)
    pname = fm.capture(p.node)
    form = f"(if {pname} {_progn(binds + tl, _lst(tn))} {_progn(binds + fl, _lst(fn))})"
    r = f"r{d}"
    return _unflatten(s_t, fm.node(form, r, [f"(nth {r} {j})" for j in range(len(ta))], ta))
