"""Random well-typed programs, one per seed (`generate(seed)` always gives the same one), and
their caten source text (`render`).

A program draws 1-3 inputs (f32 f64 i32 i64 i8 u8 bool, rank 1-4, literal or symbolic dims, at
times a `where`-defined dim or an empty one), then 2-9 bindings of elementwise ops, comparisons, `where`, casts,
reductions over one or several axes, every movement op (permute, reshape merges/splits/unit
axes, expand, slice, flip, pad, concat), matmul, weight-only 4/8-bit matmul (`matmul-nbits` of a
float input against codes, scales and zero points computed in the program), `dotimes`, and
loops and branches (fori, while, scan, nested foris, if: their bodies with views and reductions);
its outputs are the last value and at times another one, or a view of an input.
"""

from __future__ import annotations

import itertools
import random

from caten.fuzz.types import (
    BINARY,
    COMPARE,
    FLOATS,
    INTS,
    UNARY,
    Invalid,
    Prog,
    Stmt,
    Ty,
    infer,
    infer_stmt,
    is_float,
    kind,
    used_wheres,
)
from caten.ir import dims as D

ENTRY = "fz"
SIZES = (1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33)
DTYPES = ("f32",) * 5 + ("f64", "i32", "i32", "i64", "i8", "u8", "bool")
# bitcast targets: bytes to bytes only (a float's bits would expose each ulp of an approximated upstream op,
# and arbitrary bits as a float a subnormal or a NaN payload: the host's float mode, not caten)
BITS_TO = {"i8": ("u8",), "u8": ("i8",), "bool": ("u8", "i8")}
OPS = {"un": 6, "bin": 10, "where": 2, "cast": 2, "red": 6, "perm": 3, "merge": 2, "unsq": 2, "squeeze": 1,
       "split": 2, "expand": 3, "slice": 4, "flip": 3, "pad": 3, "concat": 3, "matmul": 1, "dotimes": 1,
       "copy": 1, "gather": 2, "scatter": 2, "sort": 1, "loop": 3, "if": 1, "window": 2, "rfft": 1,
       "nbits": 1}
LOOPS = ("fori", "while", "scan", "nested")


# rendering --------------------------------------------------------------------------------------
def _window(x: str, t: Ty, p: dict) -> str:
    """(f over each window of p["k"] elements, every p["s"]-th, of x's last axis padded by p["pad"]
    elements of p["value"] on each side): a strided view of the padded tensor, reduced."""
    shape = list(t.shape)
    shape[-1] += 2 * p["pad"]
    out = (shape[-1] - p["k"]) // p["s"] + 1
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    pads = " ".join(["[0 0]"] * (len(shape) - 1) + [f"[{p['pad']} {p['pad']}]"])
    size = " ".join(map(str, shape[:-1] + [out, p["k"]]))
    stride = " ".join(map(str, strides[:-1] + [p["s"], 1]))
    return (f"({p['f']} (strided-view (pad {x} [{pads}] :value {lit(p['value'], t.dtype)}) :size [{size}] "
            f":stride [{stride}] :offset 0) :axis -1)")



def lit(v, dt: str) -> str:
    if dt == "bool":
        return "1" if v else "0"
    if is_float(dt):
        return repr(float(v))
    return str(int(v))


def _dims(v: str, t: Ty, sizes: dict[int, str] | None = None) -> list[str]:
    """Per axis, a way to write its size: a literal, or `(dim v i)` (symbolic sizes)."""
    return [(sizes or {}).get(i) or (str(n) if isinstance(k, int) else f"(dim {v} {i})")
            for i, (n, k) in enumerate(zip(t.shape, t.keys))]


