"""Complex arrays at the call boundary of a compiled composite.

A c64/c128 parameter or output is two real buffers in the compiled program (NAME_re, NAME_im:
caten/elaborate/complex.py); here numpy complex64/complex128 arguments are split into them and
the two real results of a complex output joined back, so the caller sees numpy's complex arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.ir.program import Program, TensorSpec
from caten.read.program import CompositeDef

COMPLEX_NAMES = ("c64", "c128")


def complex_dtype(name_or_np: Any) -> Any:
    """The language's complex dtype (caten.elaborate.values.CDType) of a name or a numpy dtype, or None."""
    if isinstance(name_or_np, str) and name_or_np not in COMPLEX_NAMES:
        return None
    if not isinstance(name_or_np, str) and np.dtype(name_or_np).kind != "c":
        return None
    from caten.elaborate.values import C64, C128

    if isinstance(name_or_np, str):
        return C64 if name_or_np == "c64" else C128
    return {np.dtype(np.complex64): C64, np.dtype(np.complex128): C128}.get(np.dtype(name_or_np))


def _layout(names: list[str], specs: list[TensorSpec]) -> list[bool]:
    """For each declared name, whether the program holds it as a (NAME_re, NAME_im) pair."""
    out, k = [], 0
    for n in names:
        pair = specs[k].name != n
        out.append(pair)
        k += 2 if pair else 1
    return out


def split(cdef: CompositeDef, prog: Program, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The program's real arguments: each complex array as its real and imaginary parts."""
    out = []
    for pair, a in zip(_layout([p.name for p in cdef.params], prog.inputs), arrays):
        out += [np.ascontiguousarray(a.real), np.ascontiguousarray(a.imag)] if pair else [a]
    return out


def join(cdef: CompositeDef, prog: Program, outs: list[np.ndarray], out: Any) -> list[np.ndarray]:
    """The caller's results: each (re, im) pair of real results as one complex array."""
    if out is not None:
        raise Error(f"`{cdef.name}` has complex outputs: out= is not available", hint="call it without out=")
    res, k = [], 0
    for pair in _layout([p.name for p in cdef.outputs], prog.outputs):
        if pair:
            re, im = outs[k], outs[k + 1]
            z = np.empty(re.shape, np.complex64 if re.dtype == np.float32 else np.complex128)
            z.real, z.imag = re, im
            res.append(z)
        else:
            res.append(outs[k])
        k += 2 if pair else 1
    return res
