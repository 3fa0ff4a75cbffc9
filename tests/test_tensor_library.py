"""Every library composite through `caten.Tensor` / `caten.functional` against the reference.

The cases are the conformance suite's own (caten/conformance/cases.py): for each composite row
its variants (operand layouts incl. broadcasting and a transposed, strided view; compile-time
arguments; each keyword), the dtype it applies to, its input generator (values.generate at the
middle sizes of cases.SIZES) and its reference (the numpy runtime on the case's own source;
runner._reference drops variants the reference rejects). Each variant's source expression
is translated into the Python call a user writes: `(softmax X :axis 0)` becomes
`functional.softmax(x, axis=0)`, a principal-op operator row `(+ a b)` becomes `a + b`, and the
VIEW wrap of the "view" layout becomes `x.permute([1, 0])[1:-1:2]`; each call whose first
argument is a tensor is made a second time as a Tensor method (`x.relu()`; not where torch has the
method's name: there it is torch's spelling, tested by test_torch_habits.py), each binary
operator as the right operand's reflected one (`b.__radd__(a)`). A row's calls are realized
by one program (on llvm; a few rows also on c) and compared with the reference under the
conformance suite's own ULP bounds; for f32 rows also with torch in f64 on the same inputs (the
truth, rounded to f32), through the conformance suite's torch interpreter (torchref.py), for the
rows torch has a counterpart for (82 of 108 today). A composite added to `ops/` is covered with no
edit here (test_a_new_composite_is_covered).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest

from caten import Tensor, functional
from caten.conformance import cases as C
from caten.conformance import runner as R
from caten.conformance.values import NEAR_ONE, ORDINARY, compare, generate, seed_of
from caten.elaborate import library
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.graph import toposort
from caten.ir.ops import Op
from caten.plugin import get as get_runtime
from caten.read.reader import read
from caten.read.sexpr import Kw, Num, SList, Sym
from caten.tensor.methods import OPERATORS, pyname
from caten.tensor.realize import realize
from caten.tensor.torchnames import REGISTRY

CALL = 1  # the sizes of cases.SIZES[1]: M=7 N=13 K=5, B=2 C=3 H=9 W=11 (small, nothing of size 1)
# the first dtype a row's cases elaborate for is tested: f32, else an int, bool, then any
PREFERRED = ("f32", "i32", "bool", "f64")

# Python's operator for each row that is an operator rather than a function of caten.functional
PY_OPERATORS = {"+": operator.add, "-/2": operator.sub, "-/1": operator.neg, "*": operator.mul,
                "/": operator.truediv, "<": operator.lt, "<=": operator.le, ">": operator.gt,
                ">=": operator.ge, "=": operator.eq, "!=": operator.ne}
# ... and the method of the right operand that computes the same (the swapped comparison)
REFLECTED = {"+": "__radd__", "-/2": "__rsub__", "*": "__rmul__", "/": "__rtruediv__", "<": "__gt__",
             "<=": "__ge__", ">": "__lt__", ">=": "__le__", "=": "__eq__", "!=": "__ne__"}

TORCH_DTYPES = {"bool": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
                "u16": "uint16", "u32": "uint32", "u64": "uint64", "f16": "float16", "bf16": "bfloat16",
                "f32": "float32", "f64": "float64", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
                "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz"}

# rows not run here, each with its reason
EXCLUDED: dict[str, str] = {
    "strided-view": "a layout primitive of conv3d's windows with no Tensor method; its cases run in test-runtime",
}

# rows also run on the c runtime (one of each kind: elementwise math, reduction, view, nn, optimizer)
ON_C = ("exp", "sum", "transpose", "conv2d/2", "adam-update", "+")


def _rows() -> dict[str, C.Row]:
    """The conformance rows of the library's composites (overloads as name/ARITY), by name."""
    return {r.name: r for r in C.rows() if r.kind == "composite"}


def composite_rows() -> list[str]:
    return list(_rows())


def _py(form: Any, env: dict[str, Any]) -> Any:
    """A form of a case's expression as a Python value: operands become Tensors, dim symbols
    their sizes, `T` the dtype under test, `[...]` lists; a call becomes the Tensor call."""
    if isinstance(form, Num):
        return form.value
    if isinstance(form, Sym):
        if form.name in env:
            return env[form.name]
        if form.name in ("true", "false"):
            return form.name == "true"
        if form.name == "nil":
            return None
        if T.lookup(form.name) is not None:
            return form.name
        raise AssertionError(f"cannot translate the symbol {form.name}")
    assert isinstance(form, SList), form
    if form.bracket:
        return [_py(x, env) for x in form.items]
    return _call(form, env)


