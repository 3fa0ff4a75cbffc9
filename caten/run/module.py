"""Compiled composites as Python callables: numpy arrays in, numpy arrays out.

Every argument is checked (count, dtype, rank, dims, `where` constraints) before any
kernel runs, and nothing the caller passed is ever written but the `out=` arrays it names and the
inputs that outputs of the same name update in place.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

from caten import pipeline
from caten.deep import deep
from caten.errors import Error
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.program import Program
from caten.plugin import Options, Runtime
from caten.read.program import CompositeDef
from caten.read.sexpr import SList, head
from caten.read.source import Source
from caten.run import complexio
from caten.run.complexio import COMPLEX_NAMES, complex_dtype


class Composite:
    """One composite of a module; compiled once per binding of its type variables."""

    def __init__(self, module: Module, cdef: CompositeDef):
        self.module, self.cdef = module, cdef
        self._variants: dict[tuple, tuple[Program, Any]] = {}
        self._programs: dict[tuple, Program] = {}
        self._pool = OutputPool()
        self._envs: dict[tuple, tuple[Program, dict[str, int]]] = {}  # (program, shapes) -> checked dims
        self._timings: dict[tuple, Any] = {}  # the front passes' times of a program elaborated here, for -v
        self.__doc__ = cdef.doc or None

    def __repr__(self) -> str:
        return f"<caten composite {self.cdef.name} on {self.module.runtime.name}>"

    def _bind_types(self, arrays: list[np.ndarray]) -> dict[str, DType]:
        types = dict(self.module.types)
        for p, a in zip(self.cdef.params, arrays):
            dt = T.from_numpy(a.dtype) or complex_dtype(a.dtype)
            if dt is None:
                raise Error(f"argument `{p.name}` of `{self.cdef.name}` has dtype {a.dtype}, which caten does not have")
            want = T.lookup(p.dtype) or complex_dtype(p.dtype) or types.get(p.dtype)
            if want is None:
                types[p.dtype] = dt
            elif want != dt:
                what = f"type variable {p.dtype} is {want} from an earlier argument" \
                    if not (T.lookup(p.dtype) or complex_dtype(p.dtype)) else \
                    f"declared {want}"
                raise Error(f"argument `{p.name}` of `{self.cdef.name}` has dtype {dt}, but {what}")
        return types

    def elaborate(self, types: dict[str, DType]) -> Program:
        key = tuple(sorted((k, v.name) for k, v in types.items()))
        if key not in self._programs:
            m = self.module
            tm = self._timings[key] = pipeline.Timings()
            self._programs[key] = deep(pipeline.program, m.source, self.cdef, types, m.dims, m.options,
                                       m.runtime.name, tm)
        return self._programs[key]

    def program(self, types: dict[str, DType]) -> tuple[Program, Any]:
        key = tuple(sorted((k, v.name) for k, v in types.items()))
        if key not in self._variants:
            m = self.module
            prog = self.elaborate(types)
            exe = deep(pipeline.compile, m.runtime, prog, m.options, self._timings.get(key))
            self._variants[key] = (prog, exe)
        return self._variants[key]

    def __call__(self, *args: Any, out: Any = None) -> Any:
        """Run on numpy arrays. `out`: arrays (one per output, or one array for one output) to
        write the results into instead of fresh ones -- a training loop that alternates two sets
        of parameter arrays (step k reads A and writes B, step k+1 reads B and writes A) then
        allocates and copies nothing. They are checked like arguments, and may not overlap one."""
        name = self.cdef.name
        if len(args) != len(self.cdef.params):
            raise Error(f"`{name}` takes {len(self.cdef.params)} argument{'s' if len(self.cdef.params) != 1 else ''}, "
                        f"got {len(args)}")
        arrays = []
        for p, a in zip(self.cdef.params, args):
            if not isinstance(a, (np.ndarray, np.generic)):
                raise Error(f"argument `{p.name}` of `{name}` must be a numpy array, got {type(a).__name__}")
            arrays.append(np.asarray(a))
        # checked at the call, not at compile: a runtime without its device still compiles
        # (`caten test-runtime -r cuda` without a GPU is compile-only)
        ok, why = self.module.runtime.available()
        if not ok:
            raise Error(f"runtime '{self.module.runtime.name}' cannot run here: {why}",
                        hint="install what it names, or choose another runtime (`caten runtimes` lists them)")
        prog, exe = self.program(self._bind_types(arrays))
        split = len(prog.inputs) != len(arrays) or len(prog.outputs) != len(self.cdef.outputs)
        if split:  # complex parameters or outputs: real buffers in the program (caten/run/complexio.py)
            arrays = complexio.split(self.cdef, prog, arrays)
        key = (id(prog), tuple(a.shape for a in arrays))
        hit = self._envs.get(key)
        if hit is not None and hit[0] is prog:  # (a loop calls with the same shapes: checked once)
            env = hit[1]
        else:
            env = check_shapes(prog, arrays)
            if len(self._envs) >= 256:
                self._envs.clear()
            self._envs[key] = (prog, env)  # (the program held: its id names no other while cached)
        if prog.aliases:
            return self._run_in_place(prog, exe, arrays, out, env)
        outs = [self._output(prog, o, env) for o in prog.outputs] if out is None or split else \
            self._given(prog, out, env, arrays)
        exe.run([a if a.flags.c_contiguous else np.array(a, order="C") for a in arrays], outs, env)
        if split:
            outs = complexio.join(self.cdef, prog, outs, out)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run_in_place(self, prog: Program, exe: Any, arrays: list[np.ndarray], out: Any,
                      env: dict[str, int]) -> Any:
        """A program with outputs named as inputs: each is written into that input's array (and
        returned as it). Those the code computes in the input's own memory (`exe.in_place`) get
        the array itself; the others are computed apart and copied in after the run."""
        name = self.cdef.name
        if out is not None:
            raise Error(f"`{name}` writes {', '.join(prog.outputs[i].name for i, _ in prog.aliases)} in place: "
                        "out= is not available", hint="call it without out=")
        for _, j in prog.aliases:
            a = arrays[j]
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise Error(f"argument `{prog.inputs[j].name}` of `{name}` is written in place, so it must be a "
                            "C-contiguous, writeable array", hint="pass np.ascontiguousarray(x) (a copy you keep)")
            if any(k != j and np.may_share_memory(a, b) for k, b in enumerate(arrays)):
                raise Error(f"argument `{prog.inputs[j].name}` of `{name}` is written in place, but its memory is "
                            "also another argument's", hint="pass a copy")
        direct = getattr(exe, "in_place", frozenset())
        into = dict(prog.aliases)
        outs = [arrays[into[i]] if i in direct else self._output(prog, o, env) for i, o in enumerate(prog.outputs)]
        exe.run([a if a.flags.c_contiguous else np.array(a, order="C") for a in arrays], outs, env)
        for i, j in prog.aliases:
            if i not in direct:
                np.copyto(arrays[j], outs[i])
                outs[i] = arrays[j]
        return outs[0] if len(outs) == 1 else tuple(outs)


    def _given(self, prog: Program, out: Any, env: dict[str, int], arrays: list[np.ndarray]) -> list[np.ndarray]:
        """The caller's output arrays, each checked before any kernel runs."""
        outs = [out] if isinstance(out, np.ndarray) else list(out)
        name = self.cdef.name
        if len(outs) != len(prog.outputs):
            raise Error(f"`{name}` has {len(prog.outputs)} output{'s' if len(prog.outputs) != 1 else ''}, "
                        f"but out= gives {len(outs)} array{'s' if len(outs) != 1 else ''}")
        for spec, a in zip(prog.outputs, outs):
            shape = tuple(D.evaluate(d, env) for d in spec.shape)
            if not isinstance(a, np.ndarray):
                raise Error(f"out= array for `{spec.name}` of `{name}` must be a numpy array, got {type(a).__name__}")
            if a.dtype != spec.dtype.np or a.shape != shape:
                raise Error(f"out= array for `{spec.name}` of `{name}` is {a.dtype}{list(a.shape)}, "
                            f"but the output is {spec.dtype}{list(shape)}")
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise Error(f"out= array for `{spec.name}` of `{name}` must be C-contiguous and writeable")
        clash = _overlapping(arrays, outs)
        if clash is not None:
            raise Error(f"out= array for `{prog.outputs[clash].name}` of `{name}` overlaps an argument or another "
                        "output", hint="alternate two sets of arrays: write step k+1 into the arrays step k read")
        return outs

    def _output(self, prog: Program, spec, env: dict[str, int]) -> np.ndarray:
        """An output array, or a diagnostic when its size cannot be allocated (or exceeds int64)."""
        shape = tuple(D.evaluate(d, env) for d in spec.shape)
        n = 1
        for d in shape:
            n *= d
        why = None
        if n * spec.dtype.np.itemsize >= 2 ** 63:
            why = "more bytes than a 64-bit size holds"
        else:
            try:
                return self._pool.take(shape, spec.dtype.np)
            except (MemoryError, ValueError) as e:
                why = str(e)
        raise Error(f"output `{spec.name}` of `{prog.name}` has shape {shape}: cannot allocate it ({why})",
                    hint="check the declared output dims and the -D values")