PERIODIC = ("sin", "cos")  # absolute error ~ |x| * relative error of x
UN_TEXT = {"neg": "(neg {x})", "abs": "(abs {x})", "exp": "(exp {x})", "log": "(log (+ (abs {x}) 1.0))",
           "sqrt": "(sqrt (abs {x}))", "sin": "(sin {x})", "cos": "(cos {x})", "tanh": "(tanh {x})",
           "sigmoid": "(sigmoid {x})", "relu": "(relu {x})", "sq": "(* {x} {x})",
           "recip": "(recip (+ (abs {x}) 0.5))", "not": "(not {x})",
           "expm1": "(expm1 (min {x} 30.0))", "sinh": "(sinh (max (min {x} 30.0) -30.0))", "asinh": "(asinh {x})",
           "atanh": "(atanh (* (tanh {x}) 0.5))", "erfc": "(erfc {x})"}


def render_stmt(s: Stmt, ts: list[Ty]) -> str:  # noqa: C901 - one case per op
    p, a, t = s.p, s.args, ts[0]
    x = a[0]
    if s.op == "un":
        e = UN_TEXT[p["f"]].format(x=x)
    elif s.op == "bin":
        f = p["f"]
        y = a[1] if len(a) > 1 else lit(p["lit"], t.dtype)
        if f in ("idiv", "mod", "fmod"):
            y = f"(+ (abs {y}) 1)" if len(a) > 1 else y
        e = f"({f} {x} {y})"
    elif s.op == "where":
        e = f"(where {a[0]} {a[1]} {a[2]})"
    elif s.op == "cast":
        src = x
        if is_float(t.dtype) and p["to"] not in FLOATS and p["to"] != "bool":  # out of range: unspecified
            src = f"(max (min {x} 100.0) -100.0)"
        e = f"(bitcast {x} {p['to']})" if p.get("bits") else f"(cast {src} {p['to']})"
    elif s.op == "red":
        ax = p["axes"]
        axes = str(ax[0]) if len(ax) == 1 and p.get("int_axis") else f"[{' '.join(map(str, ax))}]"
        e = f"({p['f']} {x} :axis {axes}" + (" :keepdims true)" if p.get("keepdims") else ")")
    elif s.op == "perm":
        e = f"(permute {x} [{' '.join(map(str, p['perm']))}])"
    elif s.op == "merge":
        d, i = _dims(x, t), p["axis"]
        e = f"(reshape {x} [{' '.join(d[:i] + [f'(* {d[i]} {d[i + 1]})'] + d[i + 2:])}])"
    elif s.op == "unsq":
        d, i = _dims(x, t), p["axis"]
        e = f"(reshape {x} [{' '.join(d[:i] + ['1'] + d[i:])}])"
    elif s.op == "squeeze":
        d, i = _dims(x, t), p["axis"]
        e = f"(reshape {x} [{' '.join(d[:i] + d[i + 1:])}])"
    elif s.op == "split":
        d, i = _dims(x, t), p["axis"]
        e = f"(reshape {x} [{' '.join(d[:i] + [str(p['f']), str(t.shape[i] // p['f'])] + d[i + 1:])}])"
    elif s.op == "expand":
        d = _dims(x, t, {i: str(n) for i, n in p["sizes"].items()})
        e = f"(expand {x} [{' '.join([str(n) for n in p.get('lead', [])] + d)}])"
    elif s.op == "slice":
        e = f"(slice {x} " + " ".join(f"[{'0' if b is None else b} {_stop(x, i, e2)} {st}]"
                                      for i, (b, e2, st) in enumerate(p["bounds"])) + ")"
    elif s.op == "flip":
        e = f"(flip {x} :axis {p['axis']})"
    elif s.op == "rfft":  # the real or imaginary part of the FFT of the last axis (ops/fft.lisp)
        e = f"(nth (rfft {x} :axis -1 :norm-exp {p['norm']}) {p['part']})"
    elif s.op == "window":  # a sliding window of the last axis, padded: a pooling's or a conv's taps
        e = _window(x, t, p)
    elif s.op == "pad":
        e = f"(pad {x} [{' '.join(f'[{lo} {hi}]' for lo, hi in p['pads'])}] :value {lit(p['value'], t.dtype)})"
    elif s.op == "concat":
        e = f"(concat {a[0]} {a[1]} :axis {p['axis']})"
    elif s.op == "matmul":
        e = f"(matmul {a[0]} {a[1]})" if is_float(t.dtype) else f"(matmul-int {a[0]} {a[1]})"
    elif s.op == "nbits":
        e = _nbits(x, t, p)
    elif s.op == "dotimes":
        i = f"(cast i {t.dtype})" if t.dtype != "i64" else "i"
        return f"(setf {s.name} {x})\n  (dotimes (i {p['n']}) (setf {s.name} ({p['f']} {s.name} {i})))"
    elif s.op == "copy":
        e = f"(contiguous {x})"
    elif s.op in ("loop", "if"):
        e = _control(s, x, t)
    elif s.op in ("gather", "scatter"):
        a, k = p["axis"], p["k"]
        d = _dims(x, t)
        shape = d[:a] + [str(k)] + d[a + 1:]
        # indices from -1 to n + 1 (the last, in range, past the end), repeating when mul is 0 or k > n
        idx = f"(- (mod (+ (* (INDEX [{' '.join(shape)}] :axis {p['iaxis']}) {p['mul']}) {p['add']}) " \
              f"(+ (dim {x} {a}) 3)) 1)"
        if s.op == "gather":
            e = f"(GATHER {x} {idx} :axis {a})"
        else:
            red = "max" if t.dtype == "bool" or p["f"] in ("scatter-max", "scatter-min") else "sum"
            src = f"(expand ({red} {x} :axis {a} :keepdims true) [{' '.join(shape)}])"
            e = f"({p['f']} {x} {idx} {src} :axis {a})"
    elif s.op == "sort":
        how = f":axis {p['axis']} :descending {'true' if p['desc'] else 'false'}"
        e = f"(argsort {x} {how})" if p["idx"] else f"(nth (sort {x} {how}) 0)"
    else:
        raise Invalid(f"unknown op {s.op}")
    return f"(setf {s.name} {e})"