def _call(form: SList, env: dict[str, Any]) -> Any:
    head = form.items[0].name
    args: list[Any] = []
    kw: dict[str, Any] = {}
    items = form.items[1:]
    i = 0
    while i < len(items):
        if isinstance(items[i], Kw):
            kw[items[i].name.replace("-", "_")] = _py(items[i + 1], env)
            i += 2
        else:
            args.append(_py(items[i], env))
            i += 1
    if head == "VIEW":  # the "view" layout: a transposed, strided view, as a user writes one
        (x,) = args
        ((key, val),) = kw.items()
        if key == "permute":
            return x.permute(val)
        assert key == "slice", key
        return x[tuple(slice(*s) for s in val)]
    if head in OPERATORS:
        row = env["__row__"]
        if not env["__method__"]:
            return PY_OPERATORS[row](*args)
        if row not in REFLECTED:
            raise NoMethod
        a, b = args  # the reflected form, called on the right operand: b.__radd__(a) is a + b
        return getattr(b, REFLECTED[row])(a)
    defaults = {k.replace("-", "_"): d for c in library.composites()[head] for k, d, _ in c.keys}
    if "seed" in defaults and "seed" not in kw:  # the case's draw: the library's default seed,
        kw["seed"] = _py(defaults["seed"], env)  # where Python draws from caten's seed stream
    if env["__method__"]:
        if not args or not isinstance(args[0], Tensor) or pyname(head) in REGISTRY:
            raise NoMethod  # a method torch also has is torch's spelling (tests/test_torch_habits.py)
        return getattr(args[0], pyname(head))(*args[1:], **kw)
    return getattr(functional, pyname(head))(*args, **kw)


class NoMethod(Exception):
    """The call's first argument is not a tensor: it has no method form."""


def _case(name: str) -> tuple[Any, list[C.Variant], Any] | None:
    """(dtype, the variants the reference accepts at every size, the reference module)."""
    row = C.build(_rows()[name])
    if not row.variants:
        return None
    rr = R.RowRunner(row, get_runtime("llvm"))
    order = sorted(C.DTYPES, key=lambda d: PREFERRED.index(d.name) if d.name in PREFERRED else len(PREFERRED))
    for dt in order:
        sub = rr.subset(dt)
        refd = None if sub is None else R._reference(rr, sub, dt)
        if refd is not None:
            variants, ref = refd[0], refd[1]
            return dt, variants, ref
    return None


def _inputs(name: str, dt: Any, variants: list[C.Variant], prog: Any) -> dict[str, np.ndarray]:
    """Ordinary values (magnitudes near 1 under a product), not the edge values: where inf meets
    an underflowed product (inf * 0) the result depends on the order of accumulation, which
    belongs to the program's schedule, not to the Tensor API under test."""
    product = any(n.op is Op.REDUCE and n.arg[0] == "mul" for n in toposort(prog.nodes))
    domains = {p.name: p.domain for v in variants for p in v.params}
    sizes = C.SIZES[CALL]
    return {spec.name: generate(spec.dtype, tuple(D.evaluate(d, sizes) for d in spec.shape),
                                seed_of("tensor", name, dt.name, spec.name), NEAR_ONE if product else ORDINARY,
                                domains.get(spec.name, ""))
            for spec in prog.inputs}