def _overlapping(args: list[np.ndarray], outs: list[np.ndarray]) -> int | None:
    """The index of an output whose memory overlaps an argument's or another output's (by their
    byte ranges, as np.may_share_memory), or None. One sort: a training step's 40 arrays cost
    microseconds, not the 800 pairwise checks they did."""
    from numpy.lib.array_utils import byte_bounds

    spans = []
    for k, a in enumerate([*args, *outs]):
        if a.size:
            lo, hi = byte_bounds(a)
            spans.append((lo, hi, k - len(args)))  # k - len(args) >= 0: an output
    spans.sort()
    top = top_out = -1
    owner = None
    for lo, hi, k in spans:
        if k >= 0 and lo < top:
            return k
        if lo < top_out:
            return owner
        top = max(top, hi)
        if k >= 0 and hi > top_out:
            top_out, owner = hi, k
    return None


class OutputPool:
    """Output arrays recycled once the caller has let go of them.

    Touching freshly allocated memory costs the kernel's page zeroing (about as much as a
    memory-bound kernel itself), so an output whose memory nobody references any more (no
    variable, no view) is handed out again. The pool keeps at most `per_key` arrays of each
    shape and dtype, per calling thread (so two threads never get the same array). Those start
    on a cache line (`aligned_empty`); their memory belongs to a byte buffer, the base of every
    view of them, so it is the buffer's references that say whether one is still in use.
    """

    def __init__(self, per_key: int = 2):
        self.per_key = per_key
        self._local = threading.local()

    @property
    def arrays(self) -> dict[tuple, list[tuple[np.ndarray, np.ndarray]]]:
        return self._local.__dict__.setdefault("arrays", {})

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        lst = self.arrays.setdefault((shape, dtype.str), [])
        for i in range(len(lst)):
            # referenced only by the pool: the array by the list's tuple, the buffer by the
            # tuple and the array (getrefcount's own argument adds one to each)
            if sys.getrefcount(lst[i][0]) <= 2 and sys.getrefcount(lst[i][1]) <= 3:
                return lst[i][0]
        if math.prod(shape) * dtype.itemsize < 1 << 20:
            return np.empty(shape, dtype)  # small outputs are cheap to allocate
        arr = aligned_empty(shape, dtype)
        if len(lst) < self.per_key:
            lst.append((arr, arr.base))
        return arr


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, align: int = 64) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an `align`-byte boundary, a view
    of a byte buffer (its `base`): numpy's large arrays start 16-48 bytes into a cache line, so
    each full-vector store of a tile's row splits two lines, and non-temporal stores
    (caten.render.llvm.direct) need aligned rows."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    raw = np.empty(n + align, np.uint8)
    off = -raw.ctypes.data % align
    return raw[off:off + n].view(dtype).reshape(shape)