def _nbits(x: str, t: Ty, p: dict) -> str:
    """(matmul-nbits x B S ...) with B's codes, the scales and the zero points made from aranges
    (a permuted byte pattern, scales in [0.25, 1.25), zero points of every kind)."""
    n, bs, bits, K = p["n"], p["bs"], p["bits"], t.shape[-1]
    kb = -(-K // bs)
    j = bs * bits // 8
    codes = f"(cast (reshape (mod (+ (* (arange {n * kb * j}) {p['mul']}) {p['add']}) 256) [{n} {kb} {j}]) u8)"
    scales = f"(+ 0.25 (* 0.125 (cast (mod (arange {n * kb}) 8) {t.dtype})))"
    keys = f" :bits {bits}"
    if p["zp"] == "packed":
        count = n * (-(-kb // 2)) if bits == 4 else n * kb
        keys += f" :zero-point (cast (mod (+ (* (arange {count}) 7) 3) 256) u8)"
    elif p["zp"] == "float":
        keys += f" :zero-point (- (cast (mod (arange {n * kb}) 5) {t.dtype}) 1.5)"
    return f"(matmul-nbits {x} {codes} {scales}{keys})"


def _step(p: dict, a: str, x: str, t: Ty, counter: str) -> str:
    """One trip's update of loop state `a` (x's type; x is the value outside the loop): with the
    counter, a flip of itself (a view), or a reduction broadcast back (views and reductions in bodies)."""
    f = p["f"]
    if p["body"] == "flip":
        return f"({f} {a} (flip {a} :axis {p['axis']}))"
    if p["body"] == "red":
        return f"({f} {a} (expand (max {a} :axis {p['axis']} :keepdims true) [{' '.join(_dims(x, t))}]))"
    return f"({f} {a} (cast {counter} {t.dtype}))"


def _control(s: Stmt, x: str, t: Ty) -> str:
    """A loop or a branch over x (its type kept): fori, while, scan, two nested foris, or an if."""
    p = s.p
    if s.op == "if":
        return f"(if (> (sum (cast {x} f64)) 0.0) {_step(p, x, x, t, '1')} (flip {x} :axis {p['axis']}))" \
            if p["body"] != "count" else f"(if (> (sum (cast {x} f64)) 0.0) {_step(p, x, x, t, '1')} {x})"
    n, kind = p["n"], p["kind"]
    if kind == "fori":
        return f"(fori (i 0 {n}) ((a {x})) (next {_step(p, 'a', x, t, 'i')}))"
    if kind == "while":
        return f"(nth (while ((a {x}) (k 0)) (< k {n}) (next {_step(p, 'a', x, t, 'k')} (+ k 1))) 0)"
    if kind == "nested":
        inner = f"(fori (j 0 2) ((b a)) (next {_step(p, 'b', x, t, 'i')}))"
        return f"(fori (i 0 {n}) ((a {x})) (next {inner}))"
    f, ax = p["f"], p["axis"]
    return f"(nth (scan (lambda (c y) (next ({f} c y) ({f} c y))) (max {x} :axis {ax}) {x} :axis {ax}) 1)"


def _stop(v: str, i: int, e) -> str:
    return f"(dim {v} {i})" if e is None else str(e)


def render(prog: Prog) -> str:
    env = infer(prog)
    ins = []
    for name, dt, dims in prog.inputs:
        ins.append(f"({name}{{{dt}}}[{', '.join(str(d) for d in dims)}])")
    outs = []
    for i, o in enumerate(prog.outputs):
        t = env[o]
        outs.append(f"(Y{i}{{{t.dtype}}}[{', '.join(D.to_str(k) for k in t.keys)}])")
    where = ""
    if used_wheres(prog):
        where = " where " + ", ".join(f"{q} = (* {c} {s})" for q, (s, c) in
                                      ((q, prog.wheres[q]) for q in used_wheres(prog)))
    used = [d for _, _, dims in prog.inputs for d in dims if isinstance(d, str) and d in prog.sizes]
    lines = [f";; called with {', '.join(f'{k}={prog.sizes[k]}' for k in dict.fromkeys(used))}"] if used else []
    lines.append(f"(composite {ENTRY} ({' '.join(ins)} -> {' '.join(outs)}{where})")
    lines += ["  " + render_stmt(s, [env[a] for a in s.args]) for s in prog.stmts]
    lines.append(f"  (return {' '.join(prog.outputs)}))")
    return "\n".join(lines) + "\n"


# generation -------------------------------------------------------------------------------------
class _Gen:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.symbolic = self.rng.random() < 0.5
        self.empty = random.Random(seed ^ 0x5EED)
        self.prog = Prog([], {}, {}, [], [])
        self.syms = itertools.chain("NMKPRSU", (f"D{i}" for i in itertools.count()))
        self.inexact: set[str] = set()  # float values whose rounding depends on an evaluation order

    def dim(self) -> int | str:
        n = self.rng.choice(SIZES) if self.rng.random() < 0.9 else self.rng.choice((31, 64, 100, 130))
        if self.empty.random() < 0.03:  # an empty dim (its own stream: the other choices stay as they were)
            n = 0
        if not self.symbolic or self.rng.random() < 0.15:
            return n
        s = next(self.syms)
        self.prog.sizes[s] = n
        return s

    def inputs(self) -> None:
        rng = self.rng
        rank = rng.choice((1, 2, 2, 3, 3, 4))
        first = [self.dim() for _ in range(rank)]
        while _elems(first, self.prog) > 4096:
            i = max(range(rank), key=lambda j: _size(first[j], self.prog))
            first[i] = rng.choice((1, 2, 3))
        dt0 = rng.choice(DTYPES)
        self.prog.inputs.append(("X0", dt0, tuple(first)))
        for j in range(1, rng.choice((1, 2, 2, 3))):
            if rng.random() < 0.7:  # broadcast-compatible with the first
                k = rng.randint(1, len(first))
                dims = tuple(1 if rng.random() < 0.2 else d for d in first[-k:])
            else:
                dims = tuple(self.dim() if rng.random() < 0.5 else rng.choice((1, 2, 3))
                             for _ in range(rng.randint(1, 3)))
            dt = dt0 if rng.random() < 0.6 else rng.choice(DTYPES)
            self.prog.inputs.append((f"X{j}", dt, dims))
        syms = [d for _, _, dims in self.prog.inputs for d in dims if isinstance(d, str)]
        if syms and rng.random() < 0.25:
            s = rng.choice(syms)
            q = next(self.syms)
            self.prog.wheres[q] = (s, 2)
            self.prog.inputs.append((f"X{len(self.prog.inputs)}", dt0, (q,)))

    def pick(self, env: dict[str, Ty], ok=lambda t: True) -> str | None:
        names = [n for n in env if ok(env[n])]
        if not names:
            return None
        u = self.rng.random()
        if u < 0.5:
            return names[-1]
        return self.rng.choice(names[-3:] if u < 0.75 else names)

    def stmt(self, name: str, env: dict[str, Ty]) -> Stmt | None:
        rng = self.rng
        op = rng.choices(list(OPS), weights=list(OPS.values()))[0]
        x = self.pick(env)
        t = env[x]
        r, k = len(t.shape), kind(t.dtype)
        p: dict = {}
        args = [x]
        if op == "un":
            p["f"] = rng.choice(UNARY[k])
        elif op == "bin":
            fs = BINARY[k] + (COMPARE if k != "bool" else ())
            p["f"] = rng.choice(fs)
            y = self.pick(env, lambda u: u.dtype == t.dtype and _broadcasts(t, u))
            if y is None or rng.random() < 0.25 and k != "bool":
                p["lit"] = rng.choice((2, 3, -1, 5)) if k == "int" or p["f"] in ("idiv", "mod", "fmod") else \
                    rng.choice((0.5, -1.5, 2.0, 3.25, 0.0))
                if t.dtype == "u8" and p["lit"] < 0:
                    p["lit"] = 3
            else:
                args = [x, y] if rng.random() < 0.5 else [y, x]
        elif op == "where":
            c = self.pick(env, lambda u: u.dtype == "bool" and _broadcasts(t, u))
            y = self.pick(env, lambda u: u.dtype == t.dtype and _broadcasts(t, u))
            if c is None:
                return None
            args = [c, x, y or x]
        elif op == "cast":
            p["to"] = rng.choice(FLOATS + INTS + ("bool",))
            if t.dtype in BITS_TO and rng.random() < 0.25:  # a bitcast
                p["to"], p["bits"] = rng.choice(BITS_TO[t.dtype]), True
        elif op == "red":
            if r == 0:
                return None
            p["f"] = rng.choice(("sum", "sum", "max", "min", "prod", "mean", "argmax"))
            n = 1 if p["f"] == "argmax" else rng.randint(1, r)
            p["axes"] = sorted(rng.sample(range(r), n))
            p["keepdims"] = rng.random() < 0.3
            p["int_axis"] = n == 1 and rng.random() < 0.5
        elif op == "perm":
            p["perm"] = rng.sample(range(r), r)
        elif op == "merge":
            if r < 2:
                return None
            p["axis"] = rng.randrange(r - 1)
        elif op == "unsq":
            p["axis"] = rng.randint(0, r)
        elif op in ("squeeze", "flip"):
            if r == 0:
                return None
            p["axis"] = rng.randrange(r)
        elif op == "rfft":
            if r == 0 or not is_float(t.dtype):
                return None
            p["part"], p["norm"] = rng.randrange(2), rng.choice((0, 0.5, 1))
        elif op == "split":
            if r == 0:
                return None
            p["axis"] = rng.randrange(r)
            p["f"] = rng.choice((2, 3, 4))
        elif op == "expand":
            units = [i for i, kk in enumerate(t.keys) if kk == 1]
            p["sizes"] = {i: rng.choice((2, 3, 5)) for i in units if rng.random() < 0.8}
            p["lead"] = [rng.choice((2, 3))] if rng.random() < 0.3 else []
        elif op == "slice":
            if r == 0:
                return None
            p["bounds"] = []
            for i in range(rng.randint(1, r)):
                n = t.shape[i]
                b = rng.choice((0, None, 1, -2, rng.randint(-n - 1, n)))
                e = rng.choice((None, n, n + 2, -1, rng.randint(-n, n + 1)))
                p["bounds"].append((b, e, rng.choice((1, 1, 2, 3))))
        elif op == "window":
            if r == 0 or k == "bool" or not all(isinstance(kk, int) for kk in t.keys):
                return None
            p.update(f=rng.choice(("sum", "max", "min")), k=rng.choice((1, 2, 3, 4)), s=rng.choice((1, 1, 2, 3)),
                     pad=rng.choice((0, 1, 2)), value=rng.choice((0, 1)) if k != "float" else rng.choice((0.0, 1.5)))
        elif op == "pad":
            p["pads"] = [(rng.choice((0, 0, 1, 2)), rng.choice((0, 1, 3))) for _ in range(r)]
            p["value"] = rng.choice((0, 1)) if k != "float" else rng.choice((0.0, 1.5, -2.0))
        elif op == "concat":
            if r == 0:
                return None
            p["axis"] = rng.randrange(r)
            y = self.pick(env, lambda u: u.dtype == t.dtype and len(u.shape) == r)
            args = [x, y or x]
        elif op == "matmul":
            y = self.pick(env, lambda u: len(u.shape) == 2 and len(t.shape) == 2 and u.keys[0] == t.keys[-1])
            if y is None:
                return None
            args = [x, y]
        elif op == "nbits":
            if not is_float(t.dtype) or r != 2 or not isinstance(t.keys[1], int):
                return None
            p.update(n=rng.choice((1, 2, 3, 5, 17)), bs=rng.choice((16, 32)), bits=rng.choice((4, 8)),
                     zp=rng.choice((None, "packed", "float")), mul=rng.choice((1, 37, 101)), add=rng.randrange(256))
            if p["bits"] == 8 and p["zp"] == "float":
                p["zp"] = None  # (onnxruntime's float zero points go with 4-bit codes only)
        elif op in ("gather", "scatter"):
            if r == 0:
                return None
            p["axis"] = rng.randrange(r)
            p["k"] = rng.choice((1, 2, 3, 5))
            p["iaxis"] = rng.randrange(r)
            p["mul"], p["add"] = rng.choice((0, 1, 3)), rng.randint(0, 4)
            if op == "scatter":
                p["f"] = "scatter" if k == "bool" else rng.choice(("scatter", "scatter-add", "scatter-max",
                                                                   "scatter-min", "scatter-mul"))
        elif op == "sort":
            if r == 0:
                return None
            p["axis"], p["desc"], p["idx"] = rng.randrange(r), rng.random() < 0.5, rng.random() < 0.5
        elif op == "dotimes":
            p["n"] = rng.randint(1, 3)
            p["f"] = rng.choice(("+", "*", "max", "-"))
        elif op in ("loop", "if"):
            p["kind"] = rng.choice(LOOPS) if op == "loop" else "if"
            p["axis"] = rng.randrange(r) if r else 0
            empty = bool(r) and t.shape[p["axis"]] == 0  # (a max over an empty axis has no value)
            if p["kind"] == "scan" and (r == 0 or empty):
                return None
            p["n"] = rng.randint(0, 3)
            p["f"] = "max" if k == "bool" else rng.choice(("+", "max", "*", "max"))
            p["body"] = rng.choice(("count", "flip") + (() if empty else ("red",))) if r else "count"
        s = Stmt(name, op, args, p)
        if any(a in self.inexact for a in args) and _discontinuous(s, t.dtype):
            return None
        try:
            env[name] = infer_stmt(s, [env[a] for a in args])
            n = 1
            for d in env[name].shape:
                n *= d
            if n > 20000:
                raise Invalid("too large")
        except Invalid:
            env.pop(name, None)
            return None
        if is_float(env[name].dtype) and (any(a in self.inexact for a in args)
                                          or op in ("red", "matmul", "dotimes", "scatter", "loop", "if", "window",
                                                    "rfft", "nbits")):
            self.inexact.add(name)
        return s

    def program(self) -> Prog:
        rng = self.rng
        self.inputs()
        env = infer(self.prog)
        for i in range(rng.randint(2, 9)):
            for _ in range(30):
                s = self.stmt(f"v{i}", env)
                if s is not None:
                    self.prog.stmts.append(s)
                    break
        names = [s.name for s in self.prog.stmts] or [self.prog.inputs[0][0]]
        outs = [names[-1]]
        if rng.random() < 0.3:
            outs.append(rng.choice(names))
        if rng.random() < 0.15:  # an output that is a view of an input
            view = Stmt(f"w{len(outs)}", rng.choice(("perm", "flip")), ["X0"], {})
            r = len(env["X0"].shape)
            view.p = {"perm": rng.sample(range(r), r)} if view.op == "perm" else {"axis": rng.randrange(r)}
            self.prog.stmts.append(view)
            env[view.name] = infer_stmt(view, [env["X0"]])
            outs.append(view.name)
        self.prog.outputs = outs
        return name_outputs(self.prog, env)


def _discontinuous(s: Stmt, dtype: str) -> bool:
    """Ops whose result jumps where a float input crosses a point (a comparison, a cast to an
    integer, argmax's ties, an argsort, an if's condition), or whose absolute error grows with the
    input's magnitude (sin, cos:
    a sum of 2,730 values squared is ~2,700, where 10 ulps of summation-order rounding move sin by
    0.003, seed 4003876): applied to a summation-order-dependent value, any two correct runtimes
    may disagree there (a mean of 3-decimal values that is 0 in real arithmetic), so the
    generator does not draw them on such values."""
    if not is_float(dtype):
        return False
    return (s.op == "bin" and s.p.get("f") in COMPARE) or (s.op == "cast" and not is_float(s.p["to"])) \
        or (s.op == "red" and s.p.get("f") == "argmax") or (s.op == "sort" and s.p.get("idx")) \
        or (s.op == "un" and s.p.get("f") in PERIODIC) or s.op == "if"  # (an if compares a float sum)


def name_outputs(prog: Prog, env: dict[str, Ty]) -> Prog:
    """Reduce away the axes of outputs whose size no signature can name (a symbolic slice)."""
    outs = []
    for o in prog.outputs:
        t = env[o]
        bad = [i for i, k in enumerate(t.keys) if k is None]
        if bad:
            s = Stmt(f"{o}_n", "red", [o], {"f": "max" if t.dtype == "bool" else "sum", "axes": bad})
            env[s.name] = infer_stmt(s, [t])
            prog.stmts.append(s)
            o = s.name
        outs.append(o)
    prog.outputs = outs
    return prog


def _size(d, prog: Prog) -> int:
    return d if isinstance(d, int) else prog.sizes[d]


def _elems(dims, prog: Prog) -> int:
    n = 1
    for d in dims:
        n *= _size(d, prog)
    return n


def _broadcasts(a: Ty, b: Ty) -> bool:
    from caten.fuzz.types import bcast

    try:
        bcast(a, b)
        return True
    except Invalid:
        return False


def generate(seed: int) -> Prog:
    """The program of `seed` (the same on every machine and run)."""
    return _Gen(seed).program()