def check(name: str, runtime: str) -> int:
    """Run the row's cases through Tensor on `runtime` against the numpy reference, and against
    torch where it has the op; the number of outputs torch checked."""
    case = _case(name)
    assert case is not None, f"{name}: the conformance cases give no case to run"
    dt, variants, ref = case
    prog = ref.all.elaborate({"T": dt})
    arrays = _inputs(name, dt, variants, prog)
    args = [arrays[s.name] for s in prog.inputs]
    wants = ref.all(*args)
    wants = wants if isinstance(wants, tuple) else (wants,)
    first = 0
    results: list[tuple[Tensor, int, str]] = []  # (tensor, index of its reference output, how it was called)
    for v in variants:
        for method in (False, True):
            env: dict[str, Any] = {k: int(n) for k, n in C.SIZES[CALL].items()}
            env.update({"T": dt.name, "__row__": name, "__method__": method})
            env.update({p.name: Tensor(arrays[p.name], runtime=runtime) for p in v.params})
            try:
                out = _py(read(v.expr, "<case>")[0], env)
            except NoMethod:
                continue
            outs = out if isinstance(out, tuple) else (out,)
            assert len(outs) == len(v.outs), f"{v.expr}: {len(outs)} outputs, the reference has {len(v.outs)}"
            how = f"{v.expr} ({v.label}{', as a method' if method else ''}) on {runtime}"
            results += [(t, first + j, how) for j, t in enumerate(outs)]
        first += len(v.outs)
    assert results, f"{name}: no call was made"
    realize([t.node for t, _, _ in results], runtime)  # the row's calls: one program
    kinds = [R.graph_kind([n]) for n in prog.nodes]
    precs = [R.precision([n]) for n in prog.nodes]
    mags = R._magnitudes(ref, args) if "reduce" in kinds else None
    n_in = max((int(np.size(a)) for a in args), default=1)
    truths = _torch_outputs(variants, arrays) if dt.name == "f32" else {}
    for t, j, how in results:
        for oracle, w in (("the numpy reference", wants[j]), ("torch in f64", truths.get(j))):
            if w is None:
                continue
            odt = T.from_numpy(np.asarray(wants[j]).dtype) or dt
            o = compare(t.numpy(), np.asarray(w).astype(wants[j].dtype), odt, kinds[j], precs[j],
                        None if mags is None else mags[j], max(1, n_in // max(1, int(np.size(wants[j])))))
            assert o.ok, f"{how} against {oracle}: {o.reason}"
    return len(truths)


def _more_torch(torch: Any) -> dict[str, Any]:
    """torch counterparts of rows torchref.py (a gradient oracle) leaves out: no gradient, or a
    cast to any dtype (torchref's knows f64 and bool only). Not take/take-along-axis: their cases
    index with floats and out-of-range values (caten truncates, and reads 0 out of range)."""
    F = torch.nn.functional

    def arg(fn: Any) -> Any:
        def go(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
            if axis is None:  # of the flattened tensor; keepdims keeps every axis as 1 (numpy's)
                return fn(x).reshape([1] * x.dim() if keepdims else [])
            return fn(x, axis, keepdim=keepdims)
        return go

    def bcast(fn: Any) -> Any:  # a loss over the broadcast of its operands (torch's wants equal shapes)
        return lambda a, b: fn(*torch.broadcast_tensors(a, b))

    def cast(x: Any, d: str) -> Any:
        if d not in TORCH_DTYPES:  # i4/u4: torch.int4/uint4 have no kernels (a TypeError: no counterpart)
            raise TypeError(f"torch cannot cast to {d}")
        return x.to(getattr(torch, TORCH_DTYPES[d]))

    return {"cast": cast,
            "<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge, "=": torch.eq, "!=": torch.ne,
            "idiv": torch.floor_divide, "argmax": arg(torch.argmax), "argmin": arg(torch.argmin),
            "l1-loss": bcast(F.l1_loss), "bce-with-logits": bcast(F.binary_cross_entropy_with_logits),
            "kl-div": bcast(lambda logp, q: F.kl_div(logp, q, reduction="batchmean"))}


def _torch_outputs(variants: list[C.Variant], arrays: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """A second, independent oracle: each variant's expression evaluated by torch in f64 on the
    same inputs (the conformance suite's torch interpreter, caten/conformance/torchref.py), by the
    index of its output; variants whose op has no torch counterpart there are left out."""
    from caten.conformance import torchref

    if not torchref.available():
        return {}
    import torch

    ops = {**torchref._ops(), **_more_torch(torch)}
    out: dict[int, np.ndarray] = {}
    first = 0
    for v in variants:
        env: dict[str, Any] = {k: int(n) for k, n in C.SIZES[CALL].items()}
        for p in v.params:
            a = torch.tensor(arrays[p.name])
            env[p.name] = a.double() if a.is_floating_point() else a
        try:
            y = torchref._eval(read(v.expr, "<torch>")[0], env, ops)
        except torchref._Missing:
            y = None
        if y is not None:
            ys = y if isinstance(y, (tuple, list)) else (y,)
            out.update({first + j: r.detach().double().numpy() if r.is_floating_point() else r.numpy()
                        for j, r in enumerate(ys)})
        first += len(v.outs)
    return out


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("name", [r for r in composite_rows() if r not in EXCLUDED])
def test_composite_through_tensor(name):
    check(name, "llvm")


@pytest.mark.parametrize("name", ON_C)
def test_composite_through_tensor_on_c(name):
    check(name, "c")


def test_every_composite_is_a_row_and_a_function():
    """The rows are every composite of the library (overloads by arity), and each is callable
    from Python: a function of caten.functional, or an operator."""
    lib = library.composites()
    want = {n if len(d) == 1 else f"{n}/{x.arity}" for n, d in lib.items() for x in d}
    assert set(composite_rows()) == want
    for n in lib:
        if n in OPERATORS:
            assert any(r == n or r.startswith(n + "/") for r in PY_OPERATORS)
        else:
            assert callable(getattr(functional, pyname(n)))
    assert set(EXCLUDED) <= want


def test_a_new_composite_is_covered(monkeypatch):
    """A composite added to the library becomes a row, a function and a method (what importing
    caten.functional and caten.tensor does), and the same machinery checks it: no edit here."""
    from caten.elaborate import elaborator as elab_mod
    from caten.read.program import parse_forms
    from caten.tensor import lazy
    from caten.tensor.methods import functions

    src = '(composite cube-plus ((X{T}[...]) -> (Y{T}[...]) &key (c 1)) "x*x*x + c" (ADD (MUL X (MUL X X)) c))'
    comps = dict(library.composites())
    comps["cube-plus"] = parse_forms(read(src, "<ops>/extra.lisp"), "extra.lisp", True).composites
    monkeypatch.setattr(library, "composites", lambda: comps)
    monkeypatch.setattr(elab_mod, "library_composites", lambda: comps)
    monkeypatch.setattr(lazy, "_ELAB", [])  # the shape-inference elaborator, made with the library it saw
    fn = functions()["cube_plus"]
    monkeypatch.setattr(functional, "cube_plus", fn, raising=False)
    monkeypatch.setattr(Tensor, "cube_plus", fn, raising=False)
    assert "cube-plus" in composite_rows()
    check("cube-plus", "llvm")
    x = np.array([1.5, -2.0], np.float32)
    np.testing.assert_array_equal(Tensor(x).cube_plus(c=2).numpy(), x ** 3 + 2)