def check_shapes(prog: Program, arrays: list[np.ndarray]) -> dict[str, int]:
    """Bind dims from argument shapes and check every declared dim and constraint."""
    env: dict[str, int] = dict(prog.defines)
    for spec, a in zip(prog.inputs, arrays):
        if a.ndim != len(spec.shape):
            raise Error(f"argument `{spec.name}` of `{prog.name}` must have rank {len(spec.shape)} ({spec}), "
                        f"got shape {a.shape}")
        for d, n in zip(spec.shape, a.shape):
            if isinstance(d, D.DimExpr) and D.free_syms(d) and d == D.sym(D.free_syms(d)[0]):
                s = D.free_syms(d)[0]
                if s in env and env[s] != n:
                    raise Error(f"argument `{spec.name}` of `{prog.name}`: dimension {s} is {env[s]} from an earlier "
                                f"argument but {n} here (shape {a.shape}, declared {spec})")
                env[s] = int(n)
    for k, expr in prog.derived.items():
        env[k] = D.evaluate(expr, env)
    for c in prog.constraints:
        lhs, rhs = D.evaluate(c.lhs, env), D.evaluate(c.rhs, env)
        if lhs != rhs and c.empty is not None:
            raise Error(f"`{prog.name}`: a max/min/argmax reduces an empty axis ({D.to_str(c.empty)} = "
                        f"{D.evaluate(c.empty, env)} elements) and has no identity",
                        hint="reduce a non-empty axis, or use sum/prod, which give 0/1 over an empty axis")
        if lhs != rhs:
            raise Error(f"`{prog.name}`: constraint where {c.text} fails ({lhs} != {rhs})")
    for spec, a in zip(prog.inputs, arrays):
        for d, n in zip(spec.shape, a.shape):
            try:
                want = D.evaluate(d, env)
            except KeyError as e:
                raise Error(f"argument `{spec.name}`: dimension {d} cannot be determined ({e} is unbound)") from None
            if want != n:
                raise Error(f"argument `{spec.name}` of `{prog.name}` must have shape "
                            f"({', '.join(str(D.evaluate(x, env)) for x in spec.shape)}) ({spec}), got {a.shape}")
    return env


