"""The conformance cases, generated from the principal-op table and the `ops/` library.

A *row* is one principal op (`ADD`) or one library composite (`softmax`; overloads of one
name get `name/ARITY`, e.g. `max/1` for the reduction and `max/2` for the elementwise form).
A row's *variants* are small source expressions that call the op on inputs of several
layouts:

    scalar   rank-0 operands (principal ops; composites only when `mat` does not fit)
    vec      [N] (called at N = 1, 13, 129; principal ops and creation composites)
    mat      [M N] (1x1, 7x13, 257x129)   bcast  [M N] with [N]; [M 1] with [1 N] (2+ operands;
                                                 the second form for principal ops only)
    view     operands declared [N M] and fed through a transposing, step-2 slicing VIEW
    literal  the last operand a number (binary principal ops)
    chain    [M K] [K N] ... (only when `mat` does not fit, e.g. matmul)
    4d       [B C H W] (only when `mat` does not fit, e.g. pooling)

Every dimension is a symbol, so each compiled program is called at three sizes (the dynamic
dim case). Compile-time parameters (`shape`, `axes`, `dtype`, `&rest` ...) and keywords
(`:axis`, `:keepdims` ...) get values from small tables keyed by the parameter's name, with
a generic pool for unknown names; a variant that does not elaborate for a dtype is simply
not part of that dtype's case, and a dtype no variant elaborates for is one the op does not
apply to. So adding an op to TABLE, or a composite with ordinary tensor parameters to
`ops/`, adds a row with no edit here. Principal ops that take arguments other than tensors
(CAST, REDUCE, VIEW, CONST, INDEX, RAND, EXTERN, BUFFER) have call templates below.
"""

from __future__ import annotations

import itertools
import sys
import zlib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from caten.errors import Error
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import EXTERNS, TABLE

