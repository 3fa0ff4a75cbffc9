"""Loop IR -> LLVM IR text for the host CPU.

Text rather than llvmlite.ir because kernels need fast-math flags on reduction updates and
string function attributes ("prefer-vector-width"="512"), which llvmlite.ir cannot spell.
EXP2/LOG2/SIN are inline polynomials (vectorizable; no libm call in a loop). f16/bf16/float8 are
computed in f32 and rounded after every op. Integer division by zero gives 0, never UB.

The modules: `values` (type names, constants), `emit` (the instruction plumbing), `fn` (one
function's body: values, memory, casts, ALU, loops), `numerics` and `sin` (the inline float/int
numerics), `threads` (parallel loops on pthreads), `gemm` (the matmul micro-kernel), `module`
(the LLVM module as a container), `kernel` (the kernel functions), `entry` (the C ABI entry
points and the C header). This package exports what the runtimes use, each loaded on first use:
a warm start (cached code) imports `units` alone and never the renderer.
"""

from typing import Any

__all__ = ["ModuleGen", "entry_functions", "c_header"]


def __getattr__(name: str) -> Any:
    if name in ("c_header", "entry_functions"):
        from caten.render.llvm.entry import c_header, entry_functions

        return {"c_header": c_header, "entry_functions": entry_functions}[name]
    if name == "ModuleGen":
        from caten.render.llvm.kernel import ModuleGen

        return ModuleGen
    raise AttributeError(f"module 'caten.render.llvm' has no attribute {name!r}")