def _called_names(cdefs: list[CompositeDef]) -> set[str]:
    """Names of these composites that another one of them calls."""
    names = {c.name for c in cdefs}
    out: set[str] = set()
    for c in cdefs:
        heads = getattr(c, "calls", None)  # (a cached signature: its body is not read, caten.pipeline.lazysource)
        if heads is not None:
            out.update(h for h in heads if h in names and h != c.name)
            continue
        stack = list(c.body)
        while stack:
            f = stack.pop()
            if isinstance(f, SList):
                h = head(f)
                if h in names and h != c.name:
                    out.add(h)
                stack.extend(f.items)
    return out


class Module:
    """The composites of one source, compiled lazily for a runtime."""

    def __init__(self, source: Source, runtime: Runtime, options: Options):
        from caten.options import check_bounds_enabled

        self.source, self.runtime = source, runtime
        # check_bounds None: the CATEN_CHECK_BOUNDS environment variable decides, once
        self.options = options.but(check_bounds=check_bounds_enabled(options.check_bounds))
        if self.options.check_bounds and not runtime.checks_bounds:
            raise Error(f"runtime '{runtime.name}' has no bounds-checked mode",
                        hint="check bounds on llvm or c (or unset CATEN_CHECK_BOUNDS)")
        self.types, self.dims = pipeline.split_defines(dict(options.defines))
        types = self.types
        self._composites = {n.replace("-", "_"): Composite(self, source.entry(n)) for n in source.names}
        # report source errors at load time where the dtypes are known; a composite that another
        # one here calls is checked as part of its caller (elaborating it alone too doubled the work)
        called = _called_names([c.cdef for c in self._composites.values()])
        if called >= {c.cdef.name for c in self._composites.values()}:
            called = set()  # every one is called by another (a cycle): check them all
        for c in self._composites.values():
            if c.cdef.name not in called and all(T.lookup(p.dtype) or p.dtype in types or p.dtype in COMPLEX_NAMES
                                                 for p in c.cdef.params):
                c.elaborate(dict(types))

    def __getattr__(self, name: str) -> Composite:
        comps = self.__dict__.get("_composites", {})
        if name in comps:
            return comps[name]
        from caten.errors import closest

        guess = closest(name, comps)
        raise AttributeError(f"no composite `{name}` in {self.source.file}"
                             + (f"; did you mean `{guess}`?" if guess else ""))

    def __dir__(self) -> list[str]:
        return list(self._composites) + list(super().__dir__())

    @property
    def names(self) -> list[str]:
        return list(self._composites)
