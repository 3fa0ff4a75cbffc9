"""Gradient cases for `caten test-runtime`, derived from the forward cases (no list of ops).

Every forward variant of a row (cases.py: scalar, [N], [M N], broadcasting, a transposed and
strided view, keyword variants ...) becomes a gradient variant when the dtype facts allow one:

- a principal row only if its TABLE entry has a `vjp` (the others pass no gradient by design);
- at least one tensor parameter whose dtype follows T or is f64 (the ones differentiated: `:wrt`
  every such parameter) and at least one float output (comparisons, argmax, casts to integers
  give none);
- the variant's reference graph at T = f64 computes in f64 throughout: a float node of a
  narrower dtype (a cast to f16, a parameter fixed at f32) rounds, and finite differences of a
  rounded function say nothing about its gradient.

Each variant's loss is `sum_j sum(y_j * R_j)` over its float outputs y_j, R_j a fixed random
tensor shaped like y_j (so non-scalar outputs are covered); `value-and-grad` differentiates it
with respect to every float parameter. One source per (row, dtype) holds the loss composites
`l<tag>` and `all`, which returns every variant's loss and gradients: one compile per cell, as
for the forward cases. A new op in TABLE or composite in `ops/` adds its gradient row with no
edit here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from caten.conformance import cases as C
from caten.errors import Error
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.graph import toposort
from caten.ir.ops import TABLE, Op

GRAD_DTYPES: tuple[DType, ...] = (T.f32, T.f64)
# the dimension sizes per dtype column: small (finite differences cost two loss evaluations per
# element), unequal, and large enough that the strided view keeps elements (M = 5: rows 1, 3).
# Both columns use the same sizes, so they share one reference (the forward cases vary sizes).
_SIZES = {"M": 5, "N": 3, "K": 2, "B": 1, "C": 2, "H": 5, "W": 4, "O": 2}
SIZES: dict[str, dict[str, int]] = {"f32": _SIZES, "f64": _SIZES}


@dataclass
class GradVariant:
    v: C.Variant
    tag: str
    wrt: list[C.Param]  # the float parameters differentiated
    outs: list[int]  # indices of the float outputs the loss reads
    out_dtypes: dict[str, list[DType]]  # per dtype name: those outputs' dtypes
    shapes: list[tuple]  # those outputs' shapes (dims, evaluated per call)


@dataclass
class GradRow:
    row: C.Row
    variants: list[GradVariant]
    note: str = ""  # why a row has no gradient case (listed in the report)
    dropped: dict[str, str] = field(default_factory=dict)  # variant expression -> why it has no reference


def _float_param(p: C.Param) -> bool:
    dt = T.lookup(p.dtype)
    return p.dtype == "T" or (dt is not None and dt.is_float)


def derive(row: C.Row) -> GradRow:
    """The gradient variants of a (built) forward row, or a note saying why there are none."""
    import caten

    C.build(row)
    if row.kind == "principal":
        op = next(o for o in TABLE if o.value == row.target)
        if TABLE[op].vjp is None:
            return GradRow(row, [], "no vjp in the op table (passes no gradient)")
    cands = [v for v in row.variants or [] if not v.source and any(_float_param(p) for p in v.params)]
    if not cands:
        return GradRow(row, [], "no float tensor parameter")
    tags = {id(v): str(i) for i, v in enumerate(row.variants or [])}
    try:
        mod = caten.loads(C.source_of(cands, tags), runtime="numpy", opt_level=0, use_cache=False)
    except Error as e:  # pragma: no cover - the forward suite reports a broken case
        return GradRow(row, [], f"the forward case does not load: {e.message}")
    out: list[GradVariant] = []
    why = "no float output"
    for v in cands:
        fixed = [T.lookup(p.dtype) for p in v.params if _float_param(p) and p.dtype != "T"]
        if any(d != T.f64 for d in fixed):
            why = "a parameter fixed below f64 (no f64 reference)"
            continue
        comp = getattr(mod, f"v{tags[id(v)]}")
        try:
            ref = comp.elaborate({"T": T.f64})
        except Error:
            continue
        outs = [j for j, n in enumerate(ref.nodes) if n.dtype.is_float]
        if not outs:
            continue
        if any(n.op is Op.LOOP and n.arg[0].runtime_trips for n in toposort(ref.nodes)):
            why = "a loop with a trip count known only at run time (no reverse mode, as in JAX)"
            continue
        if any(n.dtype.is_float and n.dtype != T.f64 for n in toposort(ref.nodes)):
            why = "computes below f64 at T = f64 (no f64 reference)"
            continue
        dts: dict[str, list[DType]] = {}
        for dt in GRAD_DTYPES:
            try:
                nodes = comp.elaborate({"T": dt}).nodes
            except Error:
                continue
            if all(nodes[j].dtype.is_float for j in outs):
                dts[dt.name] = [nodes[j].dtype for j in outs]
        if dts:
            out.append(GradVariant(v, tags[id(v)], [p for p in v.params if _float_param(p)], outs, dts,
                                   [tuple(ref.nodes[j].shape) for j in outs]))
    return GradRow(row, out, "" if out else why)


def _concrete(dims: tuple, sizes: dict[str, int]) -> str:
    from caten.ir import dims as D

    vals = [int(d) if isinstance(d, str) and d.lstrip("-").isdigit() else
            D.evaluate(D.sym(d) if isinstance(d, str) else d, sizes) for d in dims]
    return "[" + " ".join(str(v) for v in vals) + "]" if vals else ""


def r_name(gv: GradVariant, k: int) -> str:
    return f"r{gv.tag}_{k}"


def params_of(gv: GradVariant, dt: DType, sizes: dict[str, int]) -> list[tuple[str, str, str]]:
    """(name, dtype, dims text) of the loss's parameters: the variant's, then the R tensors."""
    ps = [(p.name, p.dtype, _concrete(p.dims, sizes)) for p in gv.v.params]
    return ps + [(r_name(gv, k), d.name, _concrete(shp, sizes))
                 for k, (shp, d) in enumerate(zip(gv.shapes, gv.out_dtypes[dt.name]))]


def loss_source(gv: GradVariant, dt: DType, sizes: dict[str, int]) -> str:
    """`l<tag>`: the variant's loss, sum(y * R) over its float outputs, as a `dt` scalar."""
    multi = len(gv.v.outs) > 1
    terms = []
    for k, (j, d) in enumerate(zip(gv.outs, gv.out_dtypes[dt.name])):
        y = f"(nth y {j})" if multi else "y"
        s = f"(sum (MUL {y} {r_name(gv, k)}))"
        terms.append(s if d == dt else f"(CAST {s} {dt.name})")
    body = terms[0] if len(terms) == 1 else f"(+ {' '.join(terms)})"
    sig = " ".join(f"({n}{{{d}}}{dims})" for n, d, dims in params_of(gv, dt, sizes))
    # dimension symbols the expression names (`:shape [M N]`) are bound to the call's sizes
    toks = set(re.findall(r"[A-Za-z_][A-Za-z0-9_-]*", gv.v.expr))
    dims = "".join(f"(setf {k} {v})\n  " for k, v in sizes.items() if k in toks)
    return f"(composite l{gv.tag} ({sig} -> (L{{{dt.name}}}))\n  {dims}(setf y {gv.v.expr})\n  {body})"