DTYPES: tuple[DType, ...] = T.ALL
# the order in which a variant's output shape is probed (any dtype it elaborates for will do)
_PROBE_ORDER = ("f32", "i32", "bool", "f64", "i64", "u32", "f16", "bf16", "i8", "u8", "i16", "u16", "u64", "f8e4m3",
                "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "i4", "u4")

# dimension sizes of the three calls of every compiled case: all ones, odd, large
SIZES: tuple[dict[str, int], ...] = (
    {"M": 1, "N": 1, "K": 1, "B": 1, "C": 1, "H": 3, "W": 4, "O": 1},
    {"M": 7, "N": 13, "K": 5, "B": 2, "C": 3, "H": 9, "W": 11, "O": 4},
    {"M": 257, "N": 129, "K": 3, "B": 1, "C": 2, "H": 16, "W": 13, "O": 3},
)


@dataclass(frozen=True)
class Param:
    name: str
    dtype: str  # "T" (the dtype under test) or a dtype name
    dims: tuple[str, ...]
    domain: str = ""


@dataclass
class Variant:
    label: str
    params: list[Param]
    expr: str
    source: bool = False  # no tensor operand: the output dtype must be the dtype under test
    outs: list[str] = field(default_factory=list)  # output dims as source text, set by the probe

    def signature(self, tag: str) -> str:
        ins = " ".join(f"({p.name}{{{p.dtype}}}{_dims(p.dims)})" for p in self.params)
        outs = " ".join(f"(o{tag}_{j}{{{'T' if self.source else f'R{tag}_{j}'}}}{d})" for j, d in enumerate(self.outs))
        return f"({ins} -> {outs})"


def _dims(dims: tuple[str, ...]) -> str:
    return "[" + " ".join(dims) + "]" if dims else ""


@dataclass
class Row:
    name: str
    kind: str  # "principal" | "composite"
    target: str  # the op or composite name as called
    doc: str = ""
    variants: list[Variant] | None = None  # built by `build`
    note: str = ""  # why a row has no case at all


# shapes ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    label: str
    dims: tuple[tuple[str, ...], ...]  # per operand
    wrap: str = "{}"  # how an operand is fed to the op
    text: str | None = None  # the shape as a list literal, for shape-taking parameters


def _base_shapes(k: int, full: bool = True) -> list[Shape]:
    """The generic layouts; composites (`full` False) get fewer: their graphs are principal ops,
    whose layouts the principal rows already cover, and every layout costs a compile."""
    out = ([Shape("scalar", ((),) * k, text="[]"), Shape("vec", (("N",),) * k, text="[N]")] if full else []) + \
        [Shape("mat", (("M", "N"),) * k, text="[M N]")]
    if k >= 2:
        out.append(Shape("bcast", (("M", "N"),) + (("N",),) * (k - 1)))
        if full:
            out.append(Shape("bcast2", (("M", "1"), ("1", "N")) + (("N",),) * (k - 2)))
    if k >= 1:
        out.append(Shape("view", (("N", "M"),) * k, "(VIEW (VIEW {} :permute [1 0]) :slice [[1 -1 2]])"))
    return out


def _fallback_shapes(k: int) -> list[Shape]:
    syms = ["M", "K", "N", "H", "W", "C"]
    out = [Shape("unit", (("1", "N"),) * max(k, 1), text="[1 N]"), Shape("scalar", ((),) * max(k, 1), text="[]")]
    if k >= 2:
        out.append(Shape("chain", tuple((syms[i], syms[i + 1]) for i in range(k))))
    out.append(Shape("4d", (("B", "C", "H", "W"),) * max(k, 1), text="[B C H W]"))
    return out


# values for compile-time parameters, keyed by the parameter's name --------------------------
def _param_candidates(pname: str, shape: Shape, has_tensors: bool) -> list[tuple[str, str]]:
    """(source text, input domain) choices for a positional non-tensor parameter."""
    txt = shape.text
    rank = len(shape.dims[0]) if shape.dims else 0
    dims = list(shape.dims[0]) if shape.dims else []
    hints: dict[str, list[str]] = {
        "shape": ([txt] if txt else []) if not has_tensors else
        ["[-1]"] + ([f"[{' '.join(reversed(dims))}]", f"[3 {' '.join(dims)}]"] if txt and dims else []),
        "axes": [f"[{' '.join(str(i) for i in reversed(range(rank)))}]"],
        "axis": ["0", "-1"],
        "widths": ["[[1 2]]", "[[0 1] [2 0]]"],
        "v": ["3", "2.5", "-2"],
        "n": [dims[-1] if dims else "5"],
        "p": ["0.25", "0"],  # a probability (dropout)
    }
    if pname == "dtype":
        return [(d.name, "castable" if d.is_int else "") for d in DTYPES]
    if pname in hints:
        return [(t, "") for t in hints[pname] if t]
    pool = ["2", "2.5", "[-1]", txt or "", dims[-1] if dims else "3"]
    return [(t, "") for t in dict.fromkeys(pool) if t]


_REST = {"specs": ["[1 -1 2]", "[0 -1] [1 -1 2]"], "cs": ["2 -1 3", "0.5 -1.5 2.0"], "xs": ["*tensors"]}
_REST_GENERIC = ["*tensors", "2 -1 3", "0.5 -1.5 2.0", "[1 -1 2]"]
# keyword variants, one keyword at a time, on the main shape only
_KEYS: dict[str, list[str]] = {"axis": ["0", "1"], "keepdims": ["true"], "seed": ["7"], "value": ["5"],
                               "stride": ["2"], "padding": ["1"], "dilation": ["2"], "kernel": ["3"]}

# op-specific layouts where no generic shape fits (convolution needs a small concrete kernel)
EXTRA: dict[str, list[tuple[str, tuple[tuple[str, ...], ...], str]]] = {
    "linear": [("linear", (("M", "K"), ("K", "N"), ("N",)), "")],
    "conv2d/2": [("3x3", (("B", "C", "H", "W"), ("O", "C", "3", "3")), ""),
                 ("3x3 pad stride", (("B", "C", "H", "W"), ("O", "C", "3", "3")), ":padding 1 :stride 2"),
                 ("dilated", (("B", "C", "H", "W"), ("O", "C", "2", "2")), ":dilation 2"),
                 ("groups", (("B", "4", "H", "W"), ("6", "2", "3", "3")), ":groups 2")],
    "conv2d/3": [("3x3 bias", (("B", "C", "H", "W"), ("O", "C", "3", "3"), ("O",)), ""),
                 ("pad bias", (("B", "C", "H", "W"), ("O", "C", "3", "3"), ("O",)), ":padding 1")],
    "take": [("rows", (("M", "N"), ("K",)), ":axis 0"), ("cols by [K K]", (("M", "N"), ("K", "K")), ":axis 1")],
    "take-along-axis": [("cols", (("M", "N"), ("M", "K")), ":axis 1"), ("rows", (("M", "N"), ("K", "N")), "")],
    "gather": [("cols", (("M", "N"), ("M", "K")), ":axis 1"), ("rows cut", (("M", "N"), ("K", "5")), "")],
    "scatter-count": [("rows", (("M", "N"), ("K", "N")), ""), ("cols cut", (("M", "N"), ("3", "K")), ":axis 1")],
    "scatter-extreme-vjp": [("rows", (("M", "N"), ("K", "N"), ("K", "N"), ("M", "N"), ("M", "N")), "")],
    # (a strided view reads whatever its size and strides reach: only layouts that stay inside the source)
    "strided-view": [("column", (("M", "N"),), ":size [M] :stride [N]"),
                     ("windows", (("M", "N"),), ":size [(- M 1) 2] :stride [N 1] :offset 1")],
    # (the FFT is unrolled over a length known at compile time: a concrete transformed axis)
    "fft": [("M x 12", (("M", "12"), ("M", "12")), ""),
            ("7 x N axis 0 n 5 inverse", (("7", "N"), ("7", "N")), ":axis 0 :n 5 :inverse true :norm-exp 0.5")],
    "rfft": [("M x 12", (("M", "12"),), ""), ("7 x N axis 0 n 9", (("7", "N"),), ":axis 0 :n 9 :norm-exp 1"),
             ("M x 64 ortho", (("M", "64"),), ":norm-exp 0.5")],
    "irfft": [("M x 7", (("M", "7"), ("M", "7")), ""), ("M x 5 n 9", (("M", "5"), ("M", "5")), ":n 9 :norm-exp 0.5"),
              ("M x 33", (("M", "33"), ("M", "33")), "")],
    "fft-last": [("M x 48", (("M", "48"), ("M", "48")), ""), ("M x 7 inverse", (("M", "7"), ("M", "7")), ":sign 1")],
    "fft-normed": [("1 x M x 12", (("1", "M", "12"), ("1", "M", "12")), "")],
    # (static rows: with a symbolic M the c runtime's f16 build of the chirp-z transform took 78 s of
    # the C compiler's time, past the 60 s a case may take)
    "fft-bluestein": [("3 x 7", (("3", "7"), ("3", "7")), ""), ("2 x 5 inverse", (("2", "5"), ("2", "5")), ":sign 1")],
    "fft-twiddle-line": [("long line", (("M", "N"),), ":count 5000 :n 10000 :sign 1")],
    "fft-real-packed": [("M x 64", (("M", "64"),), ""), ("M x 34 scaled", (("M", "34"),), ":scale 0.5")],
    "fft-real-unpacked": [("M x 33", (("M", "33"), ("M", "33")), ""), ("M x 18", (("M", "18"), ("M", "18")), "")],
    # (K and the blocks static: 40 codes in 2 blocks of 32, the last one padded)
    "matmul-nbits": [("4-bit", (("M", "40"), ("N", "2", "16"), ("N", "2")), ""),
                     ("8-bit", (("M", "40"), ("N", "2", "32"), ("N", "2")), ":bits 8")],
    "nbits-codes": [("4-bit", (("N", "3", "8"), ()), ""), ("8-bit", (("N", "3", "8"), ()), ":bits 8")],
    "nbits-per-step": [("blocks", (("6",),), ":n 2 :kb 3 :j2 4")],
}
for _op in ("scatter", "scatter-add", "scatter-max", "scatter-min", "scatter-mul", "scatter-extreme"):
    EXTRA[_op] = [("rows", (("M", "N"), ("K", "N"), ("K", "N")), ""),
                  ("cols cut", (("M", "N"), ("3", "K"), ("3", "K")), ":axis 1")]
# rows that get only their EXTRA layouts: an index tensor as large as the data would compare every
# index with every position (O(size^2) memory at the 257x129 size)
EXTRA_ONLY = {"take", "take-along-axis", "gather", "scatter", "scatter-add", "scatter-max", "scatter-min",
              "scatter-mul", "scatter-extreme", "scatter-count",
              "scatter-extreme-vjp", "strided-view", "matmul-nbits", "nbits-codes", "nbits-per-step"}


# principal ops -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Template:
    label: str
    expr: str  # {0} {1} ... operands, {shape} the shape list, {dt} a dtype
    nparams: int = 1
    source: bool = False  # the operand is only a dummy that binds T and the dims
    shapes: tuple[tuple[str, ...], ...] | None = None  # fixed operand layouts instead of the generic ones
    domain: str = ""


def _principal_templates(op: str) -> list[Template] | None:
    if op == "CAST":
        return [Template(f"->{d.name}", f"(CAST {{0}} {d.name})", domain="castable" if d.is_int else "")
                for d in DTYPES]
    if op == "SORT":
        return [Template("axis 0", "(SORT {0} :axis 0)"), Template("axis -1 descending", "(SORT {0} :descending true)")]
    if op == "BITCAST":  # (each dtype column runs the targets of its width)
        return [Template(f"->{d}", f"(BITCAST {{0}} {d})") for d in ("i8", "u8", "i16", "u16", "i32", "u32", "f32",
                                                                      "i64", "u64", "f64")]
    if op == "REDUCE":
        return [Template("add axis 0", "(REDUCE {0} :op add :axis 0)"),
                Template("add all", "(REDUCE {0} :op add)"),
                Template("mul axis 1 keepdims", "(REDUCE {0} :op mul :axis 1 :keepdims true)"),
                Template("max all", "(REDUCE {0} :op max)"),
                Template("max axis [1 0]", "(REDUCE {0} :op max :axis [1 0])"),
                Template("add axis -1", "(REDUCE {0} :op add :axis -1)")]
    if op == "VIEW":
        return [Template("permute", "(VIEW {0} :permute [1 0])"), Template("reshape", "(VIEW {0} :reshape [-1])"),
                Template("expand", "(VIEW {0} :expand [2 M N])"), Template("pad", "(VIEW {0} :pad [[1 2] [0 1]])"),
                Template("flip", "(VIEW {0} :flip 0)"), Template("slice", "(VIEW {0} :slice [[1 -1 2] [0 -2]])"),
                Template("shrink", "(VIEW {0} :shrink [[0 1]])"), Template("unsqueeze", "(VIEW {0} :unsqueeze 1)")]
    if op == "BUFFER":
        return [Template("identity", "{0}")]
    if op == "COPY":
        return [Template("copy", "(COPY {0})"), Template("copy of a flip", "(COPY (VIEW {0} :flip 0))")]
    if op == "CONST":
        return [Template(f"const {v}", f"(CONST {v} :dtype T :shape {{shape}})", source=True)
                for v in ("3", "-1", "2.5", "0", "inf", "nan", "N")]
    if op == "INDEX":
        return [Template("axis 0", "(INDEX {shape} :axis 0 :dtype T)", source=True),
                Template("axis -1", "(INDEX {shape} :axis -1 :dtype T)", source=True)]
    if op == "GATHER":  # (half the generated indices are small: in range, negative, or past the end)
        return [Template("rows", "(GATHER {0} {1} :axis 0)", 2, shapes=(("M", "N"), ("K", "N"))),
                Template("cols", "(GATHER {0} {1} :axis 1)", 2, shapes=(("M", "N"), ("M", "K")))]
    if op == "SCATTER":  # (the index a cast of T's values: small ones, in range, negative or past the end)
        rows, cols = (("M", "N"), ("K", "N"), ("K", "N")), (("M", "N"), ("M", "K"), ("M", "K"))
        return [Template(f"{how} {o}", f"(SCATTER {{0}} (CAST {{1}} i64) {{2}} :axis {ax} :op {o})", 3, shapes=sh)
                for o, (how, ax, sh) in zip(("add", "set", "max", "min", "mul"),
                                            [("rows", 0, rows), ("cols", 1, cols)] * 3)]
    if op == "RAND":
        return [Template("seed 1", "(RAND {shape} :seed 1)", source=True),
                Template("seed 2**40+3", "(RAND {shape} :seed 1099511627779)", source=True),
                # a seed known at run time: the operand, a u32 scalar, keys the stream as it is and as an i64
                Template("tensor seed", "(RAND [M N] :seed {1})", 2, source=True, shapes=(("M", "N"), ())),
                Template("tensor seed i64", "(RAND [M N] :seed (XOR (CAST {1} i64) -4294967296))", 2, source=True,
                         shapes=(("M", "N"), ()))]
    if op == "LOOP":  # (written with the forms; MAX holds for every dtype: a running max, or or-scan)
        mn = (("M", "N"),)
        return [Template("fori", "(fori (i 0 3) ((a {0})) (next (MAX a (VIEW a :flip 0))))", shapes=mn),
                Template("while", "(nth (while ((a {0}) (k 0)) (CMPLT k 2) "
                         "(next (MAX a (VIEW a :flip 1)) (ADD k 1))) 0)", shapes=mn),
                Template("scan", "(nth (scan (lambda (c x) (next (MAX c x) (MAX c (VIEW x :flip 0)))) "
                         "(VIEW (VIEW {0} :shrink [[0 1]]) :reshape [N]) {0}) 1)", shapes=mn),
                Template("scan reversed axis 1", "(nth (scan (lambda (c x) (next (MUL c x) (ADD c x))) "
                         "(VIEW (VIEW {0} :shrink [[0 M] [0 1]]) :reshape [M]) {0} :axis 1 :reverse true) 1)",
                         shapes=mn)]
    if op == "IF":
        pred = "(VIEW (REDUCE (CAST {0} f64) :op max) :reshape [])"
        return [Template("taken", f"(if (CMPLT {pred} 0.5) {{0}} (VIEW {{0}} :flip 0))", shapes=(("M", "N"),)),
                Template("two results", f"(nth (if (CMPLT 0.5 {pred}) (list {{0}} (MAX {{0}} (VIEW {{0}} :flip 1))) "
                         "(list (VIEW {0} :flip 0) {0})) 1)", shapes=(("M", "N"),))]
    if op == "EXTERN":
        return [Template(name, f'(EXTERN "{name}" {{0}} {{1}} :shape [M N])', 2, shapes=(("M", "K"), ("K", "N")))
                for name in EXTERNS if name == "matmul"]
    return None


# building ------------------------------------------------------------------------------------
def in_slice(name: str, part: str | None) -> bool:
    """Whether row `name` is in slice "K/N": its name's CRC-32 is K mod N (stable as rows come and go)."""
    if not part:
        return True
    k, n = (int(v) for v in part.split("/"))
    return zlib.crc32(name.encode()) % n == k


def rows(pattern: str | None = None, part: str | None = None) -> list[Row]:
    """Every row of the suite (without variants): the principal ops, then the library; with `part`
    "K/N", only the rows of that slice."""
    from caten.elaborate.library import composites

    out = [Row(op.value, "principal", op.value, info.doc) for op, info in TABLE.items()]
    for name, defs in sorted(composites().items()):
        for d in defs:
            out.append(Row(name if len(defs) == 1 else f"{name}/{d.arity}", "composite", name, d.doc))
    if pattern:
        out = [r for r in out if fnmatchcase(r.name, pattern)]
    return [r for r in out if in_slice(r.name, part)]


class _Namer:
    def __init__(self) -> None:
        self.i = 0

    def params(self, dims: tuple[tuple[str, ...], ...], dtypes: list[str], domain: str = "") -> list[Param]:
        self.i += 1
        return [Param(f"x{self.i}_{j}", dt, d, domain) for j, (d, dt) in enumerate(zip(dims, dtypes))]


def build(row: Row) -> Row:
    """Fill in the row's variants (each probed: its output shapes known, or dropped)."""
    if row.variants is not None:
        return row
    try:
        row.variants = _principal_variants(row) if row.kind == "principal" else _composite_variants(row)
    except Error as e:  # pragma: no cover - a library that does not load at all
        row.variants, row.note = [], f"cannot build cases: {e.message if hasattr(e, 'message') else e}"
    if not row.variants and not row.note:
        row.note = "no case template fits its signature"
    return row


def _probe_all(cands: list[Variant]) -> list[Variant]:
    return [v for v in cands if probe(v)]


def _principal_variants(row: Row) -> list[Variant]:
    info = TABLE[next(o for o in TABLE if o.value == row.target)]
    tmpls = _principal_templates(row.target)
    namer = _Namer()
    if tmpls is None:
        k = info.arity
        if k <= 0:
            return []
        args = " ".join(f"{{{j}}}" for j in range(k))
        tmpls = [Template("", f"({row.target} {args})", k)]
        if k == 2:
            tmpls.append(Template("literal", f"({row.target} {{0}} 2)", 1))
    patterns = lambda k: [["T"] * k] + ([["bool"] + ["T"] * (k - 1)] if k >= 3 else [])  # noqa: E731
    out: list[Variant] = []
    main: Shape | None = None
    for ti, t in enumerate(tmpls):
        if t.shapes is not None:
            for pat in patterns(t.nparams):
                ps = namer.params(t.shapes, pat, t.domain)
                out += _probe_all([Variant(t.label, ps, t.expr.format(*(p.name for p in ps)), t.source)])
            continue
        shapes = _base_shapes(t.nparams) if ti == 0 else [main] if main else []
        for sh in shapes:
            if t.source and sh.text is None:
                continue
            for pat in patterns(t.nparams):
                ps = namer.params(sh.dims, pat, t.domain)
                ops = [sh.wrap.format(p.name) for p in ps]
                expr = t.expr.replace("{shape}", sh.text or "").format(*ops)
                label = f"{sh.label} {t.label}".strip() + (" (bool first)" if pat[0] != "T" else "")
                got = _probe_all([Variant(label, ps, expr, t.source)])
                out += got
                if got and ti == 0 and sh.label == "mat":
                    main = sh
        if ti == 0 and main is None:
            for sh in _fallback_shapes(t.nparams):
                ps = namer.params(sh.dims, patterns(t.nparams)[0], t.domain)
                expr = t.expr.replace("{shape}", sh.text or "").format(*(p.name for p in ps))
                got = _probe_all([Variant(f"{sh.label} {t.label}".strip(), ps, expr, t.source)])
                out += got
                if got and main is None:
                    main = sh
    return out


def _composite_variants(row: Row) -> list[Variant]:
    from caten.elaborate.library import composites

    defs = composites()[row.target]
    cdef = defs[0] if len(defs) == 1 else next(d for d in defs if f"{row.target}/{d.arity}" == row.name)
    tparams = [p for p in cdef.params if p.tensor]
    key_names = [k for k, _, _ in cdef.keys]
    rest_cands = ([] if cdef.rest is None else _REST.get(cdef.rest, _REST_GENERIC))
    namer = _Namer()
    out: list[Variant] = []

    def make(sh: Shape, combo: tuple[tuple[str, str], ...], rest: str | None, keys: str, label: str,
             dims: tuple[tuple[str, ...], ...] | None = None) -> Variant | None:
        nt = len(tparams) + (2 if rest == "*tensors" else 0)
        ddims = dims if dims is not None else sh.dims
        if nt == 0:  # a creation op: one dummy operand binds T and the dims
            if sh.text is None:
                return None
            ps = namer.params((sh.dims[0] if sh.dims else (),), ["T"])
        else:
            if len(ddims) < nt:
                ddims = tuple(ddims) + (ddims[-1],) * (nt - len(ddims))
            dts = [p.dtype if T.lookup(p.dtype) else "T" for p in tparams] + ["T"] * (nt - len(tparams))
            domain = next((d for _, d in combo if d), "")
            ps = namer.params(tuple(ddims[:nt]), dts, domain)
        wrap = sh.wrap if dims is None else "{}"
        args, ti, ci = [], 0, 0
        for p in cdef.params:
            if p.tensor:
                args.append(wrap.format(ps[ti].name))
                ti += 1
            else:
                args.append(combo[ci][0])
                ci += 1
        if rest == "*tensors":
            args += [wrap.format(p.name) for p in ps[len(tparams):]]
        elif rest is not None:
            args.append(rest)
        kw = (" :dtype T" if "dtype" in key_names and nt == 0 else "") + (" " + keys if keys else "")
        expr = f"({row.target} {' '.join(args)}{kw})"
        return Variant(label, ps, expr, source=nt == 0)

    def combos(sh: Shape) -> list[tuple[tuple[str, str], ...]]:
        lists = [_param_candidates(p.name, sh, bool(tparams) or bool(rest_cands)) for p in cdef.params
                 if not p.tensor]
        return list(itertools.product(*lists)) if all(lists) else []

    def shape_variants(sh: Shape, first_only: bool) -> list[Variant]:
        got = []
        cs = combos(sh)
        for combo in cs:
            for rest in rest_cands or [None]:
                desc = " ".join([c for c, _ in combo] + ([rest] if rest and rest != "*tensors" else []))
                v = make(sh, combo, rest, "", f"{sh.label} {desc}".strip())
                if v is not None and probe(v):
                    got.append(v)
                    if first_only:
                        return got
        return got

    k = max(len(tparams), 1 if rest_cands and "*tensors" in rest_cands else 0)
    main: Shape | None = None
    generic = [] if row.name in EXTRA_ONLY else _base_shapes(k, full=False) if k else _base_shapes(1)[:3]
    for sh in generic:  # creation ops: [], [N], [M N]
        got = shape_variants(sh, first_only=True)
        out += got
        if got and sh.label == "mat":
            main = sh
    if main is None and row.name not in EXTRA_ONLY:
        for sh in _fallback_shapes(k) if k else []:
            got = shape_variants(sh, first_only=True)
            out += got
            if got:
                main = sh
                break
    if main is not None:
        # every compile-time parameter value and &rest form, then each keyword, on the main shape
        seen = {v.label for v in out}
        out += [v for v in shape_variants(main, first_only=False) if v.label not in seen]
        base = next((c for c in combos(main)), ())
        for kname in key_names:
            for val in _KEYS.get(kname, []):
                v = make(main, base, (rest_cands or [None])[0], f":{kname} {val}", f"{main.label} :{kname} {val}")
                if v is not None and probe(v):
                    out.append(v)
    for label, dims, keys in EXTRA.get(row.name, []):
        v = make(Shape(label, dims), (), None, keys, label, dims)
        if v is not None and probe(v):
            out.append(v)
    return out


# the probe: elaborate one variant to learn its output shapes ---------------------------------
def probe(v: Variant) -> bool:
    """Find the variant's output shapes by elaborating it for some dtype; False if it
    elaborates for none (the variant does not fit the op)."""
    for name in _PROBE_ORDER:
        try:
            shapes = _elaborate_outputs(v, T.lookup(name))
        except Error:
            continue
        except (RecursionError, ValueError, TypeError, KeyError, IndexError, AssertionError):
            continue
        v.outs = [_dims(tuple(str(d) for d in s)) for s in shapes]
        return bool(v.outs)
    return False


def _elaborate_outputs(v: Variant, dt: DType) -> list[tuple]:
    """Evaluate the variant's expression with its operands bound, as the elaborator does
    for a top-level composite, and return the shapes of the values it gives."""
    from caten.elaborate.elaborator import Elaborator, Ret
    from caten.elaborate.values import Lit, Tensor
    from caten.ir import build as B
    from caten.read.program import load_unit_text

    src = f"(composite probe ({' '.join(f'({p.name}{{{p.dtype}}}{_dims(p.dims)})' for p in v.params)} -> (o{{U}})) " \
          f"{v.expr})"
    cdef = load_unit_text(src, "<conformance>").composites[0]
    binds: dict[str, Any] = {}
    syms: set[str] = set()
    for i, p in enumerate(v.params):
        pdt = T.lookup(p.dtype) or dt
        shape = tuple(int(d) if d.lstrip("-").isdigit() else D.sym(d) for d in p.dims)
        syms |= {d for d in p.dims if not d.lstrip("-").isdigit()}
        binds[p.name] = Tensor(B.buffer(pdt, shape, i, p.name))
    for s in syms:
        binds[s] = Lit(D.sym(s), "dim")
    binds["T"] = dt
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        res = Elaborator({}).evaluate(cdef.body, binds, cdef)
    finally:
        sys.setrecursionlimit(old)
    vals = res.values if isinstance(res, Ret) else list(res) if isinstance(res, tuple) else [res]
    out = []
    for r in vals:
        if isinstance(r, Tensor):
            if v.source and r.dtype != dt:
                raise Error(f"gives {r.dtype}, not {dt}")
            out.append(tuple(r.shape))
        elif isinstance(r, Lit):
            out.append(())
        else:
            raise Error("not a tensor")
    return out


def source_of(variants: list[Variant], tag_of: dict[int, str]) -> str:
    """One composite `v<tag>` per variant plus `all`, which returns every variant's outputs."""
    lines = []
    for v in variants:
        t = tag_of[id(v)]
        body = v.expr if len(v.outs) < 2 else f"(setf y{t} {v.expr}) (return {_spread(v, t)})"
        lines.append(f"(composite v{t} {v.signature(t)} {body})")
    ins = " ".join(f"({p.name}{{{p.dtype}}}{_dims(p.dims)})" for v in variants for p in v.params)
    outs = " ".join(f"(o{tag_of[id(v)]}_{j}{{{'T' if v.source else f'R{tag_of[id(v)]}_{j}'}}}{d})"
                    for v in variants for j, d in enumerate(v.outs))
    # a call with several outputs (an optimizer step's W' M' V') is bound first, then spread
    binds = "".join(f"(setf y{tag_of[id(v)]} {v.expr})\n  " for v in variants if len(v.outs) > 1)
    body = " ".join(v.expr if len(v.outs) < 2 else _spread(v, tag_of[id(v)]) for v in variants)
    lines.append(f"(composite all ({ins} -> {outs})\n  {binds}(return {body}))")
    return "\n".join(lines) + "\n"


def _spread(v: Variant, tag: str) -> str:
    return " ".join(f"(nth y{tag} {j})" for j in range(len(v.outs)))
