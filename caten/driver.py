"""The compiler driver: definitions (a `caten.read.source.Source`) -> (per entry and dtype binding) Program.

One place that strings the stages together, used by both the Python API and the CLI.
"""

from __future__ import annotations

from caten.errors import Error
from caten.ir import verify
from caten.ir.dtypes import DType
from caten.ir.empty import add_nonempty_constraints
from caten.ir.program import Program
from caten.options import Options
from caten.read.program import CompositeDef
from caten.read.source import Source


def split_defines(defines: dict[str, object] | None) -> tuple[dict[str, DType], dict[str, int]]:
    """-D NAME=VALUE: dtype names bind type variables, integers bind dims."""
    from caten.ir import dtypes as T

    types, dims = {}, {}
    for k, v in (defines or {}).items():
        if isinstance(v, DType):
            types[k] = v
        elif isinstance(v, str) and T.lookup(v):
            types[k] = T.lookup(v)
        else:
            try:
                dims[k] = int(v)
            except (TypeError, ValueError):
                raise Error(f"-D {k}={v}: expected an integer dimension or a dtype name") from None
    return types, dims


def compile_program(src: Source, cdef: CompositeDef, types: dict[str, DType], dims: dict[str, int],
                    options: Options | None = None) -> Program:
    """Elaborate one composite for one binding of its type variables and dims into a Program,
    running the rewrite rules `options` select.

    Built-in rule sets run from -O1 (see caten.rewrite.LEVELS), `fastmath` only with
    `options.fast_math`; the program's own `defoptimizer` rules and the user rule files
    (`options.rules`) run at every level. Rules with `:runtime R` apply only when
    `options.runtime` is R. `options.explain`, when given (a caten.rewrite.Explain), collects what
    each rule did. `options.debug` checks the graph after each stage (caten.ir.verify)."""
    o = options or Options(runtime="numpy")
    with verify.checking(o.debug):
        return _compile_program(src, cdef, types, dims, o)


def _compile_program(src: Source, cdef: CompositeDef, types: dict[str, DType], dims: dict[str, int],
                     o: Options) -> Program:
    from caten import rewrite
    from caten.elaborate.elaborator import Elaborator  # imported here: a cached program never needs it

    files = list(o.rules) + ([rewrite.FAST_MATH] if o.fast_math else [])
    user = {k: v for k, v in src.by_name.items()}
    rules_list = rewrite.rules_for(src.unit.rules, o.opt_level, files, rewrite.library_names() | set(user))
    engine = rewrite.Engine(rules_list, o.runtime, o.explain)
    if engine.empty:
        return add_nonempty_constraints(Elaborator(user).compile(cdef, types, dims))
    elab = Elaborator(user, call_hook=engine.call_hook if engine.call_index else None)
    engine.elab = elab
    prog = elab.compile(cdef, types, dims)
    if engine.op_index:
        prog.nodes = engine.rewrite(prog.nodes, cdef.name)
    return add_nonempty_constraints(prog)