def source(variants: list[GradVariant], dt: DType, sizes: dict[str, int]) -> str:
    """The loss composites and `all`: per variant, its loss then d(loss)/d(each wrt parameter).
    The dims are concrete: the view transpose cannot yet place a strided slice of a symbolic
    axis (caten/autodiff/views.py `_check_fits` cannot prove its reach fits), and one size per
    dtype keeps the compile count at one per cell."""
    lines = [loss_source(gv, dt, sizes) for gv in variants]
    ins = " ".join(f"({n}{{{d}}}{dims})" for gv in variants for n, d, dims in params_of(gv, dt, sizes))
    outs, body, rets = [], [], []
    for gv in variants:
        outs.append(f"(L{gv.tag}{{{dt.name}}})")
        outs += [f"(G{gv.tag}_{p.name}{{{p.dtype}}}{_concrete(p.dims, sizes)})" for p in gv.wrt]
        args = " ".join(n for n, _, _ in params_of(gv, dt, sizes))
        body.append(f"  (setf q{gv.tag} (value-and-grad l{gv.tag} {args} :wrt [{' '.join(p.name for p in gv.wrt)}]))")
        rets += [f"(nth q{gv.tag} {k})" for k in range(len(gv.wrt) + 1)]
    lines.append(f"(composite all ({ins} -> {' '.join(outs)})\n" + "\n".join(body) + f"\n  (return {' '.join(rets)}))")
    return "\n".join(lines) + "\n"
