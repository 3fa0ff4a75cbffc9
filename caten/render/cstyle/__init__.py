"""One C-style renderer of the loop IR, shared by plain C, OpenCL C and CUDA C.

The three targets differ only in the small `Target` tables below: type names, qualifiers,
bit casts, math function names, the thread-index expressions, shared memory and barriers.
Everything else — expressions, casts with caten's semantics (saturating float->int, f16/bf16
computed in f32 and rounded after every op), masks, the primitives the decompose pass writes
EXP2/LOG2/SIN, IDIV/MOD, MAX and the counter-based RNG in (`prims`) — is rendered once here.

Plain C runs each loop-IR kernel as one serial function. The device targets map a kernel
to one or more device kernels (`DeviceKernel`): the leading loops whose iterations are
independent are spread over the grid — one work-item per iteration ("items" mode), or one
work-group per iteration whose work-items share the inner loops ("groups" mode: strided
loops, tree reductions in local/shared memory, barriers between stages).
`device_program` maps a lowered program (from caten.pipeline) onto the grid and returns what a host needs to run the
result (buffers with sizes, launches with sizes as expressions of the dims) — the same data
the JSON manifest beside `-S` output holds.

The modules: `targets` (the target tables and dtype spellings), `helpers` (the C helper
functions), `prims` (the spellings of the
decompose pass's primitives), `fn` (one function body: expressions, casts, ALU, loops), `grid` (the device
mapping and kernels), `gemm` (a GPU's GEMMs as thread-block tiles), `loops` (what the mappings read off
the loop IR), `program` (device programs, their source file and manifest). This package
exports what the runtimes use.
"""

from caten.render.cstyle.fn import Fn, c_function
from caten.render.cstyle.gemm import Tile
from caten.render.cstyle.helpers import helper_source
from caten.render.cstyle.program import SUM_GROUPS, DeviceProgram, device_program, device_source, manifest
from caten.render.cstyle.targets import CUDA, OPENCL, C, eval_dim, stype

__all__ = ["C", "OPENCL", "CUDA", "stype", "eval_dim", "helper_source", "Fn", "c_function",
           "DeviceProgram", "device_program", "Tile", "SUM_GROUPS", "device_source", "manifest"]
