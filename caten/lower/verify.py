"""A check of loop-IR kernels at the stage boundary between lowering and rendering.

What a renderer assumes and would otherwise get wrong silently: every buffer accessed is a
parameter of the kernel, stores write the parameter's dtype, index expressions are i64, every
variable read is a loop variable or an accumulator in scope, operands of an ALU op have the
dtypes its result implies, a condition is bool. The pipeline runs it after lowering and after
the bounds pass when CATEN_VERIFY is set (`caten --debug`; the test suite sets it).
"""

from __future__ import annotations

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.loopir import IDX, X

_SAME = {Op.ADD, Op.MUL, Op.FDIV, Op.IDIV, Op.MOD, Op.MAX, Op.AND, Op.OR, Op.XOR, Op.NEG, Op.RECIP, Op.SQRT,
         Op.EXP2, Op.LOG2, Op.SIN, Op.NOT}


def _expr_problem(x: X, scope: dict[str, object], params: dict[str, L.BufParam]) -> str | None:
    """What is wrong with node `x` alone (its operands are checked on their own)."""
    if x.op == "var":
        if x.arg not in scope:
            return f"reads variable {x.arg} outside its loop or before its accumulator"
        want = scope[x.arg]
        return None if want is None or want == x.dtype else f"reads {x.arg} as {x.dtype}, declared {want}"
    if x.op == "load":
        p = params.get(x.arg)
        if p is None:
            return f"loads from {x.arg}, not a parameter of the kernel"
        if p.dtype != x.dtype and not (p.dtype.itemsize == 2 and x.dtype == T.f32):
            return f"loads {x.dtype} from {x.arg} of {p.dtype}"
        return None if x.src[0].dtype == IDX else f"indexes {x.arg} with {x.src[0].dtype}"
    if x.op == "masked":
        return None if x.src[0].dtype == T.bool_ else f"mask of dtype {x.src[0].dtype}"
    if x.op is Op.WHERE:
        if x.src[0].dtype != T.bool_:
            return f"where's condition is {x.src[0].dtype}"
        bad = [s.dtype for s in x.src[1:] if s.dtype != x.dtype and not _widened(s.dtype, x.dtype)]
        return f"where's branches are {bad}, result {x.dtype}" if bad else None
    if x.op in (Op.CMPLT, Op.CMPNE):
        if x.dtype != T.bool_:
            return f"a comparison of dtype {x.dtype}"
        return None if x.src[0].dtype == x.src[1].dtype else f"compares {x.src[0].dtype} with {x.src[1].dtype}"
    if x.op in _SAME:
        bad = [s.dtype for s in x.src if s.dtype != x.dtype and not _widened(s.dtype, x.dtype)]
        return f"operands {bad} for a {x.dtype} result" if bad else None
    if x.op in ("idiv", "imod", "shl", "shr"):
        ok = x.dtype.is_int and all(s.dtype == x.dtype for s in x.src)
        return None if ok else f"{x.op} of {[s.dtype for s in x.src]} into {x.dtype}"
    if x.op in ("floor", "rint", "fma", "fmod"):
        ok = x.dtype.is_float and all(s.dtype == x.dtype for s in x.src)
        return None if ok else f"{x.op} of {[s.dtype for s in x.src]} into {x.dtype}"
    if x.op == "bitcast" and L.register(x.src[0].dtype).itemsize != L.register(x.dtype).itemsize:
        return f"bitcast of {x.src[0].dtype} to {x.dtype}"
    return None


def _widened(have: T.DType, want: T.DType) -> bool:
    """f16/bf16 values live in registers as f32 (loopir's module docstring)."""
    return L.register(have) == L.register(want) == T.f32


def problems(kernel: L.Kernel) -> list[str]:
    params = {p.name: p for p in kernel.params}
    out: list[str] = []
    seen: set[tuple[int, frozenset]] = set()

    def exprs(roots: tuple[X, ...], scope: dict[str, object]) -> None:
        frozen = frozenset(scope.items())
        stack = list(roots)
        while stack:
            x = stack.pop()
            if (id(x), frozen) in seen:
                continue
            seen.add((id(x), frozen))
            why = _expr_problem(x, scope, params)
            if why:
                out.append(f"kernel {kernel.name}: {x.op!r} {x.dtype}: {why}")
            stack.extend(x.src)

    work: list[tuple[list, dict]] = [(kernel.body, {d: IDX for d in kernel.dims})]
    while work:
        body, scope = work.pop()
        scope = dict(scope)
        for s in body:
            if isinstance(s, L.Loop):
                exprs((s.extent,), scope)
                work.append((s.body, {**scope, s.var: IDX}))
            elif isinstance(s, L.Store):
                exprs((s.idx, s.value), scope)
                p = params.get(s.buf)
                if p is None:
                    out.append(f"kernel {kernel.name}: stores to {s.buf}, not a parameter")
                elif p.role == "in":
                    out.append(f"kernel {kernel.name}: stores to input {s.buf}")
                elif s.value.dtype != p.dtype and not _widened(s.value.dtype, p.dtype):
                    out.append(f"kernel {kernel.name}: stores {s.value.dtype} into {s.buf} of {p.dtype}")
            elif isinstance(s, L.Acc):
                exprs((s.init,), scope)
                scope[s.var] = s.dtype
            elif isinstance(s, L.SetAcc):
                exprs((s.value,), scope)
                if s.var not in scope:
                    out.append(f"kernel {kernel.name}: sets {s.var} before its accumulator")
            elif isinstance(s, L.PanelCopy):
                exprs(s.exprs(), scope)
                if s.src not in params or s.dst not in params:
                    out.append(f"kernel {kernel.name}: packs {s.src} into {s.dst}, not both parameters")
                elif params[s.dst].role == "in":
                    out.append(f"kernel {kernel.name}: packs into input {s.dst}")
            elif isinstance(s, (L.TileMM, L.MacroMM, L.DirectMM)):
                for buf in (s.a, s.b, s.out):
                    if buf not in params:
                        out.append(f"kernel {kernel.name}: GEMM tile reads {buf}, not a parameter")
    return out
